"""``mux-release rehearse``: a whole release, offline, on this machine, in one command.

Build mux twice (the second release with a higher version and a bumped protocol), check
that every file of the build maps to a notice entry, build the first version again and check
the two builds are identical (reproducible builds), package both into a local static feed,
sign them with a throwaway minisign key, attest them with a throwaway Sigstore instance, list
them in the feed's TUF repository (throwaway keys: root and targets 2 of 3, the release and
online keys; both builds trust its root v1), serve the feed on loopback, install the older
release with
``install.sh`` into a temporary HOME, start a mux server from it, run the installed
``mux update --check`` and ``mux update``, show that the server kept its pid and that mux
printed the restart command, run that command, show the new server's status line, withdraw
the new release (signed in the index and in TUF) and show that ``mux update --check`` says so
(exit 11) and ``mux update`` moves back to the kept older build offline while the server
keeps running, and clean up. Every step says what it did and how long it took; the first failing step stops the
rehearsal with its error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from release.bill.bill import check_build

# The builders by module: a test replaces one (tests/test_rehearse.py).
from release.build import standalone as standalone_builder
from release.build import standin as standin_builder
from release.build.glibc import required_glibc
from release.build.reproduce import compare_builds
from release.build.steps import make_build_info, write_bill, write_build_info
from release.folder.layout import read_build_info
from release.publish.delta import write_deltas
from release.publish.feed import sign_feed_index
from release.publish.install_script import write_install_script
from release.publish.lifecycle import TufSigners, change_lifecycle, describe, withdraw
from release.publish.package import package_release, sign_release
from release.publish.signing import SecretKey, generate_keypair
from release.publish.tuf_keys import LocalKeys
from release.publish.tuf_repo import IndexSeq, create_local, publish_feed, root_bytes
from release.publish.verify import verify_release
from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serve_directory
from updater.errors import EXIT_WITHDRAWN, MuxError
from updater.formats.minisign import PublicKey

REHEARSAL_REPO = "mux-rehearsal/mux"
# Where the GitHub source would read the repository (baked in; the rehearsal reads the feed's).
REHEARSAL_TUF_URL = "https://mux-rehearsal.github.io/mux/metadata"


class RehearsalError(MuxError):
    pass


@dataclass
class Rehearsal:
    workdir: Path
    standin: bool
    say: Callable[[str], None]
    old_version: str = "1.0.0"
    new_version: str = "1.1.0"
    old_protocol: int = 1
    steps: list[tuple[str, float]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    feed_url: str = ""
    # A standalone build of this checkout (mux-release build) to start from instead of
    # building one: its build info is re-baked for each release, as the second release's is.
    prebuilt: Path | None = None

    @property
    def new_protocol(self) -> int:
        return self.old_protocol + 1

    @property
    def bin_dir(self) -> Path:
        return self.workdir / "home" / ".local" / "bin"

    @property
    def mux(self) -> Path:
        return self.bin_dir / "mux"

    def step(self, title: str, action: Callable[[], list[str]]) -> None:
        number = len(self.steps) + 1
        started = time.monotonic()
        try:
            details = action()
        except MuxError as exc:
            raise RehearsalError(f"step {number} ({title}) failed: {exc}") from None
        except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
            raise RehearsalError(f"step {number} ({title}) failed: {exc}") from None
        elapsed = time.monotonic() - started
        self.steps.append((title, elapsed))
        self.say(f"[{number:2d}] {title} ({elapsed:.1f} s)")
        for line in details:
            self.say(f"       {line}")

    def run_mux(
        self, *args: str, expect: int | tuple[int, ...] = 0
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.mux), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        allowed = (expect,) if isinstance(expect, int) else expect
        if result.returncode not in allowed:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
            raise RehearsalError(
                f"`mux {' '.join(args)}` exited {result.returncode}, expected "
                f"{' or '.join(map(str, allowed))}: {detail[0]}"
            )
        return result

    def live_server(self) -> dict[str, Any]:
        result = self.run_mux("server", "status", "--json")
        live = [s for s in json.loads(result.stdout)["servers"] if s["state"] == "live"]
        if len(live) != 1:
            raise RehearsalError(f"expected one live server, found {len(live)}")
        return dict(live[0]["status"])


def _status_line(status: dict[str, Any]) -> str:
    return (
        f"status line: mux {status['version']}, protocol {status['protocol_version']}, "
        f"pid {status['pid']}, started {status['started_at']}"
    )


def _standalone_build_unavailable() -> str | None:
    """Why PyInstaller cannot build here, if it cannot (it needs objdump on Linux)."""
    if importlib.util.find_spec("PyInstaller") is None:
        return "PyInstaller is not installed (it is a development dependency: uv sync)"
    if sys.platform.startswith("linux") and shutil.which("objdump") is None:
        return "PyInstaller needs objdump (Debian: apt-get install binutils)"
    return None


def rehearse(
    *,
    standin: bool = False,
    keep: bool = False,
    build: Path | None = None,
    say: Callable[[str], None] = print,
) -> Rehearsal:
    """Run the rehearsal; raises :class:`RehearsalError` at the first failing step.

    ``build``: a standalone build of this checkout (``mux-release build``) to rehearse with
    instead of making one; the reproducibility step still builds once and compares."""
    if build is not None and (standin or not (Path(build) / "mux").is_file()):
        raise RehearsalError(
            f"--build {build}: give a standalone build folder (mux-release build), "
            "without --standin"
        )
    workdir = Path(tempfile.mkdtemp(prefix="mux-rehearsal-"))
    # Unix socket paths are short: keep the runtime dir directly under /tmp.
    runtime = Path(
        tempfile.mkdtemp(prefix="mux-rr-", dir="/tmp" if Path("/tmp").is_dir() else None)
    )
    runtime.chmod(0o700)
    if not standin:
        reason = _standalone_build_unavailable()
        if reason:
            say(f"note: using stand-in builds instead of standalone ones: {reason}")
            standin = True
    r = Rehearsal(workdir=workdir, standin=standin, say=say, prebuilt=build)
    say(f"rehearsing a release of mux {r.old_version} → {r.new_version} in {workdir}")
    try:
        _run_steps(r, runtime)
    finally:
        _cleanup(r, runtime, keep)
    total = sum(seconds for _, seconds in r.steps)
    say(f"rehearsal passed: {len(r.steps)} steps in {total:.1f} s")
    return r


def _rebaked(
    source: Path,
    out: Path,
    version: str,
    protocol: int,
    keys: list[str],
    read_info: Callable[[Path], Any],
    tuf_root: bytes,
) -> Path:
    """A copy of the standalone build ``source`` in ``out`` as ``version`` (``protocol``),
    trusting ``keys``: what ``mux-release build`` would have made of this checkout."""
    folder = out / source.name
    shutil.copytree(source, folder, symlinks=True)
    (package_dir,) = {p.parent for p in folder.rglob("_build_info.json")}
    info = make_build_info(
        version=version,
        protocol_version=protocol,
        target=read_info(source).target,
        repo=REHEARSAL_REPO,
        minisign_keys=keys,
        tuf_root=tuf_root,
        tuf_metadata_url=REHEARSAL_TUF_URL,
    )
    write_build_info(package_dir, info)
    write_bill(folder, None)  # its notices and SBOM name this version
    return folder


@dataclass
class _Run:
    """One rehearsal's run: what its steps make, for the steps after them."""

    r: Rehearsal
    runtime: Path
    builds: dict[str, Path] = field(default_factory=dict)
    # Set by the step that makes each (in the order of the steps' table).
    secret: SecretKey = field(init=False)
    public_key: str = field(init=False)
    tuf: LocalKeys = field(init=False)
    tuf_root: bytes = field(init=False)
    sigstore: FakeSigstore = field(init=False)
    server: dict[str, Any] = field(init=False)
    restart: str = field(init=False)
    restarted: dict[str, Any] = field(init=False)

    @property
    def feed(self) -> Path:
        return self.r.workdir / "feed"

    def build_settings(self, version: str, protocol: int) -> dict[str, Any]:
        """The builders' settings for mux ``version`` (``protocol``): this rehearsal's keys."""
        return {
            "version": version,
            "protocol_version": protocol,
            "repo": REHEARSAL_REPO,
            "minisign_keys": [self.public_key],
            "tuf_root": self.tuf_root,
            "tuf_metadata_url": REHEARSAL_TUF_URL,
        }


def _make_key(run: _Run) -> list[str]:
    secret, public_text = generate_keypair(None)
    run.secret = SecretKey.parse(secret, None)
    run.public_key = PublicKey.parse(public_text).to_base64()
    return [f"throwaway minisign key {PublicKey.parse(public_text).key_id}"]


def _make_tuf_repository(run: _Run) -> list[str]:
    run.tuf = LocalKeys.generate(run.r.workdir / "tuf-keys")
    lines = create_local(run.feed, run.tuf)
    run.tuf_root = root_bytes(run.feed, 1)
    return [
        *lines,
        f"root 2 of 3, targets 2 of 3, release and online keys in {run.tuf.folder}",
        "both builds trust root v1",
    ]


def _build(run: _Run) -> list[str]:
    r = run.r
    if r.standin:
        kind = "stand-in builds"
        for version, protocol in ((r.old_version, r.old_protocol), (r.new_version, r.new_protocol)):
            run.builds[version] = standin_builder.build_standin(
                r.workdir / "builds" / version, **run.build_settings(version, protocol)
            )
    else:
        kind = "a standalone PyInstaller one-folder build" + (
            f" (from {r.prebuilt})" if r.prebuilt is not None else ""
        )
        _standalone_builds(run)
    return [
        f"{kind}: mux {r.old_version} (protocol {r.old_protocol}) and "
        f"mux {r.new_version} (protocol {r.new_protocol})",
        *(f"{version}: {folder}" for version, folder in run.builds.items()),
    ]


def _standalone_builds(run: _Run) -> None:
    """One PyInstaller build (or the one given); the second release is the same binary with
    the next version's build info baked in, which is all a version and protocol bump changes."""
    r = run.r
    old = r.workdir / "builds" / r.old_version
    if r.prebuilt is None:
        settings = run.build_settings(r.old_version, r.old_protocol)
        folder = standalone_builder.build_standalone(old, **settings)
    else:
        folder = _rebaked(
            r.prebuilt,
            old,
            r.old_version,
            r.old_protocol,
            [run.public_key],
            read_build_info,
            run.tuf_root,
        )
    new = r.workdir / "builds" / r.new_version / folder.name
    run.builds[r.old_version] = folder
    run.builds[r.new_version] = new
    shutil.copytree(folder, new, symlinks=True)
    (package_dir,) = {p.parent for p in new.rglob("_build_info.json")}
    info = make_build_info(
        target=read_build_info(folder).target, **run.build_settings(r.new_version, r.new_protocol)
    )
    write_build_info(package_dir, info)
    write_bill(new, None)  # its notices and SBOM name the new version


def _check_build_bill(run: _Run) -> list[str]:
    folder = run.builds[run.r.old_version]
    bill = check_build(folder, pins_path=None)  # the rehearsal ships no pinned artifact
    lines = [
        f"every one of the {bill.files} files maps to one of {bill.components} components",
        "THIRD_PARTY_NOTICES.md and sbom.cdx.json are current",
    ]
    if not run.r.standin and folder.name.endswith("-linux-gnu") and shutil.which("objdump"):
        lines.append(f"glibc: {required_glibc(folder).describe()}")
    return lines


def _reproduce(run: _Run) -> list[str]:
    r = run.r
    build_again = (
        standin_builder.build_standin if r.standin else standalone_builder.build_standalone
    )
    again = r.workdir / "builds" / "again"
    second = build_again(again, **run.build_settings(r.old_version, r.old_protocol))
    result = compare_builds(run.builds[r.old_version], second)
    return [
        f"built mux {r.old_version} again into {second}",
        f"identical: {result.files} entries, archive sha256 {result.archive_sha256[:16]}…",
    ]


def _make_sigstore(run: _Run) -> list[str]:
    run.sigstore = FakeSigstore.create(run.r.workdir / "sigstore")
    return [f"trusted root: {run.sigstore.trusted_root_path}"]


def _package_attest_sign(run: _Run) -> list[str]:
    r, feed = run.r, run.feed
    lines: list[str] = []
    for version in (r.old_version, r.new_version):
        release_dir = feed / f"v{version}"
        manifest = package_release([run.builds[version]], release_dir)
        if version == r.new_version:  # its file lists and its delta, as the workflow does
            write_deltas(release_dir, [feed / f"v{r.old_version}"], say=lines.append)
        run.sigstore.attest_release(release_dir, version, repository=REHEARSAL_REPO)
        sign_release(release_dir, run.secret)
        lines.append(f"v{version}: {', '.join(sorted(p.name for p in release_dir.iterdir()))}")
        lines.append(
            f"  protocol {manifest.protocol_version}; attested as "
            f"{REHEARSAL_REPO} .github/workflows/release.yml@refs/tags/v{version}"
        )
    index = sign_feed_index(feed, run.secret, new_feed=True)  # its first index
    lines.append(f"releases.json signed: seq {index.comment.seq}, expires in 14 days")
    lines += publish_feed(
        feed,
        run.tuf.signers(run.tuf.RELEASE),
        run.tuf.signers(run.tuf.ONLINE),
        index=IndexSeq(index.key_id, index.comment.seq),  # as mux-release feed records it
    )
    return lines


def _verify_releases(run: _Run) -> list[str]:
    lines = []
    for version in (run.r.old_version, run.r.new_version):
        result = verify_release(
            str(run.feed / f"v{version}"),
            keys=[run.public_key],
            repo=REHEARSAL_REPO,
            trusted_root=run.sigstore.trusted_root_path,
            tuf_root=run.tuf_root,
        )
        layers = ", ".join(f"{layer.layer}: {layer.status}" for layer in result.log.layers)
        lines.append(f"v{version}: {layers}")
    return lines


def _serve_to(run: _Run, url: str) -> None:
    """The installed mux's environment: a temporary HOME that reads the feed at ``url``."""
    home = run.r.workdir / "home"
    home.mkdir()
    run.r.feed_url = url
    run.r.env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MUX_", "GITHUB_", "XDG_"))},
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(run.runtime),
        "MUX_DOWNLOAD_URL": url,
        "MUX_UPDATE_SOURCE": url,
        "MUX_NO_MODIFY_PATH": "1",
        "MUX_SIGSTORE_TRUSTED_ROOT": str(run.sigstore.trusted_root_path),
        "NO_COLOR": "1",
    }


def _install(run: _Run) -> list[str]:
    r = run.r
    script = write_install_script(
        r.workdir / "install.sh", keys=[run.public_key], repo=REHEARSAL_REPO
    )
    result = subprocess.run(
        ["sh", str(script)],
        env={**r.env, "MUX_VERSION": r.old_version},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if result.returncode != 0:
        raise RehearsalError(
            f"install.sh exited {result.returncode}: "
            f"{(result.stderr.strip().splitlines() or [''])[-1]}"
        )
    reported = json.loads(r.run_mux("version", "--json").stdout)
    return [
        f"install.sh installed {r.mux} -> {os.readlink(r.mux)}",
        f"mux version --json: {reported['version']}, protocol {reported['protocol_version']}",
    ]


def _start_server(run: _Run) -> list[str]:
    run.r.run_mux("server", "start")
    run.server = run.r.live_server()
    return [_status_line(run.server)]


def _check(run: _Run) -> list[str]:
    return run.r.run_mux("update", "--check", expect=10).stdout.strip().splitlines()


def _update(run: _Run) -> list[str]:
    r = run.r
    # It did what was asked: the restart is printed; -v: the layers and the download too.
    result = r.run_mux("update", "-v", expect=0)
    lines = result.stdout.strip().splitlines()
    commands = [ln.strip() for ln in lines if ln.strip().startswith("mux server restart")]
    if len(commands) != 1:
        raise RehearsalError("mux update did not print one restart command")
    run.restart = commands[0]
    if not any(f"a delta from {r.old_version}" in ln for ln in lines):
        raise RehearsalError(f"mux update did not use the delta from {r.old_version}")
    return lines


def _server_survived(run: _Run) -> list[str]:
    now = run.r.live_server()
    before = run.server
    if now["pid"] != before["pid"] or now["protocol_version"] != run.r.old_protocol:
        raise RehearsalError(f"the server changed: {before} -> {now}")
    return [
        f"still running with its old pid {now['pid']} and protocol {run.r.old_protocol}",
        f"mux printed: {run.restart}",
    ]


def _restart(run: _Run) -> list[str]:
    run.r.run_mux(*shlex.split(run.restart)[1:])
    now = run.r.live_server()
    if now["protocol_version"] != run.r.new_protocol or now["pid"] == run.server["pid"]:
        raise RehearsalError(f"the restarted server answers {now}")
    run.restarted = now
    return [f"ran: {run.restart}", _status_line(now)]


def _withdraw_release(run: _Run) -> list[str]:
    changed = change_lifecycle(
        run.feed,
        run.secret,
        f"v{run.r.new_version}",
        withdraw("rehearsal: a release that turned out bad", None),
        tuf=TufSigners(run.tuf.signers(run.tuf.RELEASE), run.tuf.signers(run.tuf.ONLINE)),
    )
    return describe(changed)


def _check_withdrawn(run: _Run) -> list[str]:
    return run.r.run_mux("update", "--check", expect=EXIT_WITHDRAWN).stdout.strip().splitlines()


def _move_back(run: _Run) -> list[str]:
    r = run.r
    started = time.monotonic()
    result = r.run_mux("update", expect=(0, 20))
    took = time.monotonic() - started
    active = Path(os.readlink(r.mux)).parent.name
    if active != r.old_version:
        raise RehearsalError(f"mux update left the link at {active}, not {r.old_version}")
    now = r.live_server()
    if now["pid"] != run.restarted["pid"]:
        raise RehearsalError(f"the server changed: {run.restarted} -> {now}")
    versions = Path(os.path.realpath(r.mux)).parent.parent  # versions/<version>/mux
    if not (versions / r.new_version / "mux").exists():
        raise RehearsalError(f"the build the server runs from ({r.new_version}) was removed")
    return [
        *result.stdout.strip().splitlines(),
        f"moved back to {active} in {took:.2f} s without a download; the server kept pid "
        f"{now['pid']} and its build {r.new_version}",
    ]


_Step = tuple[str, Callable[[_Run], list[str]]]

# The steps in order, each titled ({old} and {new}: the two versions). The first ones make
# the releases and the feed; the rest run while the feed is served on loopback.
_MAKE_STEPS: tuple[_Step, ...] = (
    ("make a throwaway minisign key", _make_key),
    ("make throwaway TUF keys and the feed's TUF repository", _make_tuf_repository),
    ("build mux twice (the second with a higher version and protocol)", _build),
    ("map every file of the build to its notices (notices --check-build)", _check_build_bill),
    ("build mux {old} again and compare (reproducible builds)", _reproduce),
    ("create a throwaway Sigstore instance", _make_sigstore),
    (
        "package, attest and sign both releases into a static feed and its TUF repository",
        _package_attest_sign,
    ),
    (
        "verify both releases as mux-release verify does (through TUF, SBOM included)",
        _verify_releases,
    ),
)
_SERVED_STEPS: tuple[_Step, ...] = (
    ("install mux {old} with install.sh into a temporary HOME", _install),
    ("start a mux server from it", _start_server),
    ("mux update --check (expect exit 10: update available)", _check),
    ("mux update (expect exit 0 and the restart command a server needs)", _update),
    ("the server is untouched", _server_survived),
    ("run the restart command mux printed", _restart),
    ("withdraw mux {new} (mux-release withdraw: the index and TUF)", _withdraw_release),
    ("mux update --check (expect exit 11: the installed release is withdrawn)", _check_withdrawn),
    ("mux update moves back to {old}, offline; the server untouched", _move_back),
)


def _run_steps(r: Rehearsal, runtime: Path) -> None:
    run = _Run(r, runtime)

    def take(steps: tuple[_Step, ...]) -> None:
        for title, action in steps:
            r.step(title.format(old=r.old_version, new=r.new_version), partial(action, run))

    take(_MAKE_STEPS)
    with serve_directory(run.feed) as url:
        _serve_to(run, url)
        r.say(f"       serving the feed at {url}")
        take(_SERVED_STEPS)


def _cleanup(r: Rehearsal, runtime: Path, keep: bool) -> None:
    if r.mux.exists() and r.env:
        with contextlib.suppress(Exception):
            r.run_mux("server", "stop", expect=(0, 1))
    shutil.rmtree(runtime, ignore_errors=True)
    if keep:
        r.say(f"kept {r.workdir}")
    else:
        shutil.rmtree(r.workdir, ignore_errors=True)
