"""Drive ``install.sh`` from tests: real shells, chosen tools on PATH, HOME snapshots.

Typical use::

    from tests.support.installsh import make_toolbox, render_install_sh, run_install, snapshot

    script = render_install_sh(tmp_path / "install.sh", keys=[feed.keypair.public_key])
    tools = make_toolbox(tmp_path / "bin", downloader="wget")
    before = snapshot(home)
    result = run_install(script, shell="busybox", env={..., "PATH": str(tools)})

* :func:`render_install_sh` writes a copy of install.sh with the trusted minisign keys (and
  optionally the repository) embedded, exactly as the release process publishes it. The
  script has no environment override for its trust root on purpose.
* :func:`make_toolbox` builds a directory of symlinks to the tools a test allows, plus stub
  scripts (fake ``uname``, ``sysctl``, ``ldd``), to be the whole PATH of the script.
* :func:`snapshot` describes a tree (type, mode, content digest, link target) so a test can
  prove that a run changed nothing, or that an uninstall restored it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SH = REPO_ROOT / "install.sh"

SHELLS: dict[str, list[str]] = {
    "dash": ["/usr/bin/dash"],
    "bash": ["/usr/bin/bash"],
    "busybox": ["/usr/bin/busybox", "sh"],
}

# What install.sh needs besides a downloader, a hash tool and minisign (and what the
# stand-in mux launcher needs: readlink, dirname).
BASE_TOOLS = (
    "awk",
    "cat",
    "chmod",
    "cmp",
    "dirname",
    "find",
    "flock",
    "getconf",
    "grep",
    "gzip",
    "head",
    "id",
    "ldd",
    "ln",
    "mkdir",
    "mktemp",
    "mv",
    "readlink",
    "rm",
    "rmdir",
    "sed",
    "sleep",
    "sort",
    "tail",
    "tar",
    "timeout",
    "tr",
    "uname",
    "wc",
)

HASHERS = ("sha256sum", "shasum", "openssl")

_KEYS_LINE = re.compile(r"^MUX_MINISIGN_KEYS='[^']*'$", re.MULTILINE)
_REPO_LINE = re.compile(r"^MUX_DEFAULT_REPO='[^']*'$", re.MULTILINE)


def render_install_sh(dest: Path, *, keys: Sequence[str], repo: str | None = None) -> Path:
    """A copy of install.sh at ``dest`` trusting ``keys`` (and defaulting to ``repo``)."""
    text = INSTALL_SH.read_text(encoding="utf-8")
    for key in keys:
        if not re.fullmatch(r"[A-Za-z0-9+/=]+", key):
            raise ValueError(f"not a minisign public key: {key!r}")
    text, count = _KEYS_LINE.subn(f"MUX_MINISIGN_KEYS='{' '.join(keys)}'", text)
    if count != 1:
        raise AssertionError("install.sh has no single MUX_MINISIGN_KEYS='...' line")
    if repo is not None:
        text, count = _REPO_LINE.subn(f"MUX_DEFAULT_REPO='{repo}'", text)
        if count != 1:
            raise AssertionError("install.sh has no single MUX_DEFAULT_REPO='...' line")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")
    return dest


def _real(tool: str) -> str:
    found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise FileNotFoundError(f"{tool} is not installed on this machine")
    return found


def make_toolbox(
    dest: Path,
    *,
    downloader: str | None = "curl",
    hashers: Sequence[str] = ("sha256sum",),
    minisign: bool = True,
    extra: Sequence[str] = (),
    without: Sequence[str] = (),
    stubs: Mapping[str, str] | None = None,
) -> Path:
    """A directory to be the whole PATH: symlinks to the allowed tools, and stub scripts.

    ``downloader`` is ``"curl"``, ``"wget"`` (GNU), ``"busybox-wget"`` (a ``wget`` link to
    busybox, which then runs as its wget applet) or None. ``stubs`` maps a name to the text
    of a ``sh`` script (it replaces a real tool of that name).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tools = [t for t in (*BASE_TOOLS, *hashers, *extra) if t not in without]
    if minisign:
        tools.append("minisign")
    if downloader in ("curl", "wget"):
        tools.append(downloader)
    for tool in tools:
        if stubs and tool in stubs:
            continue
        link = dest / tool
        if not link.exists():
            link.symlink_to(_real(tool))
    if downloader == "busybox-wget":
        (dest / "wget").symlink_to(_real("busybox"))
    elif downloader not in (None, "curl", "wget"):
        raise ValueError(f"unknown downloader {downloader!r}")
    for name, body in (stubs or {}).items():
        path = dest / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        path.chmod(0o755)
    return dest


def stub_printing(stdout: str = "", *, stderr: str = "", status: int = 0) -> str:
    """The body of a stub tool that prints fixed text and exits with ``status``."""
    lines = []
    if stdout:
        lines.append(f"printf '%s\\n' {_sh_quote(stdout)}")
    if stderr:
        lines.append(f"printf '%s\\n' {_sh_quote(stderr)} >&2")
    lines.append(f"exit {status}")
    return "\n".join(lines) + "\n"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def run_install(
    script: Path,
    *,
    env: Mapping[str, str],
    shell: str = "dash",
    args: Sequence[str] = (),
    piped: bool = False,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run install.sh as ``<shell> install.sh ARGS`` or, piped, as ``cat install.sh | <shell> -s -- ARGS``."""
    command = list(SHELLS[shell])
    if piped:
        command += ["-s", "--", *args]
        stdin_data: bytes | None = Path(script).read_bytes()
    else:
        command += [str(script), *args]
        stdin_data = None
    completed = subprocess.run(
        command,
        env=dict(env),
        input=stdin_data,
        stdin=None if piped else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    return subprocess.CompletedProcess(
        completed.args,
        completed.returncode,
        completed.stdout.decode("utf-8", "replace"),
        completed.stderr.decode("utf-8", "replace"),
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


Entry = tuple[str, ...]


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path below ``root`` (relative) with its type, mode and content or link target."""
    root = Path(root)
    result: dict[str, Entry] = {}
    if not root.exists():
        return result
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            info = path.lstat()
            mode = oct(stat.S_IMODE(info.st_mode))
            if stat.S_ISLNK(info.st_mode):
                result[relative] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                result[relative] = ("dir", mode)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                result[relative] = ("file", mode, digest)
    return result


def installed_target(link: Path) -> str:
    """Where ``<bin>/mux`` points."""
    return os.readlink(link)
