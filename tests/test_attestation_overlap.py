"""Layer 3 runs while the archive downloads, and still holds the bytes on disk to account.

The attestation worker starts as soon as the signed ``SHA256SUMS`` gives the archive's digest
(updater/trust/pipeline.py) and hands the bundle to its child process (updater/trust/attestation_worker.py).
These tests serve the archive from a loopback server that stops halfway through it and holds
the rest until something only the overlap can produce has happened: the attestation verified
(the library pipeline, its child's answer received) or its bundle requested (``mux update``, a
real process). A pipeline that attests after the download never gets
there: the server gives up after :data:`HOLD` seconds, sends the rest, and the test fails
on the recorded order. Passing runs never wait for that bound.

Failures keep their layer and their one line: a bad bundle, an archive that is not the signed
one, a worker that breaks; and none leaves anything behind.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from release.publish.delta import write_deltas
from release.publish.package import rehash_sums
from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serve_handler
from tests.support.installs import Install, bootstrap, leftovers, snapshot
from tests.support.releases import (
    KeyPair,
    flip_byte,
    make_keypair,
    make_release,
    serve_directory,
    sign_release_dir,
)
from updater.config.buildinfo import OIDC_ISSUER, SIGNER_WORKFLOW
from updater.config.settings import HttpSettings
from updater.config.targets import detect_target
from updater.core.transfer import DELTA
from updater.errors import VerificationError
from updater.formats import models
from updater.formats.delta import file_list_name
from updater.install.layout import Layout, kept_builds, read_record
from updater.sources.base import ReleaseSource
from updater.sources.feed import FeedSource
from updater.trust import attestation
from updater.trust.attestation_worker import AttestationWorker
from updater.trust.attestation_worker import start as start_worker
from updater.trust.attested import AttestationInBackground
from updater.trust.layers import VerificationLog, VerifiedFiles, VerifiedRelease
from updater.trust.pipeline import FilesRequest, verify_release_files, verify_release_metadata
from updater.trust.sums import signed_digest
from updater.trust.trust_policy import TrustPolicy

REPO = "acme/mux"
TARGET = detect_target()
ARCHIVE = models.archive_name(TARGET)
HOLD = 60.0  # the bound a sequential pipeline would hit; a passing run never waits for it
SLOW_NETWORK = HttpSettings(timeout=HOLD + 30, retries=0)  # the held read must not time out


def attest(release: Path, sigstore: FakeSigstore, version: str, keypair: KeyPair) -> None:
    """Attest the release's archive and manifest as the release workflow would, and re-sign."""
    sigstore.attest_release(release, version, repository=REPO)
    sign_release_dir(release, keypair)


class Gate:
    """What the loopback server saw, in order, and the event it holds the archive for."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.events: list[str] = []
        self.held_until_opened: bool | None = None

    def record(self, event: str) -> None:
        self.events.append(event)


@contextmanager
def holding_server(feed: Path, gate: Gate, *, open_on_request: str | None = None) -> Iterator[str]:
    """Serve ``feed``; send half of v0.2.0's archive, then hold the rest until ``gate`` opens.

    ``open_on_request``: a file name whose request opens the gate (else the test opens it).
    """

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            name = self.path.rsplit("/", 1)[-1]
            if open_on_request is not None and name == open_on_request:
                gate.record(f"requested {name}")
                gate.opened.set()
            if self.path != f"/v0.2.0/{ARCHIVE}":
                super().do_GET()
                return
            data = (feed / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            half = len(data) // 2
            self.wfile.write(data[:half])
            self.wfile.flush()
            gate.record("archive held")
            gate.held_until_opened = gate.opened.wait(HOLD)
            gate.record("archive released")
            self.wfile.write(data[half:])

    with serve_handler(functools.partial(Handler, directory=str(feed))) as url:
        try:
            yield url
        finally:
            gate.opened.set()  # never leave a handler waiting


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture
def feed(tmp_path: Path, keypair: KeyPair, sigstore: FakeSigstore) -> Path:
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        release = make_release(feed, version, protocol_version=1, keypair=keypair, repo=REPO)
        attest(release, sigstore, version, keypair)
    return feed


def policy(keypair: KeyPair, sigstore: FakeSigstore) -> TrustPolicy:
    return TrustPolicy(
        minisign_keys=(keypair.public_key,),
        require_signature=True,
        repository=REPO,
        signer_workflow=SIGNER_WORKFLOW,
        oidc_issuer=OIDC_ISSUER,
        require_attestation=True,
        trusted_root=sigstore.trusted_root_path,
    )


def test_the_attestation_is_verified_while_the_archive_is_still_downloading(
    tmp_path: Path, feed: Path, keypair: KeyPair, sigstore: FakeSigstore, monkeypatch
) -> None:
    gate = Gate()
    real_verify = AttestationWorker.verify

    def verify_and_open(*args: Any, **kwargs: Any) -> attestation.AttestationReport:
        report = real_verify(*args, **kwargs)  # the real check (its child); the gate records it
        gate.record("attestation verified")
        gate.opened.set()
        return report

    monkeypatch.setattr(AttestationWorker, "verify", verify_and_open)
    trust = policy(keypair, sigstore)
    log = VerificationLog()
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with holding_server(feed, gate) as url, FeedSource(url, http=SLOW_NETWORK) as source:
        release = verify_release_metadata(source, "v0.2.0", trust, log)
        verified = _verify_files(source, release, trust, log, tmp_path, unpacked)
    assert sorted(gate.events) == sorted(
        ["archive held", "attestation verified", "archive released"]
    )
    assert gate.events[-1] == "archive released"
    assert gate.held_until_opened is True
    assert [(layer.layer, layer.status) for layer in log.layers] == [
        ("signature", "ok"),
        ("manifest", "ok"),
        ("digest", "ok"),
        ("attestation", "ok"),
        ("archive", "ok"),
        ("smoke-test", "ok"),
    ]
    assert verified.archive_sha256 == release.sums[ARCHIVE]
    assert (unpacked / "mux").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".download-")] == []


@pytest.fixture
def installed(tmp_path: Path, sandbox_env: dict[str, str], feed: Path, keypair: KeyPair, sigstore):
    env = {
        **sandbox_env,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        "MUX_REPO": REPO,  # the repository that must have attested (mux runs from the checkout)
        "MUX_HTTP_TIMEOUT": str(HOLD + 30),
        "MUX_HTTP_RETRIES": "0",
    }
    return lambda url: bootstrap(
        tmp_path, env, source=url, version="0.1.0", public_key=keypair.public_key
    )


def test_mux_update_fetches_the_bundle_while_the_archive_downloads(feed: Path, installed) -> None:
    gate = Gate()
    bundle = models.attestation_name("0.2.0")
    with holding_server(feed, gate, open_on_request=bundle) as url:
        install: Install = installed(url)
        result = install.run("update", "-v")  # -v: every layer's line
    assert result.returncode == 0, (result.stdout, result.stderr)
    # The bundle was asked for before the archive's second half left the server (usually
    # while it was held; the worker may even be first).
    assert sorted(gate.events) == sorted(
        ["archive held", f"requested {bundle}", "archive released"]
    )
    assert gate.events[-1] == "archive released"
    assert gate.held_until_opened is True
    lines = result.stdout.splitlines()
    layers = [line.split(":")[0].strip() for line in lines if ": ok: " in line]
    assert layers == ["signature", "manifest", "digest", "attestation", "archive", "smoke-test"]
    assert install.active() == "0.2.0"


def _refused(install: Install, layer: str, text: str, *, process: bool = False) -> None:
    before = snapshot(install.home, install.bin_dir)
    result = install.run("update", process=process)
    assert result.returncode == 3, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"mux: error: verification failed ({layer}): "), result.stderr
    assert text in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    after = snapshot(install.home, install.bin_dir)
    lock = str(install.home / ".lock")
    assert {k: v for k, v in after.items() if k != lock} == {
        k: v for k, v in before.items() if k != lock
    }
    assert install.active() == "0.1.0"


def test_a_bundle_for_other_bytes_still_refuses_and_leaves_nothing(
    feed: Path, installed, sigstore: FakeSigstore, keypair: KeyPair
) -> None:
    release = feed / "v0.2.0"
    other = hashlib.sha256(b"another archive").hexdigest()
    bundle = sigstore.attest({ARCHIVE: other}, repository=REPO, ref="refs/tags/v0.2.0")
    (release / models.attestation_name("0.2.0")).write_bytes(bundle)
    rehash_sums(release)
    sign_release_dir(release, keypair)
    signed = hashlib.sha256((release / ARCHIVE).read_bytes()).hexdigest()
    with serve_directory(feed) as url:
        _refused(installed(url), "attestation", f"no subject has sha256 {signed}")


def test_a_bundle_from_another_workflow_still_refuses(
    feed: Path, installed, sigstore: FakeSigstore, keypair: KeyPair
) -> None:
    release = feed / "v0.2.0"
    digest = hashlib.sha256((release / ARCHIVE).read_bytes()).hexdigest()
    bundle = sigstore.attest({ARCHIVE: digest}, repository="mallory/mux", ref="refs/tags/v0.2.0")
    (release / models.attestation_name("0.2.0")).write_bytes(bundle)
    rehash_sums(release)
    sign_release_dir(release, keypair)
    with serve_directory(feed) as url:
        _refused(installed(url), "attestation", "mallory/mux")


def test_an_archive_that_is_not_the_signed_one_fails_its_digest_while_attested(
    feed: Path, installed
) -> None:
    """The worker attests the signed digest; the bytes that arrive are held to it (layer 2)."""
    with serve_directory(feed) as url:
        install = installed(url)
        flip_byte(feed / "v0.2.0" / ARCHIVE, 1000)
        # A real process: a verification failure's exit code (3) and one line as a shell
        # sees them (the other cases run in this process).
        _refused(install, "digest", ARCHIVE, process=True)


class BrokenBundleSource(FeedSource):
    """A feed whose bundle cannot be read for a reason no layer anticipates."""

    def fetch(self, tag: str, name: str, *, max_size: int = 1 << 20) -> bytes:
        if name.endswith(".sigstore.json"):
            raise RuntimeError("the bundle store fell over")
        return super().fetch(tag, name, max_size=max_size)


def _metadata(
    source: ReleaseSource, keypair: KeyPair, sigstore: FakeSigstore
) -> tuple[VerifiedRelease, TrustPolicy]:
    trust = policy(keypair, sigstore)
    return verify_release_metadata(source, "v0.2.0", trust, VerificationLog()), trust


def _verify_files(
    source: ReleaseSource,
    release: VerifiedRelease,
    trust: TrustPolicy,
    log: VerificationLog,
    download_dir: Path,
    unpack_dir: Path,
    **request: Any,
) -> VerifiedFiles:
    """Layers 2 to 5 for this machine's archive of ``release``, as ``mux update`` runs them."""
    asset = release.manifest.asset_for(TARGET)
    assert asset is not None
    files = FilesRequest(download_dir, unpack_dir, smoke_target=TARGET, smoke_timeout=60, **request)
    return verify_release_files(source, release, asset, trust, log, files)


class _Disk:
    """An install's disk as the pipeline sees it: told of each file, then of the tree."""

    def __init__(self, on_unpacked: Callable[[Path], None]) -> None:
        self.on_unpacked = on_unpacked

    def flush_file(self, path: str) -> None:
        pass

    def flush_unpacked(self, staged: Path) -> None:
        self.on_unpacked(staged)


def test_a_worker_that_breaks_is_the_attestation_layers_one_line(
    tmp_path: Path, feed: Path, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    source = BrokenBundleSource(str(feed))
    release, trust = _metadata(source, keypair, sigstore)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with pytest.raises(VerificationError) as failure:
        _verify_files(source, release, trust, VerificationLog(), tmp_path, unpacked)
    assert failure.value.message == (
        "verification failed (attestation): RuntimeError: the bundle store fell over"
    )
    assert failure.value.exit_code == 3
    assert list(unpacked.iterdir()) == []  # nothing unpacked
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".download-")] == []


class FailingDownloadSource(FeedSource):
    """A feed whose archive download fails as soon as the attestation worker is busy; the
    worker then finishes only after that failure (what it did is recorded, in order)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.events: list[str] = []
        self._busy = threading.Event()
        self._failed = threading.Event()

    def fetch(self, tag: str, name: str, *, max_size: int = 1 << 20) -> bytes:
        if name.endswith(".sigstore.json"):
            self._busy.set()
            self._failed.wait(HOLD)
            self.events.append("worker fetching")
        return super().fetch(tag, name, max_size=max_size)

    def download(self, *args: Any, **kwargs: Any) -> Any:
        assert self._busy.wait(HOLD)
        self.events.append("download failed")
        self._failed.set()
        raise OSError("the connection was reset")


def test_a_failed_download_waits_for_the_worker_before_it_reports(
    tmp_path: Path, feed: Path, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    """A process that exits with a thread inside sigstore can crash instead of exiting 3."""
    source = FailingDownloadSource(str(feed))
    release, trust = _metadata(source, keypair, sigstore)
    with pytest.raises(OSError, match="reset"):
        _verify_files(source, release, trust, VerificationLog(), tmp_path, tmp_path / "unpacked")
    # The worker went on after the failure, and was done before the failure was reported.
    assert source.events == ["download failed", "worker fetching"]
    assert not [t for t in threading.enumerate() if t.name == "mux-attestation"]


def test_the_download_must_have_exactly_the_attested_digest(
    feed: Path, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    source = FeedSource(str(feed))
    release, trust = _metadata(source, keypair, sigstore)
    signed = signed_digest(ARCHIVE, sums=release.sums, manifest=release.manifest)
    log = VerificationLog()
    with start_worker() as child:
        worker = AttestationInBackground(source, release, signed, trust, child)
        with pytest.raises(VerificationError, match=r"verification failed \(attestation\): the "):
            worker.finish("0" * 64, log)
    assert log.layers == []
    with start_worker() as child:
        worker = AttestationInBackground(source, release, signed, trust, child)
        worker.finish(signed, log)
    assert [(layer.layer, layer.status) for layer in log.layers] == [("attestation", "ok")]


def test_a_manifest_that_disagrees_with_the_signed_sums_fails_before_downloading(
    feed: Path, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    source = FeedSource(str(feed))
    release, _ = _metadata(source, keypair, sigstore)
    (asset,) = [a for a in release.manifest.assets if a.name == ARCHIVE]
    lying = dataclasses.replace(
        release.manifest, assets=(dataclasses.replace(asset, sha256="f" * 64),)
    )
    with pytest.raises(VerificationError, match=r"verification failed \(digest\): manifest"):
        signed_digest(ARCHIVE, sums=release.sums, manifest=lying)


def test_a_deltas_tree_is_handed_over_to_be_made_durable_before_layer_3_answers(
    tmp_path: Path,
    sandbox_env: dict[str, str],
    keypair: KeyPair,
    sigstore: FakeSigstore,
    monkeypatch,
) -> None:
    """The tree a delta builds is complete long before the Sigstore child answers (its import
    of sigstore is the longest step of a delta update): ``on_unpacked`` gets it then, so an
    install writes it out meanwhile instead of after the answer. The worker's answer is held
    until the tree is handed over; a pipeline that handed it over only after the answer would
    hold it for :data:`HOLD` seconds and fail on the recorded order."""
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        make_release(feed, version, protocol_version=1, keypair=keypair, repo=REPO)
    write_deltas(feed / "v0.2.0", [feed / "v0.1.0"])
    for version in ("0.1.0", "0.2.0"):
        attest(feed / f"v{version}", sigstore, version, keypair)
    handed_over = threading.Event()
    events: list[str] = []
    real_verify = AttestationWorker.verify

    def verify_when_handed_over(*args: Any, **kwargs: Any) -> attestation.AttestationReport:
        report = real_verify(*args, **kwargs)
        events.append("attestation answered" if handed_over.wait(HOLD) else "gave up waiting")
        return report

    def on_unpacked(folder: Path) -> None:
        assert (folder / "mux").is_file()
        events.append("tree handed over")
        handed_over.set()

    trust = policy(keypair, sigstore)
    log = VerificationLog()
    staging = tmp_path / "staging"
    staging.mkdir()
    with serve_directory(feed) as url:
        install = bootstrap(
            tmp_path / "install",
            {
                **sandbox_env,
                "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
                "MUX_REPO": REPO,
            },
            source=url,
            version="0.1.0",
            public_key=keypair.public_key,
        )
        # Held from here on: the install above (in this process) verified its own release.
        monkeypatch.setattr(AttestationWorker, "verify", verify_when_handed_over)
        layout = Layout(str(install.home), str(install.bin_dir))
        with FeedSource(url) as source:
            release = verify_release_metadata(source, "v0.2.0", trust, log)
            kept = kept_builds(layout, read_record(layout), TARGET)
            verified = _verify_files(
                source, release, trust, log, tmp_path, staging, disk=_Disk(on_unpacked), kept=kept
            )
    assert verified.transfer.method == DELTA, verified.transfer
    assert events == ["tree handed over", "attestation answered"]
    assert ("attestation", "ok") in [(layer.layer, layer.status) for layer in log.layers]


def test_a_delta_its_attestation_does_not_name_falls_back_to_the_attested_archive(
    tmp_path: Path, sandbox_env: dict[str, str], keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    """The one fault of a delta found only after its tree is built and handed over to be made
    durable: the bundle attests the archive but not the file list. The staging folder is
    emptied while the fsync thread may still be walking it, the full archive is installed in
    the same run (its own layer 3 passes), and nothing is left behind."""
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        make_release(feed, version, protocol_version=1, keypair=keypair, repo=REPO)
    release = feed / "v0.2.0"
    write_deltas(release, [feed / "v0.1.0"])
    attest(feed / "v0.1.0", sigstore, "0.1.0", keypair)
    subjects = models.parse_sha256sums((release / models.SUMS_NAME).read_bytes())
    del subjects[file_list_name(TARGET)]
    (release / models.attestation_name("0.2.0")).write_bytes(
        sigstore.attest(subjects, repository=REPO, ref="refs/tags/v0.2.0")
    )
    rehash_sums(release)
    sign_release_dir(release, keypair)
    env = {
        **sandbox_env,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        "MUX_REPO": REPO,
    }
    with serve_directory(feed) as url:
        install = bootstrap(
            tmp_path / "install", env, source=url, version="0.1.0", public_key=keypair.public_key
        )
        result = install.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    transfer = report["transfer"]
    assert transfer["method"] == "full", transfer
    assert "(attestation): subject digest mismatch" in transfer["fallback_reason"], transfer
    warnings = [line for line in result.stderr.splitlines() if line.startswith("mux: warning: ")]
    assert len(warnings) == 1 and "downloading the full archive" in warnings[0], warnings
    assert install.reported_version()["version"] == "0.2.0"
    assert (install.home / "versions" / "0.1.0" / "mux").is_file()
    assert leftovers(install) == []
