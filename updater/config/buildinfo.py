"""What this mux was built as: version, protocol, target, repository and trust settings.

A release build carries ``_build_info.json`` next to this module, written by
``mux-release build``. A development checkout has no such file: it reads its version from
``updater.__version__`` (the single source hatchling writes into the package metadata), its
protocol from :mod:`updater.protocol`, its target from the machine it runs on, and says it is a
development build. This module is on the fast path of ``mux version``: stdlib only.
"""

from __future__ import annotations

import json
import os

from updater.config.buildfolder import PACKAGE_FOLDER, running_build_folder, running_build_info

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, Self

OIDC_ISSUER = "https://token.actions.githubusercontent.com"
SIGNER_WORKFLOW = ".github/workflows/release.yml"
MAX_TRUSTED_KEYS = 2  # the current key and the next one, for rotation
# The machine policy an administrator writes (docs/contracts.md); a build may name another
# path (`mux-release build --policy-file`), and only a development build takes it from
# MUX_POLICY_FILE (updater.config.settings).
POLICY_FILE = "/etc/mux/policy.toml"


class _Record:
    """An immutable record with equality, as a frozen dataclass would be.

    Not a dataclass on purpose: ``dataclasses`` imports ``inspect`` (and with it ``ast``,
    ``dis``, ``tokenize``), which alone was a quarter of ``mux version``'s start-up; likewise
    no ``pathlib`` or ``typing`` at run time here (docs/build.md).
    """

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Record) or type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (as ``dataclasses.replace`` would make)."""
        values = {name: getattr(self, name) for name in self.__slots__}
        unknown = set(changes) - set(values)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{**values, **changes})


class TrustSettings(_Record):
    """Who may sign and build releases for this mux, and the TUF repository that says which
    releases exist: its metadata URL (the project's GitHub Pages) and the root this build
    trusts first (canonical JSON text; empty in a build that reads no TUF repository)."""

    __slots__ = ("minisign_keys", "oidc_issuer", "signer_workflow", "tuf_metadata_url", "tuf_root")
    minisign_keys: tuple[str, ...]
    oidc_issuer: str
    signer_workflow: str
    tuf_metadata_url: str
    tuf_root: str

    def __init__(
        self,
        minisign_keys: tuple[str, ...] = (),
        oidc_issuer: str = OIDC_ISSUER,
        signer_workflow: str = SIGNER_WORKFLOW,
        tuf_metadata_url: str = "",
        tuf_root: str = "",
    ) -> None:
        object.__setattr__(self, "minisign_keys", minisign_keys)
        object.__setattr__(self, "oidc_issuer", oidc_issuer)
        object.__setattr__(self, "signer_workflow", signer_workflow)
        object.__setattr__(self, "tuf_metadata_url", tuf_metadata_url)
        object.__setattr__(self, "tuf_root", tuf_root)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "minisign_keys": list(self.minisign_keys),
            "oidc_issuer": self.oidc_issuer,
            "signer_workflow": self.signer_workflow,
        }
        if self.tuf_root:
            doc["tuf"] = {"metadata_url": self.tuf_metadata_url, "root": json.loads(self.tuf_root)}
        return doc


def canonical_root(document: object) -> str:
    """A root document as the build info keeps it: compact JSON with sorted keys (TUF checks
    signatures over the canonical form of its ``signed`` part, so any faithful encoding
    verifies)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class BuildInfo(_Record):
    __slots__ = (
        "development",
        "policy_file",
        "protocol_version",
        "repo",
        "target",
        "trust",
        "version",
    )
    version: str
    protocol_version: int
    target: str
    repo: str
    development: bool
    trust: TrustSettings
    policy_file: str

    def __init__(
        self,
        version: str,
        protocol_version: int,
        target: str,
        repo: str,
        development: bool,
        trust: TrustSettings | None = None,
        policy_file: str = POLICY_FILE,
    ) -> None:
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "protocol_version", protocol_version)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "repo", repo)
        object.__setattr__(self, "development", development)
        object.__setattr__(self, "trust", trust if trust is not None else TrustSettings())
        object.__setattr__(self, "policy_file", policy_file)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "protocol_version": self.protocol_version,
            "target": self.target,
            "repo": self.repo,
            "development": self.development,
            "trust": self.trust.to_json(),
            "policy_file": self.policy_file,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BuildInfo:
        trust = doc.get("trust") or {}
        keys = tuple(str(k) for k in trust.get("minisign_keys", ()))
        tuf = trust.get("tuf") or {}
        if not isinstance(tuf, dict):
            raise ValueError("trust.tuf must be an object")
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
                tuf_metadata_url=str(tuf.get("metadata_url") or ""),
                tuf_root=canonical_root(tuf["root"]) if tuf.get("root") else "",
            ),
            policy_file=str(doc.get("policy_file") or POLICY_FILE),
        )


_cached: BuildInfo | None = None


def current() -> BuildInfo:
    """The running mux's build info (baked file first, development fallback)."""
    global _cached
    if _cached is None:
        try:
            with open(running_build_info(), "rb") as stream:
                raw = stream.read()
        except FileNotFoundError:
            # deferred (+5.4 ms, 6 modules, on `mux version`): a release build never reads
            # its version from the checkout
            from updater.config.devbuild import development_facts

            version, protocol, target = development_facts()
            _cached = BuildInfo(
                version=version,
                protocol_version=protocol,
                target=target,
                repo="",
                development=True,
            )
        else:
            _cached = BuildInfo.from_json(json.loads(raw))
    return _cached


def current_mux_command() -> list[str]:
    """The command that runs *the current* mux, by its own versioned path.

    - A standalone build (``sys.frozen``): the resolved path of the build this process runs
      from (:func:`updater.config.buildinfo.executable`: ``…/versions/<version>/mux``), never the
      ``<bin>/mux`` link, which ``mux update`` moves to another version under a running
      process. A server started by this process, and anything a server spawns, thus runs
      the very build it was started from, for its whole life. The restart command mux prints
      runs the *new* mux through the link, which starts its own build in the old one's place.
    - A development checkout or a Python install: ``sys.executable -P -c`` with code that
      imports *this* ``updater`` package (its folder first on ``sys.path``) and runs its
      ``main``: this same code whatever the working directory. Not ``-m updater``: that puts
      the working directory first on ``sys.path``, where a folder named ``updater`` (a cloned
      repository, another checkout) would run instead, e.g. as layer 3's verifier; and not
      ``-P -m updater``, which finds nothing where the package is not installed (the
      release workflow runs ``python -m release`` from a checkout it does not install).

    A server (:func:`updater.servers.control.start`) and the attestation worker
    (:mod:`updater.trust.attestation_worker`) run this.
    """
    # deferred: this module is on a fast path (docs/build.md)
    import sys

    if not getattr(sys, "frozen", False):
        # deferred: this module is on a fast path (docs/build.md)
        import os

        here = os.path.dirname(PACKAGE_FOLDER)  # the folder that holds this updater package
        code = (
            f"import sys; sys.path.insert(0, {here!r}); from updater.__main__ import main; main()"
        )
        return [sys.executable, "-P", "-c", code]
    return [executable()]


def executable() -> str:
    """The resolved path of the build this process runs from (``…/versions/<v>/mux``).

    A PyInstaller build is ``sys.executable``; the stand-in build (a launcher script that
    runs Python) says where its launcher is through ``sys.argv[0]``; a development checkout
    has no build of its own, so it is the Python interpreter. Resolved: never ``<bin>/mux``,
    which ``mux update`` moves to another version under a running process.
    """
    # deferred: this module is on a fast path (docs/build.md)
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
    from pathlib import Path  # not at the top: mux version's fast path has no pathlib

    build_info = Path(running_build_info())
    base = build_info.parent
    candidates = (
        [base.parent.parent / NOTICES_NAME, base.parent / NOTICES_NAME]
        if build_info.is_file()
        else [base.parent / NOTICES_NAME]
    )
    return next((path for path in candidates if path.is_file()), None)


# A packager's marker next to the build's executable (updater.config.marker, docs/contracts.md).
PACKAGER_MARKER = "mux-packager.json"


def packager_marker_file() -> str | None:
    """The path of the packager marker next to the running build's executable when anything
    is there, else None: one ``lstat``, so that a fast path imports the marker's reader
    (:mod:`updater.config.marker`) only for a packaged build."""
    folder = running_build_folder()
    if folder is None:
        return None
    path = os.path.join(folder, PACKAGER_MARKER)
    return path if os.path.lexists(path) else None
