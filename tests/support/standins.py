"""Stand-in builds whose running program lives in their version folder, as a real build's does.

``release.build.standin.build_standin`` makes a ``sh`` launcher that runs the test's Python on
a copy of ``updater`` in the build's ``lib/``: code is loaded lazily from the version folder, as a
PyInstaller one-folder build loads it, but the *process* is the test's Python, somewhere
else. :func:`own_interpreter` completes the picture for retention tests: it puts a copy of
the interpreter into the build (``lib/python/bin/python``, a venv-style ``pyvenv.cfg``
pointing at the real installation's standard library, and a ``.pth`` naming this checkout's
site-packages), and has the launcher run that copy. Then ``/proc/<pid>/exe`` of a server
started from such a build is inside ``versions/<version>/``, as it is for a real build, and
deleting the folder deletes the running program (``… (deleted)``).

Use it as ``make_release(..., post_build=own_interpreter)`` or ``make_feed(...,
post_build=own_interpreter)``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

INTERPRETER = Path("lib", "python", "bin", "python")


def own_interpreter(build_folder: Path) -> None:
    """Give a stand-in build its own copy of the interpreter, and run it from there."""
    real = Path(os.path.realpath(sys.executable))
    venv = build_folder / "lib" / "python"
    (venv / "bin").mkdir(parents=True)
    shutil.copy2(real, build_folder / INTERPRETER)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "pyvenv.cfg").write_text(
        f"home = {real.parent}\ninclude-system-site-packages = false\n"
        f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n",
        encoding="utf-8",
    )
    site_packages = venv / "lib" / version / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "mux-test-deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    launcher = build_folder / "mux"
    text = own_interpreter_launcher(launcher.read_text(encoding="utf-8"))
    launcher.write_text(text, encoding="utf-8")
    _relist(build_folder, "the test's Python interpreter (tests.support.standins)")


def own_interpreter_launcher(text: str) -> str:
    """A stand-in launcher's text, running the build's own interpreter instead of the
    test's (what :func:`own_interpreter` writes)."""
    quoted = f"exec {shlex.quote(sys.executable)} "
    if quoted not in text:
        raise AssertionError(f"the stand-in launcher changed; cannot find {quoted!r} in it")
    return text.replace(quoted, f'exec "$here/{INTERPRETER}" ')


def add_file(build_folder: Path, relative: str, data: bytes) -> None:
    """Add a file to a stand-in build (listed in its SBOM as a component of its own)."""
    path = build_folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    _relist(build_folder, f"a test's file {relative} (tests.support.standins)")


def _relist(build_folder: Path, component_name: str) -> None:
    """Make the build's SBOM list what the folder now holds (packaging checks it): changed
    files with their new digests, new ones as one component named ``component_name``."""
    from release.bill.sbom import folder_files
    from release.folder.layout import SBOM_NAME

    path = build_folder / SBOM_NAME
    doc = json.loads(path.read_text(encoding="utf-8"))
    present = folder_files(build_folder)

    def walk(components: list[dict]) -> None:
        for component in components:
            name = component.get("name")
            if component.get("type") == "file" and name in present:
                component["hashes"] = [{"alg": "SHA-256", "content": present.pop(name)}]
            walk(component.get("components") or [])

    walk(doc["components"])
    doc["components"].append(
        {
            "type": "library",
            "bom-ref": f"test-{len(doc['components'])}",
            "name": component_name,
            "components": [
                {"type": "file", "name": name, "hashes": [{"alg": "SHA-256", "content": digest}]}
                for name, digest in sorted(present.items())
            ],
        }
    )
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
