"""``mux update`` by a delta, end to end: real installs, real processes, a loopback feed whose
request log says what came over the network; and every way a delta can be wrong, each of which
falls back to the full archive in the same run (or is refused), losing nothing and leaving
no temporary file."""

from __future__ import annotations

import bz2
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from release.publish import tuf_repo
from release.publish.delta import write_deltas
from release.publish.formats import delta_header_document
from release.publish.package import rehash_sums
from tests.support import stress
from tests.support.installs import Install, bootstrap, keep_pristine, leftovers, snapshot
from tests.support.releases import (
    Feed,
    flip_byte,
    make_feed,
    serve_directory_recording,
    sign_release_dir,
)
from tests.support.tuf import make_tuf_feed
from updater.config.targets import detect_target
from updater.formats import delta as fmt

TARGET = detect_target()
DELTA = fmt.delta_name(TARGET, "0.1.0")
FILE_LIST = fmt.file_list_name(TARGET)
ARCHIVE = f"mux-{TARGET}.tar.gz"
# A file the delta copies from the kept version that `mux update` does not run (a changed
# one is read past: Python compiles the module from its source on a bad magic number).
KEPT_COPIED = f"lib/updater/daemon/__pycache__/hub.{sys.implementation.cache_tag}.pyc"
KEPT_PATCHED = "THIRD_PARTY_NOTICES.md"  # a file the delta patches (its version differs)


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    feed = make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])
    write_deltas(feed.releases["0.2.0"], [feed.releases["0.1.0"]])
    sign_release_dir(feed.releases["0.2.0"], feed.keypair)
    return feed


@pytest.fixture
def served(feed: Feed):
    with serve_directory_recording(feed.path) as (url, paths):
        yield url, paths


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: Feed, served) -> Install:
    url, paths = served
    install = bootstrap(
        tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
    )
    paths.clear()
    return install


def _sent(feed: Feed, paths: list[str]) -> dict[str, int]:
    """The bytes the server sent for each release file, from its request log."""
    sent: dict[str, int] = {}
    for path in paths:
        file = feed.path / path.lstrip("/")
        if file.is_file():
            sent[file.name] = sent.get(file.name, 0) + file.stat().st_size
    return sent


def _update(install: Install, *args: str) -> dict[str, Any]:
    result = install.run("update", "--json", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["action"] == "updated", report
    report["stderr"] = result.stderr
    return report


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry below ``folder``: a file's sha256 and mode, a link's target, a folder."""
    found: dict[str, tuple[str, int]] = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        if path.is_symlink():
            found[relative] = (f"-> {os.readlink(path)}", 0)
        elif path.is_dir():
            found[relative] = ("dir", 0)
        else:
            found[relative] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode)
    return found


def _full_install_tree(tmp_path: Path, sandbox_env, feed: Feed, url: str) -> dict:
    """The tree a fresh install of 0.2.0 from the full archive gets (the reference)."""
    reference = bootstrap(
        tmp_path / "reference",
        sandbox_env,
        source=url,
        version="0.2.0",
        public_key=feed.keypair.public_key,
    )
    return _tree(reference.home / "versions" / "0.2.0")


def test_update_by_delta_downloads_only_what_changed(
    installed: Install, feed: Feed, served, tmp_path: Path, sandbox_env
) -> None:
    url, paths = served
    report = _update(installed)
    transfer = report["transfer"]
    assert transfer["method"] == "delta" and transfer["delta_from"] == "0.1.0", transfer
    assert transfer["fallback_reason"] is None
    sent = _sent(feed, paths)
    assert ARCHIVE not in sent and {DELTA, FILE_LIST} <= set(sent), sent
    # The report's bytes are what the server's log says it sent of the build's files.
    assert transfer["bytes"] == sent[DELTA] + sent[FILE_LIST]
    archive_size = (feed.releases["0.2.0"] / ARCHIVE).stat().st_size
    assert transfer["archive_size"] == archive_size
    assert transfer["bytes"] < archive_size / 2
    layers = {layer["layer"]: layer["status"] for layer in report["verification"]}
    assert layers["archive"] == layers["smoke-test"] == layers["digest"] == "ok"
    assert installed.reported_version()["version"] == "0.2.0"
    # Byte for byte and mode for mode what a full install of 0.2.0 gets.
    version_dir = installed.home / "versions" / "0.2.0"
    assert _tree(version_dir) == _full_install_tree(tmp_path, sandbox_env, feed, url)
    assert leftovers(installed) == []
    # The next update from 0.2.0 can start from what this one recorded.
    record = json.loads((installed.home / "install.json").read_text())
    assert (
        record["versions"]["0.2.0"]["files_sha256"]
        == hashlib.sha256((version_dir / ".mux-files").read_bytes()).hexdigest()
    )


def test_text_report_says_which_download(installed: Install) -> None:
    result = installed.run("update", "-v")  # the download line is one of -v's
    assert result.returncode == 0, result.stderr
    line = next(li for li in result.stdout.splitlines() if "download:" in li)
    assert "a delta from 0.1.0" in line and "of the" in line, result.stdout


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_no_delta_downloads_the_full_archive(
    installed: Install, feed: Feed, served, how: str
) -> None:
    _, paths = served
    if how == "flag":
        report = _update(installed, "--no-delta")
    else:
        installed.env["MUX_NO_DELTA"] = "1"
        report = _update(installed)
    assert report["transfer"]["method"] == "full"
    sent = _sent(feed, paths)
    assert DELTA not in sent and FILE_LIST not in sent
    assert report["transfer"]["bytes"] == sent[ARCHIVE]
    assert "mux: warning:" not in report["stderr"]


# -- faults: each falls back to the full archive, in the same run, with one line why --------


def _resign(feed: Feed) -> None:
    release = feed.releases["0.2.0"]
    rehash_sums(release)
    sign_release_dir(release, feed.keypair)


def _file_list_doc(feed: Feed) -> dict[str, Any]:
    return json.loads((feed.releases["0.2.0"] / FILE_LIST).read_bytes())


def _write_file_list(feed: Feed, doc: dict[str, Any]) -> None:
    (feed.releases["0.2.0"] / FILE_LIST).write_text(json.dumps(doc, indent=1, sort_keys=True))


def _read_delta(feed: Feed) -> tuple[fmt.DeltaHeader, bytes]:
    raw = (feed.releases["0.2.0"] / DELTA).read_bytes()
    length = fmt.header_length(raw[: fmt.DELTA_PREFIX_SIZE])
    header = fmt.parse_delta_header(
        raw[fmt.DELTA_PREFIX_SIZE : fmt.DELTA_PREFIX_SIZE + length], size=len(raw)
    )
    return header, raw[fmt.DELTA_PREFIX_SIZE + length :]


def _publish_delta(feed: Feed, raw: bytes, *, file_list: dict[str, Any] | None = None) -> None:
    """Publish ``raw`` as the delta, signed: the file list names its size and digest, and
    SHA256SUMS and its signature cover both (what a compromised or buggy signer publishes)."""
    (feed.releases["0.2.0"] / DELTA).write_bytes(raw)
    doc = file_list or _file_list_doc(feed)
    (ref,) = doc["deltas"]
    ref["size"], ref["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
    _write_file_list(feed, doc)
    _resign(feed)


def _rewritten(feed: Feed, change: Callable[[list[dict[str, Any]]], None], patches: bytes) -> bytes:
    """The delta with its header's entries changed by ``change`` and the patch area given."""
    header, _ = _read_delta(feed)
    document = json.loads(delta_header_document(header)[fmt.DELTA_PREFIX_SIZE :])
    change(document["entries"])
    raw = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    return fmt.DELTA_MAGIC + len(raw).to_bytes(4, "big") + raw + patches


def _bsdiff(control: list[tuple[int, int, int]], diff: bytes, extra: bytes, size: int) -> bytes:
    def int64(n: int) -> bytes:
        return (abs(n) | (1 << 63 if n < 0 else 0)).to_bytes(8, "little")

    blocks = [
        bz2.compress(b"".join(int64(a) + int64(b) + int64(c) for a, b, c in control)),
        diff,
        extra,
    ]
    return (
        fmt.BSDIFF_MAGIC + int64(len(blocks[0])) + int64(len(blocks[1])) + int64(size)
    ) + b"".join(blocks)


def _only_patch(entries: list[dict[str, Any]], path: str, length: int) -> None:
    """Every entry a copy from the kept version, but ``path``: one patch of ``length``."""
    for entry in entries:
        if entry["path"] == path:
            entry.update(op="patch", offset=0, length=length)
        elif entry["op"] == "patch":
            entry.update(op="copy")
            entry.pop("offset"), entry.pop("length")


def _notices_entry(feed: Feed) -> dict[str, Any]:
    return next(e for e in _file_list_doc(feed)["entries"] if e["path"] == KEPT_PATCHED)


def _fault(feed: Feed, install: Install | None, fault: str) -> None:
    """Make ``fault`` happen to the feed's delta of 0.2.0, or (the kept-file faults) to
    ``install``'s kept 0.1.0."""
    release = feed.releases["0.2.0"]
    delta = release / DELTA
    if fault == "missing":
        delta.unlink()
    elif fault == "truncated":
        delta.write_bytes(delta.read_bytes()[:-100])
    elif fault == "corrupt":
        flip_byte(delta, len(delta.read_bytes()) // 2)
    elif fault == "oversized":
        delta.write_bytes(delta.read_bytes() + bytes(4096))
    elif fault == "file list corrupt":
        flip_byte(release / FILE_LIST, 40)
    elif fault == "wrong bytes":
        # A signed delta whose patch of the notices makes other bytes than the file list says.
        size = _notices_entry(feed)["size"]
        patch = _bsdiff([(0, size, 0)], bz2.compress(b""), bz2.compress(b"x" * size), size)
        _publish_delta(
            feed, _rewritten(feed, lambda e: _only_patch(e, KEPT_PATCHED, len(patch)), patch)
        )
    elif fault == "gigabytes":
        # A signed patch whose diff block inflates to 4 GiB (3 KB of bzip2): the applier asks
        # the decompressor for at most the file's signed size, then finds the rest.
        size = _notices_entry(feed)["size"]
        bomb = (Path(__file__).parent / "fixtures" / "zeros-4gib.bz2").read_bytes()
        patch = _bsdiff([(size, 0, 0)], bomb, bz2.compress(b""), size)
        _publish_delta(
            feed, _rewritten(feed, lambda e: _only_patch(e, KEPT_PATCHED, len(patch)), patch)
        )
    elif fault == "output past its size":
        size = _notices_entry(feed)["size"]
        patch = _bsdiff([(0, 1 << 32, 0)], bz2.compress(b""), bz2.compress(b""), size)
        _publish_delta(
            feed, _rewritten(feed, lambda e: _only_patch(e, KEPT_PATCHED, len(patch)), patch)
        )
    elif fault == "kept file changed":
        flip_byte(install.home / "versions" / "0.1.0" / KEPT_COPIED, 0)
    elif fault == "patched kept file changed":
        flip_byte(install.home / "versions" / "0.1.0" / KEPT_PATCHED, 10)
    elif fault == "kept file list changed":
        listed = install.home / "versions" / "0.1.0" / ".mux-files"
        listed.write_bytes(listed.read_bytes().replace(b"./", b"./x", 1))
    elif fault == "dotdot in the delta":

        def escape(entries: list[dict[str, Any]]) -> None:
            entries[0]["path"] = "../../escaped"

        _publish_delta(feed, _rewritten(feed, escape, _read_delta(feed)[1]))
    elif fault == "dotdot source in the delta":

        def escape(entries: list[dict[str, Any]]) -> None:
            copied = next(e for e in entries if e["op"] == "copy")
            copied["source"] = "../../../../etc/passwd"

        _publish_delta(feed, _rewritten(feed, escape, _read_delta(feed)[1]))
    elif fault in ("link leaving", "device", "absolute link"):
        doc = _file_list_doc(feed)
        if fault == "device":
            doc["entries"].append({"path": "lib/tty", "type": "char", "major": 5, "minor": 0})
        else:
            target = "../../../etc/passwd" if fault == "link leaving" else "/etc/passwd"
            doc["entries"].append({"path": "lib/passwd", "type": "link", "target": target})
        _write_file_list(feed, doc)
        _resign(feed)
    elif fault == "link in the kept version":
        kept = install.home / "versions" / "0.1.0" / KEPT_COPIED
        kept.unlink()
        kept.symlink_to("/etc/passwd")
    else:
        raise AssertionError(fault)


FAULTS = {
    "missing": "404",
    "truncated": "bytes",
    "corrupt": "sha256",
    "oversized": "larger",
    "file list corrupt": "sha256",
    "wrong bytes": "came out with sha256",
    "gigabytes": "holds more than the patch uses",
    "output past its size": "writes outside",
    "kept file changed": "changed since it was installed",
    "patched kept file changed": "changed since it was installed",
    "kept file list changed": "does not match its record",
    "dotdot in the delta": "not a plain path",
    "dotdot source in the delta": "not a plain path",
    "link leaving": "leaves its folder",
    "absolute link": "leaves its folder",
    "device": "not a file, folder or link",
    "link in the kept version": "kept",
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_bad_delta_falls_back_to_the_full_archive(
    installed: Install, feed: Feed, served, fault: str, tmp_path: Path, sandbox_env
) -> None:
    url, paths = served
    _fault(feed, installed, fault)
    report = _update(installed)
    transfer = report["transfer"]
    assert transfer["method"] == "full", transfer
    reason = transfer["fallback_reason"]
    assert reason and FAULTS[fault] in reason, reason
    warnings = [li for li in report["stderr"].splitlines() if li.startswith("mux: warning: ")]
    assert len(warnings) == 1 and "downloading the full archive" in warnings[0], warnings
    assert installed.reported_version()["version"] == "0.2.0"
    sent = _sent(feed, paths)
    assert ARCHIVE in sent
    served_bytes = sum(sent.get(n, 0) for n in (DELTA, FILE_LIST, ARCHIVE))
    if fault == "oversized":  # mux stops reading before the signed size is passed
        assert sent[ARCHIVE] + sent[FILE_LIST] <= transfer["bytes"] <= served_bytes
    else:
        assert transfer["bytes"] == served_bytes
    # What was installed is the full archive's tree, and the kept version is still there.
    reference = _full_install_tree(tmp_path, sandbox_env, feed, url)
    assert _tree(installed.home / "versions" / "0.2.0") == reference
    assert (installed.home / "versions" / "0.1.0" / "mux").is_file()
    assert leftovers(installed) == []


def test_peak_memory_stays_bounded_on_a_gigabyte_patch(
    installed: Install, feed: Feed, served
) -> None:
    """The 4 GiB patch costs no more memory than a good update (bounded windows)."""
    _fault(feed, installed, "gigabytes")
    command = [str(installed.mux), "update", "--json"]
    wrapper = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    result = subprocess.run(
        ["python3", "-c", wrapper, *command],
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    peak_kib = int(result.stdout.split()[-1])
    assert peak_kib < 64 * 1024, f"peak RSS {peak_kib} KiB"
    assert installed.reported_version()["version"] == "0.2.0"


def test_no_delta_from_a_version_not_kept_is_tried(installed: Install, feed: Feed, served) -> None:
    """A release whose deltas start from versions this install does not keep: the full
    archive, no delta fetched, no warning."""
    _, paths = served
    doc = _file_list_doc(feed)
    doc["deltas"][0]["from"] = "0.0.9"
    doc["deltas"][0]["name"] = fmt.delta_name(TARGET, "0.0.9")
    os.rename(feed.releases["0.2.0"] / DELTA, feed.releases["0.2.0"] / doc["deltas"][0]["name"])
    _write_file_list(feed, doc)
    _resign(feed)
    report = _update(installed)
    assert report["transfer"]["method"] == "full"
    assert "keeps" in report["transfer"]["fallback_reason"]
    assert "mux: warning:" not in report["stderr"]
    assert not any("0.0.9" in p for p in paths)


KILLS = 3  # kills that must land mid-way (bench/bench_stress.py: 30 runs)
MAX_KILL_RUNS = 9  # runs tried for them


def test_kill_9_during_a_delta_update_leaves_a_runnable_mux(installed: Install) -> None:
    """``kill -9`` during an update by delta, aimed in turn at each step as it shows on disk:
    the checks before the delta is applied (the index, the signed documents, the delta's
    download), the delta's apply into the staging folder, and what follows the switch of
    the link; each moment a part of that step's length in a reference run (a half, a
    quarter, three quarters, ...: tests/support/stress.py, ``Moments``), counted from the
    moment the step shows; until three landed mid-way, the checks and the apply among them
    (at most nine runs). After each, :func:`stress.after_a_delta_kill`. (The switch and what
    follows it last a few renames: each is hit exactly by the test below.)"""
    pristine_kept = snapshot(installed.home / "versions" / "0.1.0")
    reset = keep_pristine(installed, installed.home.parent / "pristine")
    starts = stress.when_each_step_starts(installed)
    assert set(stress.STEPS) <= set(starts), starts
    aims = ("verify", "apply", "settle")
    lengths = stress.step_lengths(starts)
    moments = {step: stress.Moments(lengths[step]) for step in aims}

    killed: dict[str, int] = {}  # runs killed mid-way, by the step they were aimed at
    for run in range(MAX_KILL_RUNS):
        step = aims[run % len(aims)]
        reset()
        delay = moments[step].next()
        where = f"run {run} ({delay:.3f} s in; steps from the start {starts})"
        kill, _left_in = stress.delta_round(installed, step, delay, pristine_kept, where)
        if moments[step].saw(kill).landed:
            killed[step] = killed.get(step, 0) + 1
        if sum(killed.values()) >= KILLS and {"verify", "apply"} <= set(killed):
            break
    # The checks and the delta's apply among them (a run can finish before its kill on a
    # loaded machine: more runs, not fewer kills); the switch's renames and what follows are
    # hit exactly by the test below.
    assert sum(killed.values()) >= KILLS, f"only {killed} runs were killed mid-way; {starts}"
    assert {"verify", "apply"} <= set(killed), f"kills by step: {killed}; {starts}"


_RENAMES = "rename,renameat,renameat2"


def _strace() -> str:
    strace = shutil.which("strace")
    if sys.platform != "linux" or strace is None:
        pytest.skip("needs strace (Linux) to kill -9 a process at one system call")
    probe = subprocess.run(
        [strace, "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode(errors='replace')[:200]}")
    return strace


def _strace_update(strace: str, install: Install, *options: str) -> int:
    """``mux update`` under ``strace -f`` (its renames only), in a session of its own whose
    leftovers are killed: the exit status."""
    process = subprocess.Popen(
        [strace, "-f", "-qq", *options, "-e", f"trace={_RENAMES}", str(install.mux), "update"],
        env=install.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return process.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what a killed update had started


def _rename_ordinals(
    strace: str, install: Install, destinations: list[tuple[Path, int]]
) -> list[int]:
    """For each destination and occurrence (1: the first rename onto it), which rename of its
    thread (1, 2, …) that is, in an update watched by ``strace`` (what ``inject=…:when=N``
    counts, per thread)."""
    log = install.home.parent / "renames.log"
    assert _strace_update(strace, install, "-o", str(log)) == 0
    done: list[tuple[str, str]] = []  # (thread, destination) of every rename that happened
    for line in log.read_text(errors="replace").splitlines():
        call = re.match(r"(\d+)\s+rename(?:at2?)?\((.*)\)\s+=\s+0$", line)
        if call:
            done.append((call[1], re.findall(r'"((?:[^"\\]|\\.)*)"', call[2])[-1]))
    ordinals = []
    for destination, occurrence in destinations:
        at = [i for i, (_, to) in enumerate(done) if to == str(destination)][occurrence - 1]
        thread = done[at][0]
        ordinals.append(sum(1 for tid, _ in done[: at + 1] if tid == thread))
    return ordinals


@pytest.mark.slow
def test_kill_9_at_each_rename_of_the_switch_leaves_a_runnable_mux(installed: Install) -> None:
    """The switch is three renames a few milliseconds apart, moments a random kill almost
    never hits: the staging folder to ``versions/0.2.0``, the new record onto
    ``install.json``, the new link onto the bin dir's ``mux``; then the settled record onto
    ``install.json`` again. ``strace`` delivers SIGKILL at the entry of exactly each
    (``-e inject=rename…:signal=KILL:when=N``, N found by watching an update first): the
    rename never happens. After each, :func:`stress.after_a_delta_kill`."""
    strace = _strace()
    pristine_kept = snapshot(installed.home / "versions" / "0.1.0")
    reset = keep_pristine(installed, installed.home.parent / "pristine")
    record = installed.home / "install.json"
    pristine_record = record.read_bytes()
    targets = [(installed.home / "versions" / "0.2.0", 1), (record, 1), (installed.mux, 1)]
    targets.append((record, 2))
    ordinals = _rename_ordinals(strace, installed, targets)
    left = (
        ("apply", False, "0.1.0"),  # the staging folder stays, nothing recorded
        ("switch", False, "0.1.0"),  # placed, not recorded
        ("switch", True, "0.1.0"),  # placed and recorded, the link not moved
        ("settle", True, "0.2.0"),  # switched, the record not settled
    )
    for (target, _), ordinal, (step, recorded, active) in zip(targets, ordinals, left, strict=True):
        reset()
        status = _strace_update(
            strace,
            installed,
            "-o",
            "/dev/null",
            "-e",
            f"inject={_RENAMES}:signal=KILL:when={ordinal}",
        )
        where = f"killed at rename {ordinal}, onto {target}"
        assert status in (-signal.SIGKILL, 128 + signal.SIGKILL), (where, status)
        assert stress.step_on_disk(installed) == step, where
        assert (record.read_bytes() != pristine_record) == recorded, where
        assert installed.active() == active, where
        stress.after_a_delta_kill(installed, pristine_kept, where)


def test_a_gigabyte_patch_the_signed_tuf_targets_list_is_bounded_end_to_end(
    tmp_path: Path, sandbox_env
) -> None:
    """A patch that inflates to 4 GiB delivered through the signed path of a build that
    trusts a TUF root: the file list and the delta are targets of ``release-workflow``
    (signed by the release key, their lengths and digests with them) and lines of the signed
    ``SHA256SUMS``, so every check before the apply passes. The real ``mux update`` applies
    it in bounded windows (peak RSS under 64 MiB), throws the tree away with one ``mux: warning:``
    line, and installs the full archive in the same run (exit 0: docs/contracts.md, "File
    lists and deltas"); the kept 0.1.0 is untouched and nothing is left behind."""
    feed = make_tuf_feed(tmp_path / "t", ["0.1.0", "0.2.0"], publish=False)
    write_deltas(feed.releases["0.2.0"], [feed.releases["0.1.0"]])
    sign_release_dir(feed.releases["0.2.0"], feed.keypair)
    _fault(feed, None, "gigabytes")  # (this fault touches no install)
    feed.publish()
    listed = tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE).signed.targets
    bomb = feed.releases["0.2.0"] / DELTA
    assert listed[f"v0.2.0/{DELTA}"].length == bomb.stat().st_size
    assert (
        listed[f"v0.2.0/{DELTA}"].hashes["sha256"] == hashlib.sha256(bomb.read_bytes()).hexdigest()
    )

    with serve_directory_recording(feed.path) as (url, paths):
        installed = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        kept = installed.home / "versions" / "0.1.0"
        pristine_kept = snapshot(kept)
        paths.clear()
        wrapper = (
            "import resource, subprocess, sys\n"
            "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stdout.write(done.stdout)\n"
            "sys.stderr.write(done.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(done.returncode)\n"
        )
        result = subprocess.run(
            ["python3", "-c", wrapper, str(installed.mux), "update", "--json"],
            env=installed.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        fetched = [p.rsplit("/", 1)[-1] for p in paths]
    *stderr, peak = result.stderr.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert int(peak) < 64 * 1024, f"peak RSS {peak} KiB"
    report = json.loads(result.stdout)
    layers = {layer["layer"]: layer["status"] for layer in report["verification"]}
    assert layers["tuf"] == "ok", layers  # every file it read, the bomb too, through TUF
    transfer = report["transfer"]
    assert transfer["method"] == "full", transfer
    assert "holds more than the patch uses" in transfer["fallback_reason"], transfer
    warnings = [line for line in stderr if line.startswith("mux: warning: ")]
    assert len(warnings) == 1 and "downloading the full archive" in warnings[0], stderr
    assert {DELTA, FILE_LIST, ARCHIVE} <= set(fetched), fetched
    assert installed.reported_version()["version"] == "0.2.0"
    assert snapshot(kept) == pristine_kept
    assert leftovers(installed) == []


def test_staging_takes_the_delta_too(installed: Install, feed: Feed, served) -> None:
    """``mux update --stage`` downloads exactly what an update by delta does (the server's
    log), and applying the staged copy downloads nothing more."""
    _, paths = served
    reset = keep_pristine(installed, installed.home.parent / "pristine")
    _update(installed)
    by_update = _sent(feed, paths)
    reset()
    paths.clear()
    result = installed.run("update", "--stage", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["action"] == "staged" and report["transfer"]["method"] == "delta", report
    sent = _sent(feed, paths)
    assert ARCHIVE not in sent and {DELTA, FILE_LIST} <= set(sent), sent
    assert sent == by_update
    assert report["transfer"]["bytes"] == sent[DELTA] + sent[FILE_LIST]
    paths.clear()
    assert _update(installed)["staged"]["version"] == "0.2.0"
    assert not set(_sent(feed, paths)) & {ARCHIVE, DELTA, FILE_LIST}
    assert installed.reported_version()["version"] == "0.2.0"
