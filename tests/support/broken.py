"""Stand-in builds whose server cannot come up, though they pass the smoke test.

Each is a real release build (``release.build.build_standin`` through
``tests.support.releases.make_release``) edited before it is packaged, as a build broken in
one way would be: its ``mux version --json`` answers (so ``mux update`` installs it), but
``mux server run`` fails in the way :data:`KINDS` names. Use as
``make_release(..., post_build=breaker("segfault"))``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.support.standins import _relist

# What `mux server run` of the build does instead of serving.
KINDS = (
    "crash-on-import",  # its server module raises ImportError when imported
    "exit",  # serve() exits at once with code 1 and a message
    "segfault",  # serve() dereferences NULL (a real SIGSEGV)
    "hang",  # serve() ignores SIGTERM and sleeps, never listening
    "wrong-protocol",  # it serves, but its status line says another protocol than its build
    "missing-library",  # the launcher runs a native program whose shared library is not there
)

_SERVE = "def serve(\n"


def _edit_server_module(folder: Path, kind: str) -> None:
    module = folder / "lib" / "updater" / "daemon" / "server.py"
    text = module.read_text(encoding="utf-8")
    if kind == "crash-on-import":
        future = "from __future__ import annotations\n"
        crash = 'raise ImportError("libmux_render.so.3: cannot open shared object file")\n'
        text = text.replace(future, future + crash, 1)
    elif kind == "wrong-protocol":
        old = "        protocol_version=info.protocol_version,\n"
        assert old in text, "the stand-in's status line changed"
        text = text.replace(old, "        protocol_version=info.protocol_version + 1,\n")
    else:
        body = {
            "exit": (
                'import os; print("mux: cannot open the terminal database", file=sys.stderr, '
                "flush=True); os._exit(1)"
            ),
            "segfault": "import ctypes; ctypes.string_at(0)",
            "hang": (
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(3600)"
            ),
        }[kind]
        start = text.index(_SERVE)
        end = text.index('    """', text.index('    """', start) + 1) + len('    """\n')
        text = text[:end] + f"    {body}\n" + text[end:]
    module.write_text(text, encoding="utf-8")


def _missing_library(folder: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build a program whose library is missing")
    with tempfile.TemporaryDirectory(prefix="mux-native-") as scratch:
        work = Path(scratch)
        (work / "lib.c").write_text("int mux_native(void) { return 0; }\n")
        (work / "main.c").write_text(
            "int mux_native(void);\nint main(void) { return mux_native(); }\n"
        )
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-o", str(work / "libmuxnative.so"), str(work / "lib.c")],
            check=True,
        )
        subprocess.run(
            [
                *(gcc, "-o", str(folder / "lib" / "mux-native"), str(work / "main.c")),
                *("-L", scratch, "-lmuxnative"),
            ],
            check=True,
        )
    # The build ships the program, not its library (what a packaging mistake does).
    launcher = folder / "mux"
    text = launcher.read_text(encoding="utf-8")
    marker = "MUX_STANDIN_LAUNCHER=$0 exec "
    assert marker in text, "the stand-in launcher changed"
    native = 'if [ "${1-}" = server ] && [ "${2-}" = run ]; then exec "$here/lib/mux-native"; fi\n'
    launcher.write_text(text.replace(marker, native + marker, 1), encoding="utf-8")


def breaker(kind: str) -> Callable[[Path], None]:
    """A ``post_build`` hook that breaks a stand-in build's server as ``kind`` says."""
    if kind not in KINDS:
        raise ValueError(kind)

    def post_build(folder: Path) -> None:
        if kind == "missing-library":
            _missing_library(folder)
        else:
            _edit_server_module(folder, kind)
        _relist(folder, f"a broken server ({kind}, tests.support.broken)")

    return post_build
