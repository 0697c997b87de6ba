"""The published ``install.sh``: the repository's script with the release settings filled in.

``install.sh`` on the main branch carries placeholders (``MUX_DEFAULT_REPO`` and an empty
``MUX_MINISIGN_KEYS``); the release workflow publishes a copy with the repository and the
trusted minisign public keys written in, so that the one-liner from a release checks the
signature with keys that are part of the script the user chose to run. The schema of the
install record it writes is always written in from mux's own definition
(:data:`updater.core.retention.RECORD_SCHEMA`), so the two cannot drift.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from release.checkout import REPO_ROOT
from updater.config.buildinfo import MAX_TRUSTED_KEYS
from updater.core.retention import RECORD_SCHEMA
from updater.errors import ParseError, UsageError
from updater.formats.minisign import PublicKey

INSTALL_SH = REPO_ROOT / "install.sh"
_KEYS_LINE = re.compile(r"^MUX_MINISIGN_KEYS='[^'\n]*'$", re.MULTILINE)
_REPO_LINE = re.compile(r"^MUX_DEFAULT_REPO='[^'\n]*'$", re.MULTILINE)
_POLICY_LINE = re.compile(r"^MUX_POLICY_FILE_PATH='[^'\n]*'$", re.MULTILINE)
_RECORD_SCHEMA_LINE = re.compile(r"^MUX_RECORD_SCHEMA='[^'\n]*'$", re.MULTILINE)
_POLICY_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")


def render_install_script(
    *,
    keys: Sequence[str],
    repo: str | None,
    source: Path = INSTALL_SH,
    policy_file: str | None = None,
) -> str:
    """``install.sh`` trusting ``keys`` (base64 public key lines) and defaulting to ``repo``;
    ``policy_file`` is where it reads the machine policy (default: as the script says)."""
    if not keys or len(keys) > MAX_TRUSTED_KEYS:
        raise UsageError(f"give one or two trusted minisign public keys, not {len(keys)}")
    try:
        normalised = [PublicKey.parse(key).to_base64() for key in keys]
    except ParseError as exc:
        raise UsageError(f"--public-key: {exc.message}") from None
    text = source.read_text(encoding="utf-8")
    text, count = _RECORD_SCHEMA_LINE.subn(f"MUX_RECORD_SCHEMA='{RECORD_SCHEMA}'", text)
    if count != 1:
        raise UsageError(f"{source} has no single MUX_RECORD_SCHEMA='…' line")
    text, count = _KEYS_LINE.subn(f"MUX_MINISIGN_KEYS='{' '.join(normalised)}'", text)
    if count != 1:
        raise UsageError(f"{source} has no single MUX_MINISIGN_KEYS='…' line")
    if repo is not None:
        if not _REPO.fullmatch(repo):
            raise UsageError(f"--repo {repo!r} is not owner/name")
        text, count = _REPO_LINE.subn(f"MUX_DEFAULT_REPO='{repo}'", text)
        if count != 1:
            raise UsageError(f"{source} has no single MUX_DEFAULT_REPO='…' line")
    if policy_file is not None:
        if not _POLICY_PATH.fullmatch(policy_file) or "/../" in f"{policy_file}/":
            raise UsageError(f"--policy-file {policy_file!r} is not a plain absolute path")
        text, count = _POLICY_LINE.subn(f"MUX_POLICY_FILE_PATH='{policy_file}'", text)
        if count != 1:
            raise UsageError(f"{source} has no single MUX_POLICY_FILE_PATH='…' line")
    return text


def write_install_script(
    dest: Path, *, keys: Sequence[str], repo: str | None, policy_file: str | None = None
) -> Path:
    text = render_install_script(keys=keys, repo=repo, policy_file=policy_file)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text, encoding="utf-8")
    dest.chmod(0o755)
    return dest
