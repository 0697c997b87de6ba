"""Package built folders into a release and sign it.

:func:`package_release` turns ``mux-<target>/`` build folders into the release layout of
docs/contracts.md: one deterministic ``mux-<target>.tar.gz`` per build, its SBOM
``mux-<target>.cdx.json`` (the build's own ``sbom.cdx.json``, checked against the folder
first), ``manifest.json`` and ``SHA256SUMS``. :func:`sign_release` adds
``SHA256SUMS.minisig``; :func:`rehash_sums` recomputes ``SHA256SUMS`` after a file (the
Sigstore bundle) was added. A static feed's ``releases.json`` and its signature are
:mod:`release.publish.feed`'s.

Determinism: the same build folders give the same archive bytes (:mod:`release.folder.archive`), so
anyone can rebuild and compare.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from release.bill.sbom import check_sbom_matches, sbom_asset_name
from release.folder.archive import source_date_epoch, write_archive
from release.folder.layout import SBOM_NAME, PackageError, read_build_info
from release.publish.formats import format_sha256sums, manifest_document
from release.publish.signing import SecretKey
from updater.errors import MuxError, UsageError
from updater.files import NotReadable, atomic_write, read_small_file, sha256_file
from updater.formats.models import (
    MANIFEST_NAME,
    RELEASE_NOTES_LIMIT,
    SUMS_NAME,
    SUMS_SIGNATURE_NAME,
    Manifest,
    ManifestAsset,
    archive_name,
    parse_manifest,
    tag_for,
)
from updater.timestamps import rfc3339

_NOT_SUMMED = frozenset({SUMS_NAME, SUMS_SIGNATURE_NAME})


def _now_rfc3339() -> str:
    return rfc3339(source_date_epoch() or int(time.time()))


def _write_json(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _summed_files(release_dir: Path) -> dict[str, str]:
    return {
        path.name: sha256_file(path)
        for path in sorted(Path(release_dir).iterdir())
        if path.is_file() and path.name not in _NOT_SUMMED
    }


def rehash_sums(release_dir: Path) -> Path:
    """Rewrite ``SHA256SUMS`` over every file of the release (after adding one).

    A ``SHA256SUMS.minisig`` made for the old sums no longer holds: it is removed, sign again.
    """
    release_dir = Path(release_dir)
    sums = release_dir / SUMS_NAME
    _atomic_write(sums, format_sha256sums(_summed_files(release_dir)))
    (release_dir / SUMS_SIGNATURE_NAME).unlink(missing_ok=True)
    return sums


def _atomic_write(path: Path, data: bytes) -> None:
    atomic_write(path, data, mode=0o644)  # release files are for everyone to read


def read_release_notes(path: Path) -> str:
    """The release notes in ``path`` (Markdown) for the manifest: UTF-8 text of at most
    :data:`RELEASE_NOTES_LIMIT` bytes, line ends made ``\\n``, and no other control
    character than a tab (an escape sequence in them is refused here; mux escapes what it
    shows anyway). Anything else is one line (UsageError)."""
    try:
        raw = read_small_file(str(path), RELEASE_NOTES_LIMIT)
    except NotReadable as exc:
        raise UsageError(f"--notes {path}: {exc} (release notes are at most 64 KiB)") from None
    if raw is None:
        raise UsageError(f"--notes {path}: no such file")
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise UsageError(f"--notes {path}: not UTF-8 text") from None
    for number, line in enumerate(text.split("\n"), start=1):
        control = next((c for c in line if _is_control(c)), None)
        if control is not None:
            raise UsageError(
                f"--notes {path}: line {number} holds the control character "
                f"U+{ord(control):04X}; release notes are plain Markdown"
            )
    return text.strip("\n")


def _is_control(char: str) -> bool:
    """C0 (but a tab), DEL and C1: what starts an escape sequence or moves the cursor."""
    code = ord(char)
    return (code < 0x20 and char != "\t") or 0x7F <= code <= 0x9F


def package_release(
    build_dirs: Sequence[Path],
    out_dir: Path,
    *,
    released_at: str | None = None,
    extra_files: Sequence[Path] = (),
    release_notes: str = "",
) -> Manifest:
    """Write a release (archives, ``manifest.json``, ``SHA256SUMS``) into an empty ``out_dir``.

    Every build must agree on version and protocol version; each target appears once.
    ``extra_files`` are copied in and covered by ``SHA256SUMS``; ``release_notes``
    (:func:`read_release_notes`) go into the manifest. On failure ``out_dir`` is left as it
    was (removed when this call created it).
    """
    if not build_dirs:
        raise UsageError("no build folders to package")
    infos = [(Path(d), read_build_info(Path(d))) for d in build_dirs]
    for build_dir, _ in infos:
        if not (build_dir / "mux").is_file():
            raise PackageError(f"{build_dir} has no mux executable at its top")
    sboms = {build_dir: _checked_sbom(build_dir) for build_dir, _ in infos}
    first = infos[0][1]
    for build_dir, info in infos[1:]:
        if (info.version, info.protocol_version) != (first.version, first.protocol_version):
            raise PackageError(
                f"{build_dir} is mux {info.version} protocol {info.protocol_version}, "
                f"but {infos[0][0]} is mux {first.version} protocol {first.protocol_version}"
            )
    targets = [info.target for _, info in infos]
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise PackageError(f"more than one build for {', '.join(duplicates)}")
    extras = [Path(f) for f in extra_files]
    reserved = {archive_name(t) for t in targets} | {sbom_asset_name(t) for t in targets}
    reserved |= {MANIFEST_NAME, *_NOT_SUMMED}
    for extra in extras:
        if not extra.is_file():
            raise UsageError(f"{extra} is not a file")
        if extra.name in reserved:
            raise UsageError(f"{extra.name} would overwrite a file the release writes itself")

    out_dir = Path(out_dir)
    created = not out_dir.exists()
    if not created and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"{out_dir} is not an empty folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        assets = []
        for build_dir, info in sorted(infos, key=lambda item: item[1].target):
            archive = out_dir / archive_name(info.target)
            write_archive(build_dir, info.target, archive)
            (out_dir / sbom_asset_name(info.target)).write_bytes(sboms[build_dir])
            assets.append(
                ManifestAsset(
                    name=archive.name,
                    target=info.target,
                    size=archive.stat().st_size,
                    sha256=sha256_file(archive),
                )
            )
        for extra in extras:
            shutil.copyfile(extra, out_dir / extra.name)
        manifest = Manifest(
            name="mux",
            version=first.version,
            protocol_version=first.protocol_version,
            released_at=released_at or _now_rfc3339(),
            assets=tuple(assets),
            release_notes=release_notes,
        )
        _write_json(out_dir / MANIFEST_NAME, manifest_document(manifest))
        rehash_sums(out_dir)
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            for leftover in out_dir.iterdir():
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        raise
    return manifest


def _checked_sbom(build_dir: Path) -> bytes:
    """The build's SBOM, which must list exactly the files the archive will hold."""
    try:
        raw = (build_dir / SBOM_NAME).read_bytes()
    except FileNotFoundError:
        raise PackageError(
            f"{build_dir} has no {SBOM_NAME}", hint="build it with mux-release build"
        ) from None
    try:
        check_sbom_matches(raw, build_dir, what=f"{build_dir / SBOM_NAME}")
    except MuxError as exc:
        raise PackageError(
            exc.message, hint="the folder changed after it was built: rebuild it"
        ) from None
    return raw


def trusted_comment_for(version: str, timestamp: int) -> str:
    """The signed comment of ``SHA256SUMS.minisig``: minisign's default fields plus the version."""
    return f"timestamp:{timestamp}\tfile:{SUMS_NAME}\thashed\tversion:{version}"


def sign_release(release_dir: Path, secret_key: SecretKey) -> Path:
    """Sign a release's ``SHA256SUMS`` into ``SHA256SUMS.minisig`` (returned)."""
    release_dir = Path(release_dir)
    try:
        manifest = parse_manifest((release_dir / MANIFEST_NAME).read_bytes())
        sums = (release_dir / SUMS_NAME).read_bytes()
    except FileNotFoundError as exc:
        raise UsageError(f"{release_dir} is not a packaged release (no {exc.filename})") from None
    timestamp = source_date_epoch() or int(time.time())
    signature = secret_key.sign(sums, trusted_comment_for(manifest.version, timestamp))
    path = release_dir / SUMS_SIGNATURE_NAME
    _atomic_write(path, signature)
    return path


def release_dir_for(feed_dir: Path, version: str) -> Path:
    return Path(feed_dir) / tag_for(version)
