"""What every build does besides making its executable: the build info, the pinned
artifacts, the bill.

Two builders write the same layout (:mod:`release.folder.layout`), ``<out_dir>/mux-<target>/`` with
the ``mux`` executable at its top and ``updater/_build_info.json`` somewhere below (see
docs/contracts.md): :func:`release.build.standalone.build_standalone`, the real thing, and
:func:`release.build.standin.build_standin`, a fast stand-in for tests and the release rehearsal.
Both take these steps, in this order:

1. :func:`make_build_info` validates the declared settings (version, protocol, target, repo,
   trusted keys, policy file) before anything is built; :func:`write_build_info` is the one
   writer of ``_build_info.json``.
2. :func:`check_pinned_artifacts`: the pinned artifacts of ``release/pins.toml``
   (``pins_path``) that the build's target ships (an entry's single asset, or its asset for
   this target; an entry that does not declare the target ships nothing there). The build
   never downloads: the release engineer or the release workflow puts each of them, under its
   asset name, into one folder and passes it as ``artifacts_dir`` (``mux-release build
   --artifacts DIR``), e.g. with ``mux-release fetch-artifacts --target T --out DIR``
   (:mod:`release.pins.fetch`). Every file is checked against its pin (size, then a
   streamed sha256) before anything is written, and :func:`vendor_pinned_artifacts` hashes it
   again while it copies it in as ``vendor/<name>/<asset>``, so a file that changes in between
   still fails closed. A missing file is a :class:`BuildError`, a size or digest mismatch a
   :class:`~updater.errors.VerificationError` (exit 3); either way no build folder is left
   behind. With no pins this is a no-op.
3. :func:`write_bill` records what the folder ships (:mod:`release.bill.bill`): the third-party
   notices (``THIRD_PARTY_NOTICES.md``) and the CycloneDX SBOM, both derived from the same
   mapping of every file of the folder to its origin.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypedDict

import updater
from release.bill.bill import write_build_bill
from release.folder.layout import VENDOR_DIR_NAME, build_folder_name
from release.pins.pinfile import Pin, PinnedAsset, check_file_against_pin, load_pins, shipped_pins
from updater.config.buildfolder import BUILD_INFO_NAME
from updater.config.buildinfo import (
    MAX_TRUSTED_KEYS,
    POLICY_FILE,
    BuildInfo,
    TrustSettings,
    canonical_root,
)
from updater.config.targets import TARGETS, detect_target
from updater.errors import MuxError, UsageError
from updater.files import sha256_file
from updater.formats.minisign import PublicKey
from updater.formats.models import parse_version
from updater.urls import check_url_scheme

# The updater package every build ships (a copy, or frozen into the executable).
PACKAGE_DIR = Path(updater.__file__).resolve().parent
_CHUNK = 1 << 20


class BuildOptions(TypedDict, total=False):
    """What either builder may be told beyond the version, protocol, repository and keys it
    declares: its ``target`` (default: this machine's), where it reads the machine policy and
    which TUF repository it trusts first (:func:`make_build_info`'s defaults), and the pinned
    artifacts it ships (:func:`check_pinned_artifacts`; default: none)."""

    target: str | None
    pins_path: Path | None
    artifacts_dir: Path | None
    policy_file: str
    tuf_root: bytes | None
    tuf_metadata_url: str


def unknown_options(options: Mapping[str, object]) -> None:
    """A builder's ``**options`` hold only :class:`BuildOptions`: a misspelt one is an error,
    as an unknown keyword argument is, never silently ignored."""
    unknown = sorted(set(options) - BuildOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"unexpected build options: {', '.join(unknown)}")


class BuildError(MuxError):
    """A build could not be made (missing tool, failed compiler run, bad output folder)."""


def make_build_info(
    *,
    version: str,
    protocol_version: int,
    target: str,
    repo: str,
    minisign_keys: Sequence[str],
    policy_file: str = POLICY_FILE,
    tuf_root: bytes | None = None,
    tuf_metadata_url: str = "",
) -> BuildInfo:
    """Validate the declared build settings and turn them into a :class:`BuildInfo`.

    ``policy_file`` is where the build reads the machine policy (an absolute path: a
    distribution whose /etc is elsewhere names its own). ``tuf_root`` is the root.json of
    the project's TUF repository the build trusts first, and ``tuf_metadata_url`` where that
    repository's metadata is published (without it, the build reads no TUF repository)."""
    parse_version(version)
    if target not in TARGETS:
        raise UsageError(f"{target!r} is not a published target", hint=", ".join(TARGETS))
    if isinstance(protocol_version, bool) or protocol_version < 0:
        raise UsageError("the protocol version must be a non-negative integer")
    if len(minisign_keys) > MAX_TRUSTED_KEYS:
        raise UsageError(
            f"at most {MAX_TRUSTED_KEYS} trusted minisign keys (the current and the next one)"
        )
    keys = tuple(PublicKey.parse(key).to_base64() for key in minisign_keys)
    if not Path(policy_file).is_absolute():
        raise UsageError(f"--policy-file {policy_file!r} must be an absolute path")
    root_text = check_tuf_root(tuf_root, tuf_metadata_url) if tuf_root is not None else ""
    return BuildInfo(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        development=False,
        trust=TrustSettings(
            minisign_keys=keys,
            tuf_metadata_url=tuf_metadata_url.rstrip("/") if root_text else "",
            tuf_root=root_text,
        ),
        policy_file=policy_file,
    )


def check_tuf_root(root: bytes, metadata_url: str) -> str:
    """The root a build bakes, as its build info keeps it: it must be TUF root metadata
    signed to its own threshold, and come with an https:// (loopback http://) metadata URL."""
    from tuf.api.metadata import Metadata, Root  # (release tooling: python-tuf, with sigstore)

    if not metadata_url:
        raise UsageError("a TUF root needs the URL of its metadata (--tuf-metadata-url)")
    try:
        check_url_scheme(metadata_url)
    except MuxError as exc:
        raise UsageError(f"--tuf-metadata-url: {exc.message}") from None
    try:
        md = Metadata.from_bytes(root)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"the TUF root is not TUF metadata: {exc}") from None
    if not isinstance(md.signed, Root):
        raise UsageError(f"the TUF root is {md.signed.type} metadata, not root")
    result = md.signed.get_root_verification_result(None, md.signed_bytes, md.signatures)
    if not result.verified:
        raise UsageError("the TUF root is not signed to its own threshold")
    return canonical_root(json.loads(root))


def write_build_info(package_dir: Path, info: BuildInfo) -> Path:
    """Write ``_build_info.json`` into an ``updater`` package folder (the one writer of it)."""
    path = Path(package_dir) / BUILD_INFO_NAME
    path.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def resolve_target(target: str | None) -> str:
    if target:
        return target
    return detect_target()


def fresh_output_folder(out_dir: Path, target: str) -> Path:
    folder = Path(out_dir) / build_folder_name(target)
    if folder.exists() or folder.is_symlink():
        raise BuildError(f"{folder} already exists", hint="remove it or build into another --out")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return folder


# --- pinned artifacts ----------------------------------------------------------------------


@dataclass(frozen=True)
class PinnedFile:
    """A pinned artifact's file in the artifacts folder, checked against its pin."""

    pin: Pin
    item: PinnedAsset
    source: Path

    @property
    def destination(self) -> PurePosixPath:
        """Its place inside the build folder (and so inside ``mux-<target>/``)."""
        return PurePosixPath(VENDOR_DIR_NAME, self.pin.name, self.item.asset)


def check_pinned_artifacts(
    pins_path: Path | None, artifacts_dir: Path | None, target: str | None = None
) -> list[PinnedFile]:
    """Find and check, in ``artifacts_dir``, every pinned file a ``target`` build ships (offline).

    No ``pins_path``, or a pins.toml without entries for the target, needs no artifacts. An
    entry that was never pinned cannot be shipped, so it fails the build, as it fails
    ``pins --check``. ``target`` defaults to this machine's.
    """
    if pins_path is None:
        return []
    pins = load_pins(Path(pins_path))
    wanted = shipped_pins(pins, resolve_target(target)) if pins else []
    if not wanted:
        return []
    if artifacts_dir is None:
        raise UsageError(
            f"{pins_path} pins {', '.join(pin.name for pin, _ in wanted)}; give the folder "
            f"holding {', '.join(item.asset for _, item in wanted)} with --artifacts"
        )
    folder = Path(artifacts_dir)
    if not folder.is_dir():
        raise UsageError(f"the artifacts folder {folder} does not exist")
    found = []
    for pin, item in wanted:
        source = folder / item.asset
        if not source.is_file():
            raise BuildError(
                f"{item.label(pin.name)} {pin.tag}: {source} is missing (the pin wants sha256 "
                f"{item.sha256})",
                hint=f"download {item.url} into {folder}",
            )
        # The size first: a wrong file usually fails here without reading it.
        size = source.stat().st_size
        check_file_against_pin(pin, item, size=size, sha256=None, where=source)
        check_file_against_pin(pin, item, size=size, sha256=sha256_file(source), where=source)
        found.append(PinnedFile(pin=pin, item=item, source=source))
    return found


def write_bill(folder: Path, pins_path: Path | None) -> None:
    """The build's last step: its notices and SBOM, from what the folder now holds."""
    write_build_bill(folder, pins_path=pins_path)


def vendor_pinned_artifacts(files: Sequence[PinnedFile], build_folder: Path) -> None:
    """Copy checked artifacts into ``build_folder``, hashing what is written.

    The hash of the copy is what ships, so it is checked again: a file replaced after
    :func:`check_pinned_artifacts` fails here rather than slipping into the release. The caller
    removes the build folder on failure.
    """
    for entry in files:
        destination = Path(build_folder, *entry.destination.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        with open(entry.source, "rb") as source, open(destination, "xb") as copy:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                copy.write(chunk)
        # Fixed mode: the archive's modes must not depend on how the file was downloaded.
        destination.chmod(0o644)
        check_file_against_pin(
            entry.pin, entry.item, size=size, sha256=digest.hexdigest(), where=entry.source
        )
