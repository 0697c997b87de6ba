"""``mux-release repin NAME --tag T | --latest``: move a pin to a verified release asset.

The steps (docs/design.md, "Pins"), each failing closed:

1. read ``pins.toml``; the entry must exist and be well formed;
2. resolve the release through the updater's own source (:mod:`updater.sources`): ``--tag``,
   or the newest release (GitHub's ``/releases/latest`` redirect, or a mirror's
   ``releases.json``); a tag must keep the entry's tag prefix;
3. refuse a downgrade unless ``allow_downgrade`` (the updater's decision,
   :meth:`updater.plan.ReleaseRequest.decide`);
4. read the release (GitHub API): not a draft, the asset is listed, its size is within the
   cap, its ``digest``; whether it publishes ``SHA256SUMS``;
5. download the asset while hashing it, with a size cap (the bytes are not kept: the pin is the
   digest, and ``mux-release build`` checks the file it is given in --artifacts DIR against the pin);
6. every available digest must agree: the computed one, the API ``digest`` and the release's
   ``SHA256SUMS`` line (mandatory on a mirror, which has no API);
7. the artifact's build-provenance attestation must verify for the entry's identity, at
   ``refs/tags/<tag>`` (the updater's own verifier, :mod:`updater.attestation`);
8. rewrite the entry's ``tag``, ``url``, ``sha256`` and ``size`` with tomlkit (comments and
   order kept, nothing else touched), regenerate the notices, and write both files together:
   both are staged as temp files next to their targets, then renamed; if anything fails,
   neither changes.

``dry_run`` stops before step 8's writes and reports the diffs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from updater.errors import MuxError, NetworkError, ParseError, UsageError, VerificationError
from updater.files import write_temp_beside
from updater.models import SUMS_NAME, parse_sha256sums
from updater.plan import Decision, ReleaseRequest
from updater.sources import (
    BUNDLE_LIMIT,
    GITHUB_WEB,
    GitHubSource,
    ReleaseSource,
    github_download_url,
    open_source,
)

from .notices import Distribution, generate_notices
from .pins import (
    ARTIFACTS_KEY,
    DEFAULT_NOTICES_PATH,
    DEFAULT_PINS_PATH,
    Pin,
    PinsError,
    load_document,
    parse_tag_version,
    read_pins,
)
from .textdiff import capped_unified_diff

if TYPE_CHECKING:
    from updater.attestation import AttestationReport
    from updater.settings import Settings

MAX_DIFF_LINES = 120
# What the updater's decision refuses without --allow-downgrade.
_REFUSED = (Decision.DOWNGRADE_REFUSED, Decision.NEWER_INSTALLED)


class RepinRefused(MuxError):
    """The repin would be a downgrade or another change the policy does not allow."""


@dataclass(frozen=True)
class RepinResult:
    """What a repin found and did; ``changed`` is False when the pin already was this."""

    name: str
    old_tag: str | None
    old_sha256: str | None
    tag: str
    url: str
    sha256: str
    size: int
    digests: tuple[str, ...]  # which sources agreed on the sha256
    attestation: AttestationReport
    pins_diff: str
    notices_diff: str
    changed: bool
    written: bool

    def describe(self) -> list[str]:
        """Human-readable lines for the CLI, ending with a ready commit message."""
        attested = f"{self.attestation.signer_workflow}@{self.attestation.signer_ref}"
        lines = [
            f"{self.name}: {self.tag} sha256 {self.sha256} ({self.size} bytes)",
            "  digests agree: " + ", ".join(self.digests),
            f"  attested by {self.attestation.repository} {attested}",
        ]
        if not self.changed:
            lines.append(f"{self.name} is already pinned to {self.tag}; nothing to change")
            return lines
        if not self.written:
            lines += ["dry run: nothing written; this would change:", self.pins_diff.rstrip("\n")]
            if self.notices_diff:
                lines.append(self.notices_diff.rstrip("\n"))
            return lines
        old = f"{self.old_tag} " if self.old_tag else ""
        lines.append(
            f"commit: repin {self.name}: {old}-> {self.tag}, sha256 {self.sha256[:12]}, "
            f"attested by {self.attestation.repository}"
        )
        return lines


# --- pure helpers -----------------------------------------------------------------------


def _diff(before: str, after: str, name: str) -> str:
    return capped_unified_diff(
        before,
        after,
        fromfile=f"{name} (before)",
        tofile=f"{name} (after)",
        max_lines=MAX_DIFF_LINES,
    )


def check_not_downgrade(pin: Pin, new_tag: str, request: ReleaseRequest) -> None:
    """Refuse a tag of another tag family (prefix) than the pinned one, or, unless the
    request allows it, an older one (the updater's own decision, :mod:`updater.plan`)."""
    new_prefix, new_version = parse_tag_version(new_tag)
    if pin.tag is None:
        return
    old_prefix, old_version = parse_tag_version(pin.tag)
    if new_prefix != old_prefix:
        raise RepinRefused(
            f"{pin.name}: tag {new_tag} does not start like the pinned {pin.tag} "
            f"({old_prefix or 'no prefix'})"
        )
    if request.decide(old_version, new_version) in _REFUSED:
        raise RepinRefused(
            f"{pin.name}: {new_tag} is older than the pinned {pin.tag}; refusing a downgrade",
            hint="pass --allow-downgrade if that is what you want",
        )


def agree_on_digest(computed: str, others: Sequence[tuple[str, str | None]]) -> list[str]:
    """Every available digest must equal the computed one; returns the sources that agreed."""
    agreed = ["computed"]
    for source, digest in others:
        if digest is None:
            continue
        if digest != computed:
            raise VerificationError(
                f"digest mismatch: {source} says sha256 {digest}, the download hashes to {computed}"
            )
        agreed.append(source)
    return agreed


def rewrite_pin(document_text: str, name: str, fields: dict[str, Any]) -> str:
    """``document_text`` with only ``fields`` of ``[artifacts.<name>]`` replaced (tomlkit)."""
    import tomlkit

    document = tomlkit.parse(document_text)
    entry = document[ARTIFACTS_KEY][name]
    for key, value in fields.items():
        entry[key] = value
    return tomlkit.dumps(document)


# --- network (I/O) ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Release:
    """What the release's host lists about the pinned asset, before it is downloaded."""

    api_digest: str | None
    api_size: int | None
    publishes_sums: bool


def _open_source(
    pin: Pin, mirror: str | None, github_url: str | None, api_url: str | None, settings: Settings
) -> ReleaseSource:
    if mirror:
        return open_source(settings, spec=mirror)
    github = settings.github
    return GitHubSource(
        pin.repository,
        web_url=github_url or github.web_url,
        api_url=api_url or github.api_url,
        token=github.token,
        http=settings.http,
    )


def _pin_web(mirror: str | None, github_url: str | None, settings: Settings) -> str:
    """The GitHub a pin's URL names: the pin names the artifact there (its sha256 fixes the
    bytes), never the mirror that happened to serve it."""
    if mirror:
        return GITHUB_WEB
    return github_url or settings.github.web_url or GITHUB_WEB


def _release_info(source: ReleaseSource, tag: str, pin: Pin) -> _Release:
    listing = source.listing(tag)
    if listing is None:
        # A mirror has no API: no asset list and no digest field, so SHA256SUMS is mandatory.
        return _Release(None, None, True)
    if listing.draft:
        raise RepinRefused(f"{pin.name}: release {tag} is a draft; pin a published release")
    asset = listing.assets.get(pin.asset)
    if asset is None:
        raise NetworkError(f"release {tag} of {pin.repository} has no asset {pin.asset}")
    if asset.size is not None and asset.size > pin.max_bytes:
        raise RepinRefused(
            f"{pin.name}: {pin.asset} is {asset.size} bytes, more than max_bytes ({pin.max_bytes})"
        )
    return _Release(asset.sha256, asset.size, SUMS_NAME in listing.assets)


def _download_and_hash(
    source: ReleaseSource, tag: str, pin: Pin, size: int | None, *, quiet: bool, bar: bool
) -> tuple[str, int]:
    """Fetch the asset and hash it; the bytes are not kept (the pin is their digest).

    The updater's own download: never past ``max_bytes``; with a known size (GitHub's API
    lists it) resumed with Range and retried.
    """
    from updater.render import make_progress

    label = f"{pin.asset} {tag}"
    with tempfile.TemporaryDirectory(prefix="mux-repin-") as scratch:
        fetched = source.download(
            tag,
            pin.asset,
            Path(scratch),
            size=size,
            max_size=pin.max_bytes,
            progress=make_progress(label, quiet=quiet, bar=bar),
        )
        return fetched.sha256, fetched.size


def _sums_digest(source: ReleaseSource, tag: str, pin: Pin) -> str:
    raw = source.fetch(tag, SUMS_NAME)
    try:
        sums = parse_sha256sums(raw)
    except ParseError as exc:
        raise VerificationError(f"release {tag}: {exc.message}") from None
    if pin.asset not in sums:
        raise VerificationError(f"release {tag}: {SUMS_NAME} does not list {pin.asset}")
    return sums[pin.asset]


def _attestation_bundles(source: ReleaseSource, tag: str, pin: Pin, sha256: str) -> bytes:
    if pin.attestation_asset:
        return source.fetch(tag, pin.attestation_asset, max_size=BUNDLE_LIMIT)
    if not source.attestation_lookup:
        raise VerificationError(
            f"{pin.name}: a mirror has no attestations API",
            hint="set attestation_asset in pins.toml to the release's bundle file",
        )
    try:
        bundles = source.attestation_bundles(sha256)
    except NetworkError as exc:
        if exc.status != 404:
            raise
        bundles = []
    if not bundles:
        raise VerificationError(
            f"{pin.name}: {pin.asset} of {tag} is not attested (no attestation for sha256 {sha256})"
        )
    return b"\n".join(bundles)


# --- writing (I/O) ----------------------------------------------------------------------


def write_together(changes: Sequence[tuple[Path, str]]) -> None:
    """Replace every file with its new text, or none of them.

    Each new text is staged in a temp file next to its target (same filesystem, so the rename
    is atomic), then all are renamed. If a rename fails, the files already replaced get their
    old bytes back; temp files never stay behind.
    """
    originals: list[tuple[Path, bytes | None, int]] = []
    for path, _ in changes:
        try:
            originals.append((path, path.read_bytes(), path.stat().st_mode & 0o777))
        except FileNotFoundError:
            originals.append((path, None, 0o644))
    staged: list[tuple[Path, Path]] = []
    try:
        for (path, text), (_, _, mode) in zip(changes, originals, strict=True):
            staged.append((path, _stage(path, text.encode("utf-8"), mode)))
        done: list[int] = []
        try:
            for index, (path, temporary) in enumerate(staged):
                os.replace(temporary, path)
                done.append(index)
        except BaseException:
            for index in reversed(done):
                path, old, mode = originals[index]
                if old is None:
                    path.unlink(missing_ok=True)
                else:
                    os.replace(_stage(path, old, mode), path)
            raise
    finally:
        for _, temporary in staged:
            temporary.unlink(missing_ok=True)


def _stage(path: Path, data: bytes, mode: int) -> Path:
    return write_temp_beside(path, data, mode=mode)


# --- the command ------------------------------------------------------------------------


def repin(
    name: str,
    *,
    tag: str | None = None,
    latest: bool = False,
    pins_path: Path = DEFAULT_PINS_PATH,
    notices_path: Path = DEFAULT_NOTICES_PATH,
    source: str | None = None,
    github_url: str | None = None,
    api_url: str | None = None,
    trusted_root: Path | None = None,
    allow_downgrade: bool = False,
    dry_run: bool = False,
    distributions: Sequence[Distribution] | None = None,
    progress: Callable[[str], None] | None = None,
    settings: Settings | None = None,
) -> RepinResult:
    """Move pin ``name`` to ``tag`` (or the latest release) after verifying the asset.

    ``source`` is a mirror (feed URL or folder) instead of GitHub; ``github_url`` and
    ``api_url`` replace GitHub's bases (GitHub Enterprise, tests), else ``settings``' apply
    (``MUX_GITHUB_URL`` / ``MUX_GITHUB_API_URL``, as in the updater). ``trusted_root`` is the
    Sigstore trusted root (default: ``settings``', else Sigstore's production root).
    ``settings`` default to the environment's (:func:`updater.settings.load`).
    ``distributions`` replaces the installed ones in the regenerated notices (tests).
    """
    from updater import settings as mux_settings
    from updater.attestation import AttestationIdentity, verify_attestation

    settings = settings or mux_settings.load()

    say = progress or (lambda _message: None)
    if (tag is None) == (not latest):
        raise UsageError("give exactly one of --tag TAG and --latest")

    say(f"[1/7] read {pins_path.name}")
    original = pins_path.read_text(encoding="utf-8") if pins_path.is_file() else None
    if original is None:
        raise PinsError(f"{pins_path} does not exist")
    pins, problems = read_pins(load_document(pins_path), base_dir=pins_path.parent)
    if problems:
        raise PinsError(f"{pins_path}: {problems[0]}", hint="fix pins.toml first (pins --check)")
    pin = next((p for p in pins if p.name == name), None)
    if pin is None:
        raise PinsError(f"{pins_path} has no artifact named {name!r}")

    request = (
        ReleaseRequest.tagged(tag, allow_downgrade=allow_downgrade)
        if tag is not None
        else ReleaseRequest.latest(allow_downgrade=allow_downgrade)
    )
    with _open_source(pin, source, github_url, api_url, settings) as artifact_source:
        say("[2/7] resolve the release")
        try:
            new_tag = artifact_source.resolve(request, parse=parse_tag_version)
            check_not_downgrade(pin, new_tag, request)
        except ParseError as exc:
            raise UsageError(f"{pin.name}: {exc.message}") from None
        release = _release_info(artifact_source, new_tag, pin)

        say(f"[3/7] download {pin.asset} of {new_tag}")
        computed, size = _download_and_hash(
            artifact_source,
            new_tag,
            pin,
            release.api_size,
            quiet=progress is None,
            bar=settings.progress_bar,
        )
        if release.api_size is not None and size != release.api_size:
            raise VerificationError(
                f"{pin.asset}: downloaded {size} bytes, the release lists {release.api_size}"
            )

        say("[4/7] cross-check digests")
        sums = _sums_digest(artifact_source, new_tag, pin) if release.publishes_sums else None
        agreed = agree_on_digest(
            computed, [("GitHub's asset digest", release.api_digest), (SUMS_NAME, sums)]
        )
        if pin.tag == new_tag and pin.sha256 is not None and pin.sha256 != computed:
            raise VerificationError(
                f"{pin.name}: {pin.asset} of {new_tag} changed since it was pinned "
                f"(pinned {pin.sha256}, now {computed})"
            )

        say("[5/7] verify the attestation")
        bundle = _attestation_bundles(artifact_source, new_tag, pin, computed)
        identity = AttestationIdentity(
            repository=pin.identity.repository,
            signer_workflow=pin.identity.signer_workflow,
            ref=f"refs/tags/{new_tag}",
        )
        report = verify_attestation(
            bundle,
            computed,
            identity,
            trusted_root=trusted_root or settings.sigstore_trusted_root,
        )
    url = github_download_url(
        _pin_web(source, github_url, settings), pin.repository, new_tag, pin.asset
    )

    say("[6/7] plan the writes")
    fields: dict[str, Any] = {"tag": new_tag, "url": url, "sha256": computed, "size": size}
    updated = rewrite_pin(original, name, fields)
    new_pins, problems = read_pins(load_document_text(updated), base_dir=pins_path.parent)
    if problems:  # the rewrite must round-trip into a valid file, or nothing is written
        raise PinsError(f"the rewritten pins.toml is invalid: {problems[0]}")
    notices = generate_notices(pins_path, pins=new_pins, distributions=distributions)
    try:
        current_notices = notices_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        current_notices = ""
    pins_diff = _diff(original, updated, pins_path.name)
    notices_diff = _diff(current_notices, notices, notices_path.name)
    changed = bool(pins_diff or notices_diff)

    written = False
    if changed and not dry_run:
        say("[7/7] write pins.toml and the notices")
        write_together([(pins_path, updated), (notices_path, notices)])
        written = True
    return RepinResult(
        name=name,
        old_tag=pin.tag,
        old_sha256=pin.sha256,
        tag=new_tag,
        url=url,
        sha256=computed,
        size=size,
        digests=tuple(agreed),
        attestation=report,
        pins_diff=pins_diff,
        notices_diff=notices_diff,
        changed=changed,
        written=written,
    )


def load_document_text(text: str) -> Any:
    import tomlkit

    return tomlkit.parse(text)
