"""Installed muxes for end-to-end tests: bootstrap one, snapshot it, run it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from release.publish.formats import format_sha256sums
from release.publish.package import trusted_comment_for
from release.publish.signing import SecretKey
from tests.support.inprocess import run_in_process, run_installed
from tests.support.processes import run_mux
from updater.formats import models


@dataclass(frozen=True)
class Install:
    home: Path
    bin_dir: Path
    env: dict[str, str]

    @property
    def mux(self) -> Path:
        return self.bin_dir / "mux"

    def run(
        self, *args: str, timeout: float = 120, process: bool = False, **kwargs
    ) -> subprocess.CompletedProcess[str]:
        """``<bin>/mux ARGS``: in this process as that build (:func:`run_installed`) unless
        ``process`` asks for a real one, or the call needs one (``cwd``, ``preexec_fn``), or
        the build is not an unmodified stand-in of this checkout. A real process is for
        where the process is the point (kill -9, locks held by other processes, start-up and
        imports, exit codes and one-line errors as a shell sees them); in this process a
        ``timeout`` cannot fire (a test that expects it to asks for a process)."""
        if not process and not kwargs:
            result = run_installed(self.mux, list(args), self.env)
            if result is not None:
                return result
        return run_mux(list(args), self.env, timeout=timeout, executable=[str(self.mux)], **kwargs)

    def active(self) -> str | None:
        try:
            return Path(os.readlink(self.mux)).parent.name
        except OSError:
            return None

    def reported_version(self) -> dict[str, object]:
        result = self.run("version", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def bootstrap(
    tmp: Path, env: Mapping[str, str], *, source: str, version: str, public_key: str
) -> Install:
    """Install ``version`` with the development mux into a fresh MUX_HOME and bin dir (the
    development mux runs in this process: the install is what a test is about, not this
    step; :meth:`Install.run` runs the installed mux)."""
    home = tmp / "mux-home"
    bin_dir = tmp / "bin"
    install_env = {**env, "MUX_INSTALL_DIR": str(bin_dir), "MUX_UPDATE_SOURCE": source}
    result = run_in_process(
        ["update", "--home", str(home), "--version", version, "--trust-key", public_key],
        install_env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return Install(home=home, bin_dir=bin_dir, env=install_env)


def snapshot(*roots: Path) -> dict[str, str]:
    """Every path below the roots with its content hash (files) or link target (links)."""
    state: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                if path.is_symlink():
                    state[str(path)] = "-> " + os.readlink(path)
                elif path.is_file():
                    state[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
                else:
                    state[str(path)] = "dir"
    return state


def republish(
    release_dir: Path,
    secret_key: SecretKey,
    *,
    archive: bytes | None = None,
    target: str | None = None,
) -> None:
    """Replace a release's archive and re-issue manifest.json, SHA256SUMS and the signature.

    This is what a compromised build would publish: every digest and the signature are
    consistent, so only the later layers (archive safety, smoke test, attestation) can
    catch it.
    """
    manifest_path = release_dir / models.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    if archive is not None:
        asset = next(a for a in manifest["assets"] if target is None or a["target"] == target)
        (release_dir / asset["name"]).write_bytes(archive)
        asset["size"] = len(archive)
        asset["sha256"] = hashlib.sha256(archive).hexdigest()
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    digests = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release_dir.iterdir()
        if p.is_file() and p.name not in (models.SUMS_NAME, models.SUMS_SIGNATURE_NAME)
    }
    sums = format_sha256sums(digests)
    (release_dir / models.SUMS_NAME).write_bytes(sums)
    # Signed as mux-release signs: the trusted comment names the version and the time.
    comment = trusted_comment_for(manifest["version"], int(time.time()))
    (release_dir / models.SUMS_SIGNATURE_NAME).write_bytes(secret_key.sign(sums, comment))


def leftovers(install: Install) -> list[str]:
    """What an interrupted update may leave and the next run must tidy: partial and trash
    folders, downloads, stray dot files in ``MUX_HOME``, anything but the link in the bin dir."""
    found = [
        str(p)
        for p in install.home.rglob("*")
        if ".partial-" in p.name
        or (
            p.name.startswith((".download-", ".trash-", "."))
            and p.name not in (".lock", ".mux-files")
        )
    ]
    found += [p.name for p in install.bin_dir.iterdir() if p.name != "mux"]
    return found


def keep_pristine(install: Install, where: Path) -> Callable[[], None]:
    """Copy the install (``MUX_HOME`` and its bin dir) to ``where``; a function that puts
    that copy back, for tests that interrupt an update again and again."""
    shutil.copytree(install.home, where / "home", symlinks=True)
    shutil.copytree(install.bin_dir, where / "bin", symlinks=True)

    def reset() -> None:
        for name, folder in (("home", install.home), ("bin", install.bin_dir)):
            shutil.rmtree(folder)
            shutil.copytree(where / name, folder, symlinks=True)

    return reset


def check(install: Install, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = install.run("update", "--check", "--json", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result, doc
