"""``mux update`` end to end: real installs in temporary HOMEs, real processes, loopback feeds."""

from __future__ import annotations

import io
import json
import os
import shlex
import tarfile
from pathlib import Path

import pytest

from tests.support import stress
from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap, republish, snapshot
from tests.support.processes import run_mux
from tests.support.releases import Feed, make_feed, make_keypair, make_release, serve_directory
from updater.config.targets import detect_target
from updater.install.layout import files_list

TARGET = detect_target()


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"], protocols={"0.2.0": 2})


@pytest.fixture
def served(feed: Feed):
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: Feed, served: str) -> Install:
    return bootstrap(
        tmp_path, sandbox_env, source=served, version="0.1.0", public_key=feed.keypair.public_key
    )


def assert_untouched(install: Install, before: dict[str, str]) -> None:
    after = snapshot(install.home, install.bin_dir)
    after.pop(str(install.home / ".lock"), None)
    before = {k: v for k, v in before.items() if k != str(install.home / ".lock")}
    assert after == before
    assert install.reported_version()["version"] == "0.1.0"


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_mux_dash_dash_version_answers_what_mux_version_answers(
    installed: Install, flag: str
) -> None:
    """``mux --version`` (and tmux's ``-V``) is not a usage error: the installed mux prints
    exactly what ``mux version`` prints, exit 0 (its imports: tests/test_imports.py)."""
    expected = installed.run("version")
    assert expected.returncode == 0 and "0.1.0" in expected.stdout, expected.stderr
    answered = installed.run(flag)
    assert (answered.returncode, answered.stdout, answered.stderr) == (0, expected.stdout, "")


def test_update_switches_atomically_and_keeps_previous(installed: Install) -> None:
    assert installed.active() == "0.1.0"
    assert installed.reported_version()["protocol_version"] == 1
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["action"] == "updated"
    assert (report["from_version"], report["to_version"]) == ("0.1.0", "0.2.0")
    layers = {layer["layer"]: layer["status"] for layer in report["verification"]}
    assert layers == {
        "signature": "ok",
        "manifest": "ok",
        "digest": "ok",
        "attestation": "skipped",
        "archive": "ok",
        "smoke-test": "ok",
    }
    assert installed.active() == "0.2.0"
    assert installed.reported_version()["version"] == "0.2.0"
    assert sorted(p.name for p in (installed.home / "versions").iterdir()) == ["0.1.0", "0.2.0"]
    record = json.loads((installed.home / "install.json").read_text())
    assert record["active"] == "0.2.0" and record["previous"] == "0.1.0"
    assert set(record["versions"]) == {"0.1.0", "0.2.0"}
    # The file list, hashed as the archive was unpacked, is what is on disk.
    version_dir = installed.home / "versions" / "0.2.0"
    assert (version_dir / ".mux-files").read_bytes() == files_list(version_dir)
    # Nothing left behind.
    leftovers = [
        p.name
        for p in installed.home.rglob("*")
        if ".partial-" in p.name or p.name.startswith((".download-", ".trash-"))
    ]
    assert leftovers == []

    again = installed.run("update")
    assert again.returncode == 0 and "already installed" in again.stdout


def test_rollback_checks_files_then_switches(installed: Install) -> None:
    assert installed.run("update").returncode == 0
    result = installed.run("update", "--rollback")
    assert result.returncode == 0, result.stderr
    assert installed.active() == "0.1.0"
    assert installed.reported_version()["version"] == "0.1.0"
    # Roll forward again, tamper with the kept 0.1.0, and rollback must refuse.
    assert installed.run("update", "--rollback").returncode == 0
    assert installed.active() == "0.2.0"
    victim = next(p for p in (installed.home / "versions" / "0.1.0").rglob("*.py"))
    victim.write_text(victim.read_text() + "\n# tampered\n")
    refused = installed.run("update", "--rollback")
    assert refused.returncode == 3
    assert "changed since they were installed" in refused.stderr
    assert installed.active() == "0.2.0"


def test_dry_run_changes_nothing(installed: Install) -> None:
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would update mux 0.1.0 → 0.2.0" in result.stdout
    assert "nothing was changed" in result.stdout
    assert_untouched(installed, before)


def _fails_and_leaves_everything(install: Install, *args: str, code: int, text: str) -> None:
    before = snapshot(install.home, install.bin_dir)
    result = install.run("update", *args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert text in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("mux: ")] == lines[-1:], result.stderr
    assert "Traceback" not in result.stderr
    assert_untouched(install, before)


def test_tampered_archive(installed: Install, feed: Feed) -> None:
    archive = feed.releases["0.2.0"] / f"mux-{TARGET}.tar.gz"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    _fails_and_leaves_everything(installed, code=3, text="verification failed (digest)")


def test_tampered_sums(installed: Install, feed: Feed) -> None:
    sums = feed.releases["0.2.0"] / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("manifest.json", "manifest.json ", 1).strip() + "\n")
    _fails_and_leaves_everything(installed, code=3, text="verification failed (signature)")


def test_missing_signature(installed: Install, feed: Feed) -> None:
    (feed.releases["0.2.0"] / "SHA256SUMS.minisig").unlink()
    _fails_and_leaves_everything(installed, code=3, text="has no SHA256SUMS.minisig")


def test_untrusted_key(installed: Install, feed: Feed, tmp_path: Path) -> None:
    other = make_keypair(tmp_path / "other")
    republish(feed.releases["0.2.0"], other.secret_key())
    _fails_and_leaves_everything(installed, code=3, text="untrusted minisign key")


def test_oversized_download(installed: Install, feed: Feed) -> None:
    archive = feed.releases["0.2.0"] / f"mux-{TARGET}.tar.gz"
    archive.write_bytes(archive.read_bytes() + b"\0" * 4096)
    _fails_and_leaves_everything(installed, code=3, text="larger than the")


def _tarball(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _file(name: str, data: bytes, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


@pytest.mark.parametrize("attack", ["dotdot", "symlink", "absolute", "no-executable"])
def test_unsafe_archive(installed: Install, feed: Feed, attack: str, tmp_path: Path) -> None:
    top = f"mux-{TARGET}"
    members = [_file(f"{top}/mux", b"#!/bin/sh\necho pwned\n")]
    if attack == "dotdot":
        members.append(_file(f"{top}/../../evil", b"x"))
    elif attack == "symlink":
        link = tarfile.TarInfo(f"{top}/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../etc"
        members.append((link, None))
    elif attack == "absolute":
        members.append(_file("/tmp/evil", b"x"))
    else:
        members = [_file(f"{top}/not-mux", b"x")]
    republish(feed.releases["0.2.0"], feed.keypair.secret_key(), archive=_tarball(members))
    _fails_and_leaves_everything(installed, code=3, text="verification failed (archive)")
    assert not (tmp_path / "evil").exists()


def _python_before_data_filters() -> str | None:
    """An interpreter of Python 3.11.0-3.11.3 on this machine (Debian 12's is 3.11.2): the
    versions whose tarfile has no extraction filters."""
    import shutil
    import subprocess

    for name in ("/usr/bin/python3.11", "/usr/bin/python3", "python3.11"):
        path = shutil.which(name)
        if path is None:
            continue
        probe = subprocess.run(
            [path, "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True,
            text=True,
            check=False,
        )
        version = tuple(int(part) for part in probe.stdout.split() or (0,))
        if (3, 11, 0) <= version < (3, 11, 4):
            return path
    return None


@pytest.mark.parametrize("python", ["before-3.11.4", "this one"])
def test_an_update_under_python_before_3_11_4_unpacks_with_the_same_rules(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str, python: str
) -> None:
    """``extractall(filter="data")`` arrived in Python 3.11.4: on 3.11.2 (Debian 12) mux
    crashed after downloading and verifying. The development mux under such a Python (and
    under this one) refuses an archive that escapes, then installs a release whose archive
    asks for setuid, group/other-writable files and another owner, and gets what the data
    filter gives: none of that."""
    import site
    import stat
    import sys

    interpreter = _python_before_data_filters() if python != "this one" else sys.executable
    if interpreter is None:
        pytest.skip("no Python 3.11.0-3.11.3 on this machine (Debian 12's python3 is one)")
    top = f"mux-{TARGET}"
    release = feed.releases["0.2.0"]
    genuine = (release / f"mux-{TARGET}.tar.gz").read_bytes()
    checkout = Path(__file__).resolve().parent.parent
    env = {**sandbox_env, "PYTHONPATH": os.pathsep.join([str(checkout), *site.getsitepackages()])}
    env["MUX_INSTALL_DIR"] = str(tmp_path / "bin")
    home = tmp_path / "mux-home"
    mux = [interpreter, "-m", "updater"]
    args = ["update", "--version", "0.2.0", "--source", served, "--home", str(home)]
    args += ["--trust-key", feed.keypair.public_key]

    escaping = [_file(f"{top}/mux", b"#!/bin/sh\necho pwned\n"), _file(f"{top}/../../evil", b"x")]
    republish(release, feed.keypair.secret_key(), archive=_tarball(escaping))
    refused = run_mux(args, env, executable=mux)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "verification failed (archive)" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "evil").exists()

    members = []
    with tarfile.open(fileobj=io.BytesIO(genuine)) as original:
        for info in original.getmembers():
            data = original.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
            info.uid, info.gid, info.uname, info.gname = 4321, 4321, "someone", "others"
            if info.name == f"{top}/mux":
                info.mode = 0o6777
            elif info.isfile():
                info.mode = 0o1666
            members.append((info, data))
    republish(release, feed.keypair.secret_key(), archive=_tarball(members))
    result = run_mux(args, env, executable=mux)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    version_dir = home / "versions" / "0.2.0"
    for path in version_dir.rglob("*"):
        info = path.lstat()
        assert info.st_uid == os.getuid(), path
        if stat.S_ISLNK(info.st_mode):
            continue
        assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path
        assert not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH), path
        if path.is_dir():
            assert stat.S_IMODE(info.st_mode) == 0o755, path
    assert stat.S_IMODE((version_dir / "mux").stat().st_mode) == 0o755
    assert stat.S_IMODE(next(version_dir.rglob("*.py")).stat().st_mode) == 0o644


@pytest.mark.parametrize("lie", ["version", "target"])
def test_build_that_lies_about_itself(
    installed: Install, feed: Feed, lie: str, tmp_path: Path
) -> None:
    """A build whose checksum is published but which is not what the manifest says it is."""
    from release.build.standin import build_standin

    settings = (
        {"report_version": "9.9.9"}
        if lie == "version"
        else {"report_target": "aarch64-apple-darwin"}
    )
    folder = build_standin(
        tmp_path / "lying",
        version="0.2.0",
        protocol_version=2,
        repo="",
        minisign_keys=[feed.keypair.public_key],
        target=TARGET,
        **settings,
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=f"mux-{TARGET}")
    republish(feed.releases["0.2.0"], feed.keypair.secret_key(), archive=buffer.getvalue())
    _fails_and_leaves_everything(installed, code=3, text="verification failed (smoke-test)")


def test_downgrade_needs_explicit_version_and_flag(installed: Install) -> None:
    assert installed.run("update").returncode == 0
    before = snapshot(installed.home, installed.bin_dir)
    refused = installed.run("update", "--version", "0.1.0")
    # Older by its signed time too (both are on record): a verification refusal, as install.sh.
    assert refused.returncode == 3, refused.stderr
    assert "mux 0.1.0 was signed" in refused.stderr and "before the installed mux 0.2.0" in (
        refused.stderr
    )
    assert "--version 0.1.0 --allow-downgrade" in refused.stderr
    assert (
        snapshot(installed.home, installed.bin_dir).keys() - {str(installed.home / ".lock")}
        <= before.keys()
    )
    allowed = installed.run("update", "--version", "0.1.0", "--allow-downgrade")
    assert allowed.returncode == 0, allowed.stderr
    assert installed.active() == "0.1.0"


def test_plain_http_mirror_is_refused(installed: Install) -> None:
    _fails_and_leaves_everything(
        installed, "--source", "http://mirror.example.com/feed", code=1, text="only https://"
    )


def test_feed_without_trusted_key_fails_closed(tmp_path: Path, sandbox_env, served: str) -> None:
    env = {**sandbox_env, "MUX_INSTALL_DIR": str(tmp_path / "bin"), "MUX_UPDATE_SOURCE": served}
    result = run_in_process(["update", "--home", str(tmp_path / "h")], env)
    assert result.returncode == 3
    assert "no trusted minisign key" in result.stderr and "--trust-key" in result.stderr
    assert not (tmp_path / "bin" / "mux").exists()
    assert not (tmp_path / "h" / "versions").exists()


def test_full_disk(installed: Install) -> None:
    import resource
    import signal

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))

    before = snapshot(installed.home, installed.bin_dir)
    from tests.support.processes import run_mux

    result = run_mux(
        ["update"], installed.env, executable=[str(installed.mux)], preexec_fn=small_files
    )
    assert result.returncode == 1, result.stderr
    assert "File too large" in result.stderr
    assert_untouched(installed, before)


def test_package_manager_install_is_refused(installed: Install, tmp_path: Path) -> None:
    import shutil

    cellar = tmp_path / "homebrew" / "Cellar" / "mux" / "0.1.0"
    shutil.copytree(installed.home / "versions" / "0.1.0", cellar)
    env = {k: v for k, v in installed.env.items() if k != "MUX_HOME"}
    from tests.support.processes import run_mux

    before = snapshot(installed.home, installed.bin_dir, cellar)
    result = run_mux(["update"], env, executable=[str(cellar / "mux")])
    assert result.returncode == 1
    assert "managed by Homebrew" in result.stderr and "brew upgrade mux" in result.stderr
    assert snapshot(installed.home, installed.bin_dir, cellar) == before


def _status(install: Install) -> dict[str, object]:
    result = install.run("server", "status", "--json")
    assert result.returncode == 0, result.stderr
    servers = json.loads(result.stdout)["servers"]
    live = [s for s in servers if s["state"] == "live"]
    assert len(live) == 1, servers
    return live[0]["status"]


def test_a_running_server_survives_the_update(installed: Install) -> None:
    started = installed.run("server", "start")
    assert started.returncode == 0, started.stderr
    before = _status(installed)
    assert before["protocol_version"] == 1 and before["version"] == "0.1.0"

    # The dry run lists the server the update will leave needing a restart, as --check does.
    planned = installed.run("update", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["restart_needed"] is True
    assert [s["status"]["pid"] for s in plan["servers"]] == [before["pid"]]
    text = installed.run("update", "--dry-run").stdout
    assert "after it, 1 live server(s) will need a restart" in text
    # With --exit-code, an update after which a server needs a restart exits 20 (as --check).
    asked = installed.run("update", "--exit-code", "--json")
    assert asked.returncode == 20, asked.stderr
    assert json.loads(asked.stdout)["exit_code"] == 20
    assert installed.run("update", "--rollback").returncode == 0  # the server speaks 0.1.0's
    # Without it, an update that did what was asked exits 0 and says what needs a restart.
    result = installed.run("update")
    assert result.returncode == 0, result.stderr
    assert "It keeps running" in result.stdout
    command = next(
        line.strip()
        for line in result.stdout.splitlines()
        if line.strip().startswith("mux server restart")
    )
    after = _status(installed)
    assert after["pid"] == before["pid"] and after["protocol_version"] == 1

    check = installed.run("update", "--check", "--json")
    assert check.returncode == 20  # up to date, but the server speaks protocol 1
    assert json.loads(check.stdout)["servers"][0]["restart_command"] == command

    # The printed command works, run by the new mux against the old server.
    args = shlex.split(command)[1:]
    restarted = installed.run(*args)
    assert restarted.returncode == 0, restarted.stderr
    new = _status(installed)
    assert new["pid"] != before["pid"]
    assert (new["version"], new["protocol_version"]) == ("0.2.0", 2)
    assert installed.run("update", "--check").returncode == 0


def _update_with_read_only(install: Install, directory: Path) -> None:
    """Run `mux update` with ``directory`` bind-mounted read-only; nothing may change."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-m", "true"], capture_output=True, check=False)
    if unshare is None or probe.returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -m) for a read-only bind mount")
    before = snapshot(install.home, install.bin_dir)
    script = (
        f'mount --bind "{directory}" "{directory}" && mount -o remount,bind,ro "{directory}" '
        f'&& exec "{install.mux}" update'
    )
    result = subprocess.run(
        [unshare, "-m", "sh", "-c", script],
        env=install.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "read-only file system" in result.stderr and "Traceback" not in result.stderr
    assert_untouched(install, before)


def test_read_only_bin_dir(installed: Install) -> None:
    _update_with_read_only(installed, installed.bin_dir)


def test_concurrent_updates_end_with_one_valid_install(installed: Install) -> None:
    import subprocess

    processes = [
        subprocess.Popen(
            [str(installed.mux), "update"],
            env=installed.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(4)
    ]
    outcomes = [(p.wait(180), p.stderr.read() if p.stderr else "") for p in processes]
    for code, stderr in outcomes:
        assert code == 0 or (code == 1 and "another mux update is running" in stderr), stderr
    assert any(code == 0 for code, _ in outcomes)
    assert installed.active() == "0.2.0"
    assert installed.reported_version()["version"] == "0.2.0"
    record = json.loads((installed.home / "install.json").read_text())
    assert record["active"] == "0.2.0"
    assert sorted(p.name for p in (installed.home / "versions").iterdir()) == ["0.1.0", "0.2.0"]


KILLS = 3  # kills that must land mid-run (bench/bench_stress.py runs fifty rounds)
MAX_KILL_RUNS = 6  # a run can finish before its kill on a loaded machine: more runs


def test_kill_9_at_any_moment_leaves_a_runnable_mux(installed: Install) -> None:
    """Updates killed at moments spread over an update's length (a half, a quarter, three
    quarters, ...: tests/support/stress.py, ``Moments``) until three landed mid-run (at
    most six runs); after each, mux runs at the old or new version and its link names a file."""
    # How long one update takes here, to spread the kills over its whole duration: the
    # median of three, so that one slow run on a loaded machine does not stretch them all.
    durations = [
        stress.timed(installed, "update", "--version", wanted, "--allow-downgrade")
        for wanted in ("0.2.0", "0.1.0", "0.2.0")
    ]
    moments = stress.Moments(sorted(durations)[1] * 1.1)
    killed = stress.kills_landed(
        moments,
        lambda delay, where: stress.update_round(installed, delay, where),
        wanted=KILLS,
        runs=MAX_KILL_RUNS,
    )
    assert killed >= KILLS, f"only {killed} of {MAX_KILL_RUNS} runs were killed mid-way"
    # The next run cleans up whatever the killed ones left (also when it has nothing to do).
    assert installed.run("update", "--version", "0.2.0", "--allow-downgrade").returncode == 0
    leftovers = [
        p.name
        for p in installed.home.rglob("*")
        if ".partial-" in p.name or p.name.startswith((".download-", ".trash-"))
    ]
    leftovers += [p.name for p in installed.bin_dir.iterdir() if p.name != "mux"]
    assert leftovers == []
    assert sorted(p.name for p in (installed.home / "versions").iterdir()) == ["0.1.0", "0.2.0"]


def test_a_run_with_nothing_to_install_still_tidies(installed: Install) -> None:
    assert installed.run("update").returncode == 0
    leftovers = [
        installed.home / ".download-abc123",
        installed.home / "versions" / "0.3.0.partial-abc123",
        installed.home / "versions" / ".trash-abc123",
        installed.bin_dir / ".mux.tmp-1-2",
    ]
    for path in leftovers:
        if "partial" in path.name or "trash" in path.name:
            path.mkdir()
            (path / "junk").write_text("x")
        else:
            path.write_text("x")
    result = installed.run("update")
    assert result.returncode == 0 and "already installed" in result.stdout
    assert [p for p in leftovers if p.exists() or p.is_symlink()] == []


def test_rollback_without_a_recorded_file_list_is_refused(installed: Install) -> None:
    assert installed.run("update").returncode == 0
    record_path = installed.home / "install.json"
    record = json.loads(record_path.read_text())
    del record["versions"]["0.1.0"]
    record_path.write_text(json.dumps(record))
    result = installed.run("update", "--rollback")
    assert result.returncode == 3 and "no file list on record" in result.stderr
    assert installed.active() == "0.2.0"


def test_release_without_a_build_for_this_target(installed: Install, feed: Feed) -> None:
    make_release(
        feed.path,
        "0.3.0",
        protocol_version=1,
        keypair=feed.keypair,
        targets=[
            "aarch64-apple-darwin"
            if TARGET != "aarch64-apple-darwin"
            else "x86_64-unknown-linux-gnu"
        ],
    )
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 1
    assert f"has no build for {TARGET}" in result.stderr and "it has:" in result.stderr
    assert_untouched(installed, before)


def test_read_only_versions_folder(installed: Install) -> None:
    _update_with_read_only(installed, installed.home / "versions")


def test_progress_bar_on_a_terminal_plain_lines_otherwise(installed: Install) -> None:
    import pty
    import subprocess

    env = {k: v for k, v in installed.env.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [str(installed.mux), "update"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(120) == 0
    os.close(primary)
    terminal = b"".join(chunks).decode(errors="replace")
    assert "\x1b[" in terminal and "━" in terminal, terminal  # rich's bar, drawn in place
    assert "downloading mux-" not in terminal  # the plain lines are for pipes and logs


def test_rollback_after_a_switch_that_was_never_recorded(installed: Install, feed: Feed) -> None:
    """A kill between moving the link and recording it: rollback still goes one step back."""
    make_release(feed.path, "0.3.0", protocol_version=1, keypair=feed.keypair)
    result = installed.run("update", "--version", "0.2.0")
    assert result.returncode == 0, result.stderr
    assert installed.run("update").returncode == 0
    record_path = installed.home / "install.json"
    record = json.loads(record_path.read_text())
    # What the record says before the last switch is recorded: active is the replaced version.
    record.update({"active": "0.2.0", "previous": "0.1.0"})
    record_path.write_text(json.dumps(record))
    result = installed.run("update", "--rollback")
    assert result.returncode == 0, result.stderr
    assert installed.active() == "0.2.0"
    settled = json.loads(record_path.read_text())
    assert (settled["active"], settled["previous"]) == ("0.2.0", "0.3.0")


def test_dry_run_when_up_to_date_touches_nothing(installed: Install) -> None:
    assert installed.run("update").returncode == 0
    leftover = installed.home / ".download-keepme"
    leftover.write_text("x")
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update", "--dry-run")
    assert result.returncode == 0 and "already installed" in result.stdout
    assert snapshot(installed.home, installed.bin_dir) == before


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ({"MUX_UPDATE_SOURCE": "https://[broken/feed"}, "invalid release source URL"),
        ({"MUX_UPDATE_SOURCE": "https://mirror.test:99999/feed"}, "invalid release source URL"),
        (
            {"HTTPS_PROXY": "foo://proxy:1", "MUX_UPDATE_SOURCE": "https://mirror.test/feed"},
            "unusable proxy setting",
        ),
    ],
)
def test_malformed_settings_are_one_line_usage_errors(
    installed: Install, env: dict[str, str], text: str
) -> None:
    before = snapshot(installed.home, installed.bin_dir)
    for args in (["update"], ["update", "--check"]):
        result = Install(installed.home, installed.bin_dir, {**installed.env, **env}).run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert text in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert snapshot(installed.home, installed.bin_dir) == before


@pytest.mark.parametrize("typed", ["1.2.3-rc1", "v1.2.3-rc1"])
def test_check_and_update_ask_for_the_same_release(
    tmp_path: Path, sandbox_env: dict[str, str], typed: str
) -> None:
    """`--check --version X` and `mux update --version X` ask the feed for the same tag (and
    both read its signed index, which must list it)."""
    from tests.support.releases import serve_directory_recording

    feed = make_feed(tmp_path / "f", versions=["1.2.3-rc1"], prereleases=["1.2.3-rc1"])
    with serve_directory_recording(feed.path) as (url, paths):
        env = {**sandbox_env, "MUX_UPDATE_SOURCE": url, "MUX_INSTALL_DIR": str(tmp_path / "bin")}
        check = run_mux(
            [
                "update",
                "--check",
                "--json",
                "--version",
                typed,
                "--trust-key",
                feed.keypair.public_key,
            ],
            env,
        )
        asked_by_check = {p.split("/")[1] for p in paths}
        paths.clear()
        update = run_mux(
            [
                "update",
                "--version",
                typed,
                "--home",
                str(tmp_path / "home"),
                "--trust-key",
                feed.keypair.public_key,
            ],
            env,
        )
        asked_by_update = {p.split("/")[1] for p in paths}
    assert check.returncode == 10, check.stderr
    assert json.loads(check.stdout)["latest"]["tag"] == "v1.2.3-rc1"
    assert update.returncode == 0, update.stderr
    index = {"releases.json", "releases.json.minisig"}
    assert asked_by_check == asked_by_update == {"v1.2.3-rc1", *index}
    assert Install(tmp_path / "home", tmp_path / "bin", env).reported_version()["version"] == (
        "1.2.3-rc1"
    )


def test_unpacked_files_are_flushed_as_they_are_written_and_the_tree_beside_the_smoke_test(
    installed: Install, feed: Feed, monkeypatch
) -> None:
    """The disk makes each unpacked file durable while the rest unpacks (the unpacking hands
    every file over as soon as it is written), then every folder while the smoke test runs;
    every file is fsynced once, and all of it before the switch."""
    import threading

    from updater import files
    from updater.commands.update import run_update
    from updater.config import settings
    from updater.core.request import ReleaseRequest
    from updater.install import transaction as install
    from updater.trust import pipeline as verify

    order: list[str] = []
    fsynced: list[str] = []
    tree_started = threading.Event()
    real_unpack, real_smoke_test = verify.unpack, verify.smoke_test
    real_flush_file, real_fsync_file = install.Transaction.flush_file, files.fsync_file
    real_flush_tree = files.Flush._flush_tree

    def unpack(*args, **kwargs):
        result = real_unpack(*args, **kwargs)
        order.append("unpacked")
        return result

    def flush_file(self, path: str) -> None:
        order.append("handed over")
        real_flush_file(self, path)

    def fsync_file(path: Path) -> tuple[int, int]:
        fsynced.append(str(path))
        return real_fsync_file(path)

    def flush_tree(self, root: str) -> None:
        tree_started.set()
        real_flush_tree(self, root)

    def smoke_test(*args, **kwargs):
        assert tree_started.wait(10), "the smoke test ran before the unpacked tree was flushed"
        order.append("smoke test")
        return real_smoke_test(*args, **kwargs)

    monkeypatch.setattr(verify, "unpack", unpack)
    monkeypatch.setattr(install.Transaction, "flush_file", flush_file)
    monkeypatch.setattr(files, "fsync_file", fsync_file)
    monkeypatch.setattr(files.Flush, "_flush_tree", flush_tree)
    monkeypatch.setattr(verify, "smoke_test", smoke_test)
    loaded = settings.load(
        installed.env,
        flags=settings.Requested(home=installed.home, trust_keys=[feed.keypair.public_key]),
        development=True,
    )
    result = run_update(ReleaseRequest.latest(), loaded)
    assert result.to_version == "0.2.0" and installed.active() == "0.2.0"
    version_dir = installed.home / "versions" / "0.2.0"
    regular = sorted(
        str(p.relative_to(version_dir))
        for p in version_dir.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name != ".mux-files"
    )
    handed = order.count("handed over")
    assert handed == len(regular) and order == ["handed over"] * handed + ["unpacked", "smoke test"]
    staged = [p.split(".partial-", 1)[1].split("/", 1)[1] for p in fsynced if ".partial-" in p]
    assert sorted(name for name in staged if name != ".mux-files") == regular  # each file once
    assert installed.reported_version()["version"] == "0.2.0"


def _run_update_in_process(installed: Install, feed: Feed):
    from updater.commands.update import run_update
    from updater.config import settings
    from updater.core.request import ReleaseRequest

    loaded = settings.load(
        installed.env,
        flags=settings.Requested(home=installed.home, trust_keys=[feed.keypair.public_key]),
        development=True,
    )
    return run_update(ReleaseRequest.latest(), loaded)


def _flush_threads() -> set[object]:
    import threading

    return {t for t in threading.enumerate() if t.name == "mux-fsync"}


def test_a_file_the_disk_cannot_flush_fails_the_update_with_one_line_and_leaves_nothing(
    installed: Install, feed: Feed, monkeypatch
) -> None:
    """fsync failing (EIO) on an unpacked file, in the thread that flushes as the archive
    unpacks: the update stops before the switch, with one line, and removes what it staged."""
    import errno

    from updater import files
    from updater.errors import InstallError

    real_fsync_file = files.fsync_file

    def fsync_file(path: str | Path) -> tuple[int, int]:
        if ".partial-" in str(path) and Path(path).name == "mux":
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real_fsync_file(path)

    monkeypatch.setattr(files, "fsync_file", fsync_file)
    threads_before = _flush_threads()
    versions_before = sorted(p.name for p in (installed.home / "versions").iterdir())
    with pytest.raises(InstallError) as failed:
        _run_update_in_process(installed, feed)
    assert os.strerror(errno.EIO) in failed.value.message
    assert "\n" not in failed.value.message
    assert installed.active() == "0.1.0"
    assert sorted(p.name for p in (installed.home / "versions").iterdir()) == versions_before
    assert _flush_threads() <= threads_before


def test_a_failure_while_listing_the_files_stops_the_flush_before_the_folder_goes(
    installed: Install, feed: Feed, monkeypatch
) -> None:
    """The flush thread must be joined on every path out of the switch: left running, it
    would walk a folder the transaction removes, and wait for work forever."""
    import errno

    from updater.errors import InstallError
    from updater.install import transaction as install

    def files_list(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(install, "files_list", files_list)
    threads_before = _flush_threads()
    versions_before = sorted(p.name for p in (installed.home / "versions").iterdir())
    with pytest.raises(InstallError):
        _run_update_in_process(installed, feed)
    assert _flush_threads() <= threads_before
    assert installed.active() == "0.1.0"
    assert sorted(p.name for p in (installed.home / "versions").iterdir()) == versions_before


def test_an_update_that_is_not_needed_stops_the_prestarted_verifier(
    installed: Install, feed: Feed, monkeypatch
) -> None:
    """The child `mux update` starts before it knows whether it will install is killed as
    soon as the update ends, not left to finish importing sigstore until this process exits."""
    import signal

    from updater.commands.update import UpdateAction, run_update
    from updater.config import settings
    from updater.core.request import ReleaseRequest
    from updater.trust import attestation_start
    from updater.trust.attestation_worker import AttestationWorker

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setenv("MUX_REPO", "acme/mux")  # a child starts early only for a known repository
    loaded = settings.load(
        installed.env,
        flags=settings.Requested(home=installed.home, trust_keys=[feed.keypair.public_key]),
        development=True,
    )
    assert run_update(ReleaseRequest.latest(), loaded).action is UpdateAction.UPDATED
    attestation_start.prestart([])
    (process,) = attestation_start._prestarted
    try:
        result = run_update(ReleaseRequest.latest(), loaded)
    finally:
        while (unasked := attestation_start.take_prestarted()) is not None:
            AttestationWorker(unasked).close()
    assert result.action is UpdateAction.UP_TO_DATE
    assert process.returncode == -signal.SIGKILL  # stopped by the update, not by its own end
