"""What this mux was built as: version, protocol, target, repository and trust settings.

A release build carries ``_build_info.json`` next to this module, written by
``mux-release build``. A development checkout has no such file: it reads its version from
``updater.__version__`` (the single source hatchling writes into the package metadata), its
protocol from :mod:`updater.protocol`, its target from the machine it runs on, and says it is a
development build. This module is on the fast path of ``mux version``: stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .protocol import PROTOCOL_VERSION

BUILD_INFO_FILE = Path(__file__).with_name("_build_info.json")

OIDC_ISSUER = "https://token.actions.githubusercontent.com"
SIGNER_WORKFLOW = ".github/workflows/release.yml"
MAX_TRUSTED_KEYS = 2  # the current key and the next one, for rotation
# The machine policy an administrator writes (docs/contracts.md); a build may name another
# path (`mux-release build --policy-file`), and only a development build takes it from
# MUX_POLICY_FILE (updater.settings).
POLICY_FILE = "/etc/mux/policy.toml"


@dataclass(frozen=True)
class TrustSettings:
    """Who may sign and build releases for this mux."""

    minisign_keys: tuple[str, ...] = ()
    oidc_issuer: str = OIDC_ISSUER
    signer_workflow: str = SIGNER_WORKFLOW

    def to_json(self) -> dict[str, Any]:
        return {
            "minisign_keys": list(self.minisign_keys),
            "oidc_issuer": self.oidc_issuer,
            "signer_workflow": self.signer_workflow,
        }


@dataclass(frozen=True)
class BuildInfo:
    version: str
    protocol_version: int
    target: str
    repo: str
    development: bool
    trust: TrustSettings = field(default_factory=TrustSettings)
    policy_file: str = POLICY_FILE

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["trust"] = self.trust.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BuildInfo:
        trust = doc.get("trust") or {}
        keys = tuple(str(k) for k in trust.get("minisign_keys", ()))
        if len(keys) > MAX_TRUSTED_KEYS:
            raise ValueError(f"at most {MAX_TRUSTED_KEYS} trusted minisign keys, got {len(keys)}")
        return cls(
            version=str(doc["version"]),
            protocol_version=int(doc["protocol_version"]),
            target=str(doc.get("target", "")),
            repo=str(doc.get("repo", "")),
            development=bool(doc.get("development", False)),
            trust=TrustSettings(
                minisign_keys=keys,
                oidc_issuer=str(trust.get("oidc_issuer", OIDC_ISSUER)),
                signer_workflow=str(trust.get("signer_workflow", SIGNER_WORKFLOW)),
            ),
            policy_file=str(doc.get("policy_file") or POLICY_FILE),
        )


def _development_build() -> BuildInfo:
    from . import __version__
    from ._targets import detect_target_or_empty

    return BuildInfo(
        version=__version__,
        protocol_version=PROTOCOL_VERSION,
        target=detect_target_or_empty(),
        repo="",
        development=True,
    )


_cached: BuildInfo | None = None


def current() -> BuildInfo:
    """The running mux's build info (baked file first, development fallback)."""
    global _cached
    if _cached is None:
        try:
            raw = BUILD_INFO_FILE.read_bytes()
        except FileNotFoundError:
            _cached = _development_build()
        else:
            _cached = BuildInfo.from_json(json.loads(raw))
    return _cached


def executable() -> str:
    """The resolved path of the build this process runs from (``…/versions/<v>/mux``).

    A PyInstaller build is ``sys.executable``; the stand-in build (a launcher script that
    runs Python) says where its launcher is through ``sys.argv[0]``; a development checkout
    has no build of its own, so it is the Python interpreter. Resolved: never ``<bin>/mux``,
    which ``mux update`` moves to another version under a running process.
    """
    import os
    import shutil
    import sys

    if not getattr(sys, "frozen", False) or hasattr(sys, "_MEIPASS"):
        return os.path.realpath(sys.executable)
    invoked = sys.argv[0] if sys.argv else ""
    found = invoked if os.sep in invoked else shutil.which(invoked or "mux")
    return os.path.realpath(found or sys.executable)


NOTICES_NAME = "THIRD_PARTY_NOTICES.md"


def notices_file() -> Path | None:
    """The third-party notices this mux ships: in a release build, the file at the top of its
    version folder (two levels above ``updater/`` with its build info); in a development
    checkout, the repository's. None when there is none."""
    base = BUILD_INFO_FILE.parent
    candidates = (
        [base.parent.parent / NOTICES_NAME, base.parent / NOTICES_NAME]
        if BUILD_INFO_FILE.is_file()
        else [base.parent / NOTICES_NAME]
    )
    return next((path for path in candidates if path.is_file()), None)


# A packager's marker next to the build's executable (updater.marker, docs/contracts.md).
PACKAGER_MARKER = "mux-packager.json"


def build_folder() -> str | None:
    """The folder of the running release build, where its ``mux`` executable is (the build
    info sits two folders below it: ``_internal/updater/`` in a PyInstaller build,
    ``lib/updater/`` in the stand-in); None for a development checkout."""
    import os

    package = os.path.dirname(os.path.abspath(__file__))
    if not os.path.isfile(os.path.join(package, "_build_info.json")):
        return None
    return os.path.dirname(os.path.dirname(package))
