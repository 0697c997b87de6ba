"""An installed stand-in build run in the test's process (``Install.run``, through
:func:`tests.support.inprocess.run_installed`) answers as the same build run as a real process:
the same exit codes, the same JSON (but for times), the same files on disk; it leaves this
process the development build it was; the servers it starts are processes of the installed
build; and where it cannot stand for the process (a build
that is not an unmodified stand-in of this checkout, a call that needs a process) a real
process runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import inprocess, installs
from tests.support.installs import Install, bootstrap
from tests.support.releases import Feed, make_feed, serve_directory
from tests.support.standins import INTERPRETER, own_interpreter
from updater.config import buildfolder, buildinfo
from updater.install import inuse

# What two runs a moment apart may say differently: times, and how long things took.
_TIME_KEYS = re.compile(r"(_at|_until|_seconds|_ms|elapsed|duration|age)$|^(time|when|date)$")
# What each install draws at random for itself.
_OWN_KEYS = frozenset({"rollout_bucket"})
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"], protocols={"0.2.0": 2})


@pytest.fixture
def served(feed: Feed):
    with serve_directory(feed.path) as url:
        yield url


def install_in(root: Path, sandbox_env: dict[str, str], feed: Feed, served: str) -> Install:
    """An install of 0.1.0 with HOME, its XDG folders and MUX_HOME of its own under ``root``."""
    env = dict(sandbox_env)
    home = root / "home"
    for name, value in sandbox_env.items():
        if name == "HOME" or (name.startswith("XDG_") and name != "XDG_RUNTIME_DIR"):
            relative = Path(value).relative_to(Path(sandbox_env["HOME"]).parent)
            env[name] = str(root / relative)
            Path(env[name]).mkdir(parents=True, exist_ok=True)
    assert env["HOME"] == str(home)
    return bootstrap(root, env, source=served, version="0.1.0", public_key=feed.keypair.public_key)


def normalised(value: object, root: Path) -> object:
    """``value`` (JSON) with ``root`` as ``<root>`` and every time as ``<time>``."""
    if isinstance(value, dict):
        return {
            k: "<time>"
            if _TIME_KEYS.search(k) and v is not None
            else "<own>"
            if k in _OWN_KEYS
            else normalised(v, root)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalised(v, root) for v in value]
    if isinstance(value, str):
        return _ISO_TIME.sub("<time>", value.replace(str(root), "<root>"))
    return value


def answer(stdout: str, root: Path) -> object:
    """What a command printed: its JSON document normalised, or its text with ``<root>``."""
    try:
        return normalised(json.loads(stdout), root)
    except ValueError:
        return stdout.replace(str(root), "<root>")


def files_of(install: Install, root: Path) -> dict[str, object]:
    """Every path of the install (MUX_HOME and its bin dir) below ``root``, with what it
    holds: a link's target, a JSON file's document (normalised), another file's digest."""
    found: dict[str, object] = {}
    for top in (install.home, install.bin_dir):
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                key = str(path.relative_to(root))
                if path.is_symlink():
                    found[key] = "-> " + os.readlink(path).replace(str(root), "<root>")
                elif path.is_dir():
                    found[key] = "dir"
                elif path.suffix == ".json":
                    found[key] = normalised(json.loads(path.read_text()), root)
                else:
                    data = path.read_bytes().replace(str(root).encode(), b"<root>")
                    found[key] = hashlib.sha256(data).hexdigest()
    return found


# Each exit code and one-line error kind once: the real process's are its own, the rest of the
# suite's runs of an installed build are mostly in-process.
COMMANDS = [
    ("version", "--json"),
    ("update", "--no-such-flag"),  # a usage error: 2
    ("update", "--version", "9.9.9", "--json"),  # no such release: 1, one line
    ("update", "--version", "9.9.9"),
    ("update", "--check", "--json"),
    ("status", "--json"),
    ("update", "--json"),
    ("version", "--json"),
    ("update", "--check", "--json"),
    ("status", "--json"),
    ("update", "--rollback", "--json"),
    ("version", "--json"),
    ("status", "--json"),
]


def test_in_process_and_real_process_answer_alike(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str
) -> None:
    here_root, there_root = tmp_path / "in-process", tmp_path / "process"
    here = install_in(here_root, sandbox_env, feed, served)
    there = install_in(there_root, sandbox_env, feed, served)
    assert inprocess.unmodified_standin(here.mux) is not None
    for command in COMMANDS:
        ours = here.run(*command, process=False)
        theirs = there.run(*command, process=True)
        assert ours.args == [str(here.mux), *command]  # the in-process run's own answer
        assert (ours.returncode, ours.stderr.replace(str(here_root), "<root>")) == (
            theirs.returncode,
            theirs.stderr.replace(str(there_root), "<root>"),
        ), command
        assert answer(ours.stdout, here_root) == answer(theirs.stdout, there_root), command
        assert files_of(here, here_root) == files_of(there, there_root), command
    assert here.active() == there.active() == "0.1.0"  # updated, then rolled back
    codes = [here.run(*command, process=False).returncode for command in COMMANDS[:4]]
    assert codes == [0, 2, 1, 1]


def test_the_in_process_run_leaves_this_process_as_it_was(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str
) -> None:
    install = install_in(tmp_path, sandbox_env, feed, served)
    before = (buildinfo.current(), list(sys.argv), dict(os.environ), sys.stdout, sys.stderr)
    answered = install.run("version", "--json", process=False)
    assert answered.returncode == 0, answered.stderr
    doc = json.loads(answered.stdout)
    assert (doc["version"], doc["development"]) == ("0.1.0", False)
    assert not hasattr(sys, "frozen") and buildfolder.running_build_folder() is None
    assert buildfolder.running_package_folder() == buildfolder.PACKAGE_FOLDER
    after = (buildinfo.current(), list(sys.argv), dict(os.environ), sys.stdout, sys.stderr)
    assert after == before and buildinfo.current().development
    assert inuse._held is None  # the version's hold ended with the run


def edit_launcher(folder: Path) -> None:
    launcher = folder / "mux"
    launcher.write_text(launcher.read_text() + "# edited\n")


def edit_module(folder: Path) -> None:
    module = folder / "lib" / "updater" / "cli" / "version.py"
    module.write_text(module.read_text() + "# edited\n")


def add_module(folder: Path) -> None:
    (folder / "lib" / "extra.py").write_text("")  # what another entry point could import


@pytest.mark.parametrize("edit", [edit_launcher, edit_module, add_module])
def test_a_build_that_is_not_this_checkout_s_stand_in_runs_as_a_process(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str, edit, monkeypatch
) -> None:
    install = install_in(tmp_path, sandbox_env, feed, served)
    processes = spy_on_processes(monkeypatch)
    assert version_of(install) == "0.1.0"
    assert processes == []  # in this process while the build is unmodified
    edit(Path(os.path.realpath(install.mux)).parent)
    assert inprocess.unmodified_standin(install.mux) is None
    assert version_of(install) == "0.1.0"
    assert processes == [["version", "--json"]]


def test_a_call_that_needs_a_process_gets_one(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str, monkeypatch
) -> None:
    install = install_in(tmp_path, sandbox_env, feed, served)
    processes = spy_on_processes(monkeypatch)
    assert install.run("version", process=True).returncode == 0
    assert install.run("version", process=False, cwd=tmp_path).returncode == 0
    assert install.run("version", process=False, preexec_fn=os.setpgrp).returncode == 0
    results: list[subprocess.CompletedProcess[str]] = []
    thread = threading.Thread(target=lambda: results.append(install.run("version", process=False)))
    thread.start()
    thread.join()
    assert results[0].returncode == 0
    with inprocess._one_at_a_time:  # another in-process run under way
        assert install.run("version", process=False).returncode == 0
    assert processes == [["version"]] * 5
    assert install.run("version", process=False).returncode == 0 and len(processes) == 5


def version_of(install: Install) -> str:
    answered = install.run("version", "--json", process=False)
    assert answered.returncode == 0, answered.stderr
    return json.loads(answered.stdout)["version"]


def spy_on_processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The arguments of every real process ``Install.run`` starts from now on."""
    started: list[list[str]] = []
    real = installs.run_mux

    def run_mux(args: list[str], *rest, **kwargs) -> subprocess.CompletedProcess[str]:
        started.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(installs, "run_mux", run_mux)
    return started


def test_a_server_started_in_process_is_a_process_of_the_versioned_build(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, served: str
) -> None:
    install = install_in(tmp_path, sandbox_env, feed, served)
    started = install.run("server", "start", "--name", "s", process=False)
    assert started.returncode == 0, started.stderr
    status = install.run("server", "status", "--name", "s", "--json", process=False)
    assert status.returncode == 0, status.stderr
    [server] = json.loads(status.stdout)["servers"]
    assert server["state"] == "live" and server["version"] == "0.1.0", server
    assert server["pid"] != os.getpid()  # a process of its own, started by the versioned launcher
    assert server["executable"] == os.path.realpath(install.mux)
    stopped = install.run("server", "stop", "--name", "s", process=False)
    assert stopped.returncode == 0, stopped.stderr


def test_a_build_with_its_own_interpreter_runs_in_process_and_its_servers_run_that_copy(
    tmp_path: Path, sandbox_env: dict[str, str], monkeypatch
) -> None:
    """tests.support.standins.own_interpreter only changes which interpreter the launcher
    runs: the code is this checkout's, so a command runs in this process, and what the build
    starts (a server) is a process of the copy inside the version folder."""
    feed = make_feed(tmp_path / "f", versions=["0.1.0"], post_build=own_interpreter)
    with serve_directory(feed.path) as url:
        install = install_in(tmp_path, sandbox_env, feed, url)
    processes = spy_on_processes(monkeypatch)
    folder = inprocess.unmodified_standin(install.mux)
    assert folder is not None and (folder / INTERPRETER).is_file()
    started = install.run("server", "start", "--name", "own", process=False)
    assert started.returncode == 0, started.stderr
    status = install.run("server", "status", "--name", "own", "--json", process=False)
    [server] = json.loads(status.stdout)["servers"]
    assert server["state"] == "live" and server["pid"] != os.getpid(), server
    assert os.readlink(f"/proc/{server['pid']}/exe") == str(folder / INTERPRETER)
    assert install.run("server", "stop", "--name", "own", process=False).returncode == 0
    assert processes == []  # every command in this process
