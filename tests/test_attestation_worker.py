"""Layer 3's Sigstore check in a child process (updater/trust/attestation_worker.py).

The child is real: this checkout run as ``python -m updater __verify-attestation``, verifying
bundles minted by a throwaway Sigstore instance. Children that misbehave (exit, crash, hang,
lie, talk too much) are real processes too, put where the worker would start mux; each one
must fail the layer with one line, and none may outlive the update.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.inprocess import run_in_process
from tests.support.installs import bootstrap
from tests.support.releases import attest_release, make_keypair, make_release, serve_directory
from updater.config import buildinfo
from updater.config.buildinfo import OIDC_ISSUER, SIGNER_WORKFLOW
from updater.errors import VerificationError
from updater.trust import attestation_start, attestation_worker
from updater.trust.attestation import AttestationIdentity
from updater.trust.attestation_start import prestart
from updater.trust.attestation_worker import AttestationWorker, early, start

REPO = "acme/mux"
DIGEST = hashlib.sha256(b"the archive").hexdigest()
IDENTITY = AttestationIdentity(
    repository=REPO, signer_workflow=SIGNER_WORKFLOW, ref="refs/tags/v1.0.0", issuer=OIDC_ISSUER
)


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture
def bundle(sigstore: FakeSigstore) -> bytes:
    return sigstore.attest({"mux.tar.gz": DIGEST}, repository=REPO, ref="refs/tags/v1.0.0")


@pytest.fixture(autouse=True)
def nothing_prestarted() -> Iterator[None]:
    yield
    while (process := attestation_start.take_prestarted()) is not None:
        AttestationWorker(process).close()


def _verify(worker: AttestationWorker, bundle: bytes, sigstore: FakeSigstore, **kwargs):
    warnings: list[str] = []
    report = worker.verify(
        [bundle],
        kwargs.get("sha256", DIGEST),
        kwargs.get("identity", IDENTITY),
        trusted_root=sigstore.trusted_root_path,
        warn=warnings.append,
    )
    return report, warnings


def test_the_child_verifies_the_bundle_for_the_digest_it_was_given(
    bundle: bytes, sigstore: FakeSigstore
) -> None:
    with start() as worker:
        report, warnings = _verify(worker, bundle, sigstore)
    assert report.repository == REPO
    assert report.signer_workflow == SIGNER_WORKFLOW
    assert report.signer_ref == "refs/tags/v1.0.0"
    assert [s.sha256 for s in report.subjects] == [DIGEST]
    assert report.trust_root == f"file:{sigstore.trusted_root_path}"
    assert warnings == []


def test_the_child_holds_the_bundle_to_the_identity_and_digest_the_parent_gives(
    bundle: bytes, sigstore: FakeSigstore
) -> None:
    other = AttestationIdentity(
        repository="acme/other", signer_workflow=SIGNER_WORKFLOW, ref="refs/tags/v1.0.0"
    )
    with start() as worker, pytest.raises(VerificationError) as refused:
        _verify(worker, bundle, sigstore, identity=other)
    assert refused.value.message.startswith("attestation: ")
    assert "acme/other" in refused.value.message
    with start() as worker, pytest.raises(VerificationError) as refused:
        _verify(worker, bundle, sigstore, sha256="0" * 64)
    assert f"no subject has sha256 {'0' * 64}" in refused.value.message


def _posing_as_mux(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Make the worker start ``script`` (a real process) where it would start this mux."""
    monkeypatch.setattr(buildinfo, "current_mux_command", lambda: [sys.executable, "-c", script])


ANSWER_FOR_ANOTHER_DIGEST = f"""
import json, sys
sys.stdin.read()
print(json.dumps({{"ok": True, "sha256": "{"1" * 64}", "warnings": [], "report": {{
    "repository": "acme/mux", "source_repository_uri": "https://github.com/acme/mux",
    "signer_identity": "x", "signer_workflow": "w", "signer_ref": "r", "source_ref": None,
    "source_commit": None, "issuer": "i", "runner_environment": None, "predicate_type": "p",
    "subjects": [{{"name": "mux.tar.gz", "sha256": "{"1" * 64}"}}], "log_index": 1,
    "integrated_time": None, "trust_root": "t"}}}}))
"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("import sys; sys.exit(7)", "the verifier exited with status 7 without an answer"),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            f"the verifier exited with signal {int(signal.SIGKILL)} without an answer",
        ),
        (
            "import sys; sys.stdin.read(); sys.stderr.write('boom\\n'); print('not json')",
            "without an answer (boom)",
        ),
        ("import sys; sys.stdin.read(); print('{\"ok\": true}')", "answer is malformed"),
        ("import sys; sys.stdin.read(); print('{\"ok\": false}')", "refused without saying why"),
        (
            'import sys; sys.stdin.read(); print(\'{"ok": false, "error": "fine"}\')',
            "refused without saying why",
        ),
        (ANSWER_FOR_ANOTHER_DIGEST, f"answered for another digest than sha256 {DIGEST}"),
        (
            "import sys; sys.stdin.read(); sys.stdout.write('x' * 400000)",
            "answered more than 262144 bytes",
        ),
    ],
    ids=["exits", "killed", "garbage", "half", "unsaid", "unprefixed", "other-digest", "endless"],
)
def test_a_child_that_misbehaves_fails_the_layer_with_one_line(
    monkeypatch: pytest.MonkeyPatch, bundle: bytes, sigstore: FakeSigstore, script, expected
) -> None:
    _posing_as_mux(monkeypatch, script)
    with start() as worker, pytest.raises(VerificationError) as refused:
        _verify(worker, bundle, sigstore)
    assert refused.value.message.startswith("attestation: ")
    assert expected in refused.value.message
    assert "\n" not in refused.value.message


def test_a_child_that_hangs_is_killed_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch, bundle: bytes, sigstore: FakeSigstore, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    _posing_as_mux(
        monkeypatch,
        f"import os, threading; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "threading.Event().wait()",
    )
    monkeypatch.setattr(attestation_worker, "WORKER_TIMEOUT", 1.0)
    # A request larger than a pipe holds: the child never reads it, and still the deadline holds.
    with start() as worker, pytest.raises(VerificationError, match="no answer within 1 s"):
        worker.verify(
            [bundle, os.urandom(1 << 20)],
            DIGEST,
            IDENTITY,
            trusted_root=sigstore.trusted_root_path,
            warn=print,
        )
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left behind
        os.kill(int(pid_file.read_text()), 0)


def test_a_child_that_cannot_start_fails_the_layer_only_when_it_is_reached(
    monkeypatch: pytest.MonkeyPatch, bundle: bytes, sigstore: FakeSigstore, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-mux")
    monkeypatch.setattr(buildinfo, "current_mux_command", lambda: [missing])
    worker = start()  # no exception here: an update that needs no attestation goes on
    with pytest.raises(VerificationError, match="attestation: cannot start the verifier"):
        _verify(worker, bundle, sigstore)
    worker.close()


def test_a_child_nobody_asked_is_stopped_and_reaped() -> None:
    worker = start()
    process = worker._process
    assert process is not None
    worker.close()
    assert process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)
    worker.close()  # twice is harmless (the CLI's exit closes what an update already closed)


def test_a_bad_request_gets_a_refusal_not_a_traceback() -> None:
    worker = start()
    process = worker._process
    assert process is not None and process.stdin is not None
    out, err = process.communicate(b'{"bundles": "not a list"}', timeout=120)
    answer = json.loads(out)
    assert answer["ok"] is False
    assert answer["error"].startswith("attestation: bad request to the verifier")
    assert b"Traceback" not in err


@pytest.mark.parametrize(
    "args", [["--check"], ["--rollback"], ["--prune"], ["--help"], ["--check=x"]]
)
def test_nothing_is_prestarted_for_an_update_that_verifies_no_archive(args) -> None:
    prestart(args)
    assert attestation_start._prestarted == []


def test_the_prestarted_child_is_the_one_the_update_gets(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setenv("MUX_REPO", REPO)
    prestart(["--version", "1.2.3"])
    (prestarted,) = attestation_start._prestarted
    worker = early(REPO)
    assert worker is not None and worker._process is prestarted
    assert attestation_start._prestarted == []
    worker.close()


def test_on_one_core_nothing_starts_early(monkeypatch) -> None:
    """There the child would only slow what runs before the layer."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setenv("MUX_REPO", REPO)
    prestart([])
    assert attestation_start._prestarted == []
    assert early(REPO) is None


def test_without_a_repository_nothing_starts_early(monkeypatch) -> None:
    """A build that knows no repository cannot have an attestation verified (no workflow to
    name), so no child is started ahead of the layer: the update pays nothing for it."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delenv("MUX_REPO", raising=False)
    prestart(["--version", "1.2.3"])
    assert attestation_start._prestarted == []
    assert early("") is None
    monkeypatch.setenv("MUX_REPO", REPO)
    prestart(["--version", "1.2.3"])
    assert len(attestation_start._prestarted) == 1  # the same call, with a repository


def test_an_update_for_a_build_without_a_repository_starts_no_verifier(
    tmp_path: Path, sandbox_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attestation layer is skipped for such a build before any bundle is checked, so the
    install starts no child for it (each cost its sigstore import); with a repository it
    starts one, and the layer runs."""
    started: list[object] = []
    spawn = attestation_worker.spawn

    def counted():  # type: ignore[no-untyped-def]
        started.append(spawn())
        return started[-1]

    monkeypatch.setattr(attestation_worker, "spawn", counted)
    keypair = make_keypair(tmp_path / "keys")
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        make_release(feed, version, protocol_version=1, keypair=keypair)
    with serve_directory(feed) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=keypair.public_key
        )
        assert started == []
        updated = run_in_process(
            ["update", "-v", "--home", str(install.home), "--trust-key", keypair.public_key],
            {**install.env, "MUX_REPO": REPO},
        )
    assert updated.returncode == 0, updated.stderr
    assert len(started) == 1 and "attestation" in updated.stdout + updated.stderr


def _verifier_processes(home: Path) -> list[int]:
    """Every live verifier child started with this HOME."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"__verify-attestation" in cmdline and f"HOME={home}".encode() in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_mux_update_leaves_no_verifier_behind_whatever_happens(
    tmp_path: Path, sandbox_env: dict[str, str], sigstore: FakeSigstore
) -> None:
    keypair = make_keypair(tmp_path / "keys")
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        release = make_release(feed, version, protocol_version=1, keypair=keypair, repo=REPO)
        attest_release(release, version, sigstore, keypair, REPO)
    env = {
        **sandbox_env,
        "MUX_REPO": REPO,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
    }
    home = Path(env["HOME"])
    with serve_directory(feed) as url:
        install = bootstrap(
            tmp_path, env, source=url, version="0.1.0", public_key=keypair.public_key
        )
        installed = install.run("update")  # verified, its attestation by the child
        assert installed.returncode == 0, installed.stderr
        again = install.run("update")  # up to date: the prestarted child goes unused
        assert again.returncode == 0, again.stderr
        assert "mux 0.2.0 is already installed" in again.stdout
        refused = install.run("update", "--version", "9.9.9")  # fails before the layer
    assert refused.returncode == 1, refused.stderr
    assert "does not list v9.9.9" in refused.stderr
    assert _verifier_processes(home) == []


def test_a_package_named_updater_in_the_working_directory_is_not_the_verifier(
    tmp_path: Path, monkeypatch, bundle: bytes, sigstore: FakeSigstore
) -> None:
    """`python -m updater` puts the working directory first on sys.path: run from a folder
    holding an `updater/` (a cloned repository, another checkout), the child would be that
    code, and a stand-in that answers "ok" for any digest would pass layer 3."""
    fake = tmp_path / "cwd" / "updater"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import json, sys\n"
        "request = json.loads(sys.stdin.buffer.read())\n"
        "texts = ('repository', 'source_repository_uri', 'signer_identity', 'signer_workflow',\n"
        "         'signer_ref', 'issuer', 'predicate_type', 'trust_root')\n"
        "report = {name: 'x' for name in texts}\n"
        "report.update(source_ref=None, source_commit=None, runner_environment=None,\n"
        "              log_index=1, integrated_time=None,\n"
        "              subjects=[{'name': 'mux.tar.gz', 'sha256': request['sha256']}])\n"
        "print(json.dumps({'ok': True, 'sha256': request['sha256'], 'report': report}))\n"
    )
    monkeypatch.chdir(fake.parent)
    other = hashlib.sha256(b"other bytes").hexdigest()  # the bundle does not attest these
    with start() as worker, pytest.raises(VerificationError) as failed:
        _verify(worker, bundle, sigstore, sha256=other)
    assert failed.value.message.startswith("attestation: ")


@pytest.mark.parametrize(
    ("cpu_max", "spare"),
    [
        ("max 100000\n", True),
        ("200000 100000\n", True),
        ("150000 100000\n", False),  # one and a half CPUs: the child would take the parent's
        ("50000 100000\n", False),
        (None, True),  # no cgroup v2 file: only the cores count
        ("garbage\n", True),
    ],
)
def test_a_containers_cpu_quota_counts_as_cores(tmp_path: Path, monkeypatch, cpu_max, spare):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    proc_self = tmp_path / "proc"
    proc_self.mkdir()
    (proc_self / "cgroup").write_text("0::/system.slice/box.scope\n")
    group = tmp_path / "cgroup" / "system.slice" / "box.scope"
    group.mkdir(parents=True)
    if cpu_max is not None:
        (group / "cpu.max").write_text(cpu_max)
    assert attestation_start.spare_core(str(tmp_path / "cgroup"), str(proc_self)) is spare
