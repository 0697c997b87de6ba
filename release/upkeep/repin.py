"""``mux-release repin NAME --tag T | --latest``: move a pin to a verified release asset.

The steps (docs/design.md, "Pins"), each failing closed:

1. read ``pins.toml``; the entry must exist and be well formed;
2. resolve the release through the updater's own source (:mod:`updater.sources.base`): ``--tag``,
   or the newest release (GitHub's ``/releases/latest`` redirect, or a mirror's
   ``releases.json``); a tag must keep the entry's tag prefix;
3. refuse a downgrade unless ``allow_downgrade`` (the updater's decision,
   :meth:`updater.core.request.ReleaseRequest.decide`);
4. read the release (GitHub API, :meth:`~updater.sources.base.ReleaseSource.listing`): not a draft, every asset of the entry is listed (one per
   declared target, all from this one tag; a missing one is named with its target), each
   size is within the cap, each ``digest``; whether it publishes ``SHA256SUMS``;
5. for every asset, in parallel under one progress display: download it while hashing it
   (the updater's own download), with a size cap (the bytes are not kept: the pin is the digest, and ``mux-release build``
   checks the file it is given in --artifacts DIR against the pin), then
6. every available digest must agree: the computed one, the API ``digest`` and the release's
   ``SHA256SUMS`` line (mandatory on a mirror, which has no API), and
7. its build-provenance attestation must verify for the entry's identity, at
   ``refs/tags/<tag>``, with a subject of that digest named as the asset (the updater's own
   verifier, :mod:`updater.trust.attestation`): another target's build republished under this
   target's name is refused;
8. only when every asset passed: rewrite the entry's ``tag`` and each asset's ``url``,
   ``sha256`` and ``size`` with tomlkit (comments and order kept, nothing else touched),
   regenerate the notices, and write both files together: both are staged as temp files next
   to their targets, then renamed; if anything fails, neither changes.

``dry_run`` stops before step 8's writes and reports the diffs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from release.bill.third_party_notices import Distribution, generate_notices
from release.pins.pinfile import (
    ARTIFACTS_KEY,
    DEFAULT_NOTICES_PATH,
    DEFAULT_PINS_PATH,
    FILE_FIELDS,
    PINNED_KEY,
    Pin,
    PinnedAsset,
    PinsError,
    load_document,
    parse_tag_version,
    read_pins,
)
from release.textdiff import capped_unified_diff
from updater.cli.render import ProgressGroup
from updater.config import settings as mux_settings
from updater.core.request import Decision, ReleaseRequest
from updater.errors import MuxError, NetworkError, ParseError, UsageError, VerificationError
from updater.files import write_temp_beside
from updater.formats.models import SUMS_NAME, parse_sha256sums
from updater.sources.base import BUNDLE_LIMIT, ReleaseSource
from updater.sources.github import GITHUB_WEB, GitHubSource, github_download_url
from updater.sources.opener import open_source
from updater.trust.attestation import AttestationIdentity, AttestationReport, verify_attestation
from updater.trust.source import PublishedAsset
from updater.trust.trust_policy import sigstore_root

if TYPE_CHECKING:
    from updater.config.settings import Settings
    from updater.net.progress import Progress

MAX_DIFF_LINES = 120
MAX_PARALLEL = 4  # assets downloaded and verified at once
# What the updater's decision refuses without --allow-downgrade.
_REFUSED = (Decision.DOWNGRADE_REFUSED, Decision.NEWER_INSTALLED)


class RepinRefused(MuxError):
    """The repin would be a downgrade or another change the policy does not allow."""


@dataclass(frozen=True)
class RepinnedFile:
    """One verified asset: what its target will ship."""

    target: str | None
    asset: str
    url: str
    sha256: str
    size: int
    digests: tuple[str, ...]  # which sources agreed on the sha256
    attestation: AttestationReport


@dataclass(frozen=True)
class RepinResult:
    """What a repin found and did; ``changed`` is False when the pin already was this."""

    name: str
    old_tag: str | None
    tag: str
    files: tuple[RepinnedFile, ...]
    pins_diff: str
    notices_diff: str
    changed: bool
    written: bool

    @property
    def single(self) -> RepinnedFile:
        """The asset of an entry every target ships; a per-target result has one per target
        (``files``), so asking it for one is an error, never its first target's."""
        if len(self.files) != 1 or self.files[0].target is not None:
            raise ValueError(f"{self.name} pins one asset per target: use .files")
        return self.files[0]

    def describe(self) -> list[str]:
        """Human-readable lines for the CLI, ending with a ready commit message."""
        lines = []
        for item in self.files:
            report = item.attestation
            what = f" ({item.target}) {item.asset}" if item.target else ""
            lines += [
                f"{self.name}{what}: {self.tag} sha256 {item.sha256} ({item.size} bytes)",
                "  digests agree: " + ", ".join(item.digests),
                f"  attested by {report.repository} {report.signer_workflow}@{report.signer_ref}",
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
        what = (
            f"sha256 {self.files[0].sha256[:12]}"
            if len(self.files) == 1
            else f"{len(self.files)} targets"
        )
        lines.append(
            f"commit: repin {self.name}: {old}-> {self.tag}, {what}, "
            f"attested by {self.files[0].attestation.repository}"
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
    request allows it, an older one (the updater's own decision, :mod:`updater.core.request`)."""
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


def rewrite_pin(
    document_text: str,
    name: str,
    fields: dict[str, Any],
    per_target: dict[str, dict[str, Any]] | None = None,
) -> str:
    """``document_text`` with only ``fields`` of ``[artifacts.<name>]`` replaced (tomlkit), and
    for a per-target entry its ``[artifacts.<name>.pinned.<target>]`` tables.

    Every field repin writes is rewritten, so what an earlier shape of the entry left behind
    goes: a per-target entry loses a single asset's ``url``/``sha256``/``size`` and the tables
    of targets it no longer declares, a single-asset entry its ``[pinned]`` tables. Nothing
    people wrote is touched.
    """
    # deferred: tomlkit is the release extra's: without it, mux-release says how to get it (release/cli.py)
    import tomlkit

    document = tomlkit.parse(document_text)
    entry = document[ARTIFACTS_KEY][name]
    stale = [PINNED_KEY] if per_target is None else [k for k in FILE_FIELDS if k not in fields]
    for key in stale:
        if key in entry:
            del entry[key]
    for key, value in fields.items():
        entry[key] = value
    if per_target is not None:
        pinned = entry.get(PINNED_KEY)
        if not isinstance(pinned, dict):
            if pinned is not None:
                del entry[PINNED_KEY]
            pinned = tomlkit.table(is_super_table=True)
            entry[PINNED_KEY] = pinned
        for target in [t for t in pinned if t not in per_target]:
            del pinned[target]
        for target in sorted(per_target):
            table = pinned.get(target)
            if not isinstance(table, dict):
                if table is not None:
                    del pinned[target]
                table = tomlkit.table()
                pinned[target] = table
            for key, value in per_target[target].items():
                table[key] = value
    return tomlkit.dumps(document)


# --- network (I/O) ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Release:
    """What the release's host lists about the entry's assets, before anything is downloaded."""

    tag: str
    assets: Mapping[str, PublishedAsset] | None  # None: a mirror, which lists nothing
    publishes_sums: bool


@dataclass(frozen=True)
class Upstream:
    """Where :func:`repin` reads a pin's release, and the root its attestations are checked
    against; each None: the settings' (``MUX_GITHUB_URL``, ``MUX_GITHUB_API_URL``, as in the
    updater; the Sigstore root of the settings, else Sigstore's production root)."""

    source: str | None = None  # a mirror (feed URL or folder) instead of GitHub
    github_url: str | None = None  # GitHub's bases replaced (GitHub Enterprise, tests)
    api_url: str | None = None
    trusted_root: Path | None = None  # Sigstore's trusted_root.json


@dataclass(frozen=True)
class Checkout:
    """The files :func:`repin` rewrites together: the pins and the notices made from them."""

    pins_path: Path = DEFAULT_PINS_PATH
    notices_path: Path = DEFAULT_NOTICES_PATH
    # The installed distributions the notices name, replaced (tests); None: this environment's.
    distributions: Sequence[Distribution] | None = None


def _open_source(pin: Pin, upstream: Upstream, settings: Settings) -> ReleaseSource:
    if upstream.source:
        # Another project's artifacts: its list is not signed with mux's key; every file
        # taken from it is checked against its digests and attestation instead.
        return open_source(settings, spec=upstream.source, unsigned_index=True)
    github = settings.github
    return GitHubSource(
        pin.repository,
        web_url=upstream.github_url or github.web_url,
        api_url=upstream.api_url or github.api_url,
        token=github.token,
        http=settings.http,
    )


def _pin_web(upstream: Upstream, settings: Settings) -> str:
    """The GitHub a pin's URL names: the pin names the artifact there (its sha256 fixes the
    bytes), never the mirror that happened to serve it."""
    if upstream.source:
        return GITHUB_WEB
    return upstream.github_url or settings.github.web_url or GITHUB_WEB


def _release_info(source: ReleaseSource, tag: str, pin: Pin) -> _Release:
    """The release's asset list (names, API digests, sizes); every asset of ``pin`` must be in
    it and within the size cap, or nothing is downloaded."""
    listing = source.listing(tag)
    if listing is None:
        # A mirror has no API: no asset list and no digest field, so SHA256SUMS is mandatory.
        return _Release(tag, None, True)
    if listing.draft:
        raise RepinRefused(f"{pin.name}: release {tag} is a draft; pin a published release")
    missing = [item for item in pin.files if item.asset not in listing.assets]
    if missing:
        named = ", ".join(
            f"{item.asset} (for {item.target})" if item.target else item.asset for item in missing
        )
        raise NetworkError(f"release {tag} of {pin.repository} has no asset {named}")
    for item in pin.files:
        size = listing.assets[item.asset].size
        if size is not None and size > pin.max_bytes:
            raise RepinRefused(
                f"{pin.name}: {item.asset} is {size} bytes, more than max_bytes ({pin.max_bytes})"
            )
    return _Release(tag, listing.assets, SUMS_NAME in listing.assets)


def _download_and_hash(
    source: ReleaseSource,
    tag: str,
    asset: str,
    *,
    max_bytes: int,
    size: int | None,
    progress: Progress,
) -> tuple[str, int]:
    """Fetch the asset and hash it; the bytes are not kept (the pin is their digest).

    The updater's own download: never past ``max_bytes``; with a known size (GitHub's API
    lists it) resumed with Range and retried.
    """
    with tempfile.TemporaryDirectory(prefix="mux-repin-") as scratch:
        fetched = source.download(
            tag, asset, Path(scratch), size=size, max_size=max_bytes, progress=progress
        )
        return fetched.sha256, fetched.size


def _sums(source: ReleaseSource, tag: str) -> dict[str, str]:
    raw = source.fetch(tag, SUMS_NAME)
    try:
        return parse_sha256sums(raw)
    except ParseError as exc:
        raise VerificationError(f"release {tag}: {exc.message}") from None


def _attestation_bundles(
    source: ReleaseSource, tag: str, pin: Pin, item: PinnedAsset, sha256: str
) -> bytes:
    bundle_asset = pin.attestation_asset_for(item.target)
    if bundle_asset:
        return source.fetch(tag, bundle_asset, max_size=BUNDLE_LIMIT)
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
            f"{item.label(pin.name)}: {item.asset} of {tag} is not attested (no attestation "
            f"for sha256 {sha256})"
        )
    return b"\n".join(bundles)


def _verify_one(
    source: ReleaseSource,
    pin: Pin,
    item: PinnedAsset,
    release: _Release,
    sums: dict[str, str] | None,
    *,
    pin_web: str,
    trusted_root: Path | None,
    progress: Progress,
) -> RepinnedFile:
    """Download, cross-check and attestation-verify one asset (runs in a worker thread)."""
    tag = release.tag
    listed = release.assets.get(item.asset) if release.assets is not None else None
    api_digest, api_size = (listed.sha256, listed.size) if listed else (None, None)
    computed, size = _download_and_hash(
        source, tag, item.asset, max_bytes=pin.max_bytes, size=api_size, progress=progress
    )
    if api_size is not None and size != api_size:
        raise VerificationError(
            f"{item.asset}: downloaded {size} bytes, the release lists {api_size}"
        )
    if sums is not None and item.asset not in sums:
        raise VerificationError(f"release {tag}: {SUMS_NAME} does not list {item.asset}")
    agreed = agree_on_digest(
        computed,
        [
            ("GitHub's asset digest", api_digest),
            (SUMS_NAME, sums.get(item.asset) if sums is not None else None),
        ],
    )
    if pin.tag == tag and item.sha256 is not None and item.sha256 != computed:
        raise VerificationError(
            f"{item.label(pin.name)}: {item.asset} of {tag} changed since it was pinned "
            f"(pinned {item.sha256}, now {computed})"
        )
    bundle = _attestation_bundles(source, tag, pin, item, computed)
    identity = AttestationIdentity(
        repository=pin.identity.repository,
        signer_workflow=pin.identity.signer_workflow,
        ref=f"refs/tags/{tag}",
    )
    # Under this asset's own name: the same digest agreeing everywhere does not say which
    # target the bytes were built for, the producer's attestation does.
    report = verify_attestation(
        bundle,
        computed,
        identity,
        trusted_root=trusted_root,
        subject_names={computed: item.asset},
    )
    return RepinnedFile(
        target=item.target,
        asset=item.asset,
        url=github_download_url(pin_web, pin.repository, tag, item.asset),
        sha256=computed,
        size=size,
        digests=tuple(agreed),
        attestation=report,
    )


def _verify_all(
    source: ReleaseSource,
    pin: Pin,
    release: _Release,
    sums: dict[str, str] | None,
    *,
    pin_web: str,
    trusted_root: Path | None,
    quiet: bool,
    bar: bool,
) -> tuple[RepinnedFile, ...]:
    """Every asset of the entry, in parallel under one progress display; the first failure
    (in the entry's target order) is raised once all have finished, so nothing is half done."""
    display = ProgressGroup(quiet=quiet, bar=bar)
    with display, ThreadPoolExecutor(max_workers=MAX_PARALLEL) as pool:
        futures = [
            pool.submit(
                _verify_one,
                source,
                pin,
                item,
                release,
                sums,
                pin_web=pin_web,
                trusted_root=trusted_root,
                progress=display.task(f"{item.asset} {release.tag}"),
            )
            for item in pin.files
        ]
        outcomes: list[RepinnedFile | MuxError] = []
        for future in futures:
            try:
                outcomes.append(future.result())
            except MuxError as exc:
                outcomes.append(exc)
    for item, outcome in zip(pin.files, outcomes, strict=True):
        if isinstance(outcome, MuxError) and item.target is not None:
            # Name the target and asset: with several in flight, the bare reason is ambiguous.
            outcome.message = f"{item.label(pin.name)} {item.asset}: {outcome.message}"
    for outcome in outcomes:
        if isinstance(outcome, MuxError):
            raise outcome
    return tuple(o for o in outcomes if isinstance(o, RepinnedFile))


def _rewrite(original: str, pin: Pin, tag: str, verified: Sequence[RepinnedFile]) -> str:
    if not pin.per_target:
        (item,) = verified
        fields = {"tag": tag, "url": item.url, "sha256": item.sha256, "size": item.size}
        return rewrite_pin(original, pin.name, fields)
    per_target = {
        str(item.target): {"url": item.url, "sha256": item.sha256, "size": item.size}
        for item in verified
    }
    return rewrite_pin(original, pin.name, {"tag": tag}, per_target)


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
    allow_downgrade: bool = False,
    dry_run: bool = False,
    checkout: Checkout = Checkout(),
    upstream: Upstream = Upstream(),
    progress: Callable[[str], None] | None = None,
    settings: Settings | None = None,
) -> RepinResult:
    """Move pin ``name`` of ``checkout`` to ``tag`` (or the latest release) of ``upstream``
    after verifying its assets. ``settings`` default to the environment's
    (:func:`updater.config.settings.load`)."""
    settings = settings or mux_settings.load()
    pins_path, notices_path = checkout.pins_path, checkout.notices_path

    say = progress or (lambda _message: None)
    if (tag is None) == (not latest):
        raise UsageError("give exactly one of --tag TAG and --latest")

    say(f"[1/7] read {pins_path.name}")
    original = pins_path.read_text(encoding="utf-8") if pins_path.is_file() else None
    if original is None:
        raise PinsError(f"{pins_path} does not exist")
    pins, problems = read_pins(load_document(pins_path), base_dir=pins_path.parent, repinning=name)
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
    with _open_source(pin, upstream, settings) as artifact_source:
        say("[2/7] resolve the release")
        try:
            new_tag = artifact_source.resolve(request, parse=parse_tag_version)
            check_not_downgrade(pin, new_tag, request)
        except ParseError as exc:
            raise UsageError(f"{pin.name}: {exc.message}") from None
        release = _release_info(artifact_source, new_tag, pin)
        sums = _sums(artifact_source, new_tag) if release.publishes_sums else None

        count = f"{len(pin.files)} assets" if len(pin.files) > 1 else pin.files[0].asset
        say(f"[3/7] download {count} of {new_tag}")
        say("[4/7] cross-check digests")
        say("[5/7] verify the attestation" + ("s" if len(pin.files) > 1 else ""))
        verified = _verify_all(
            artifact_source,
            pin,
            release,
            sums,
            pin_web=_pin_web(upstream, settings),
            trusted_root=upstream.trusted_root or sigstore_root(settings),
            quiet=progress is None,
            bar=settings.progress_bar,
        )

    say("[6/7] plan the writes")
    updated = _rewrite(original, pin, new_tag, verified)
    new_pins, problems = read_pins(load_document_text(updated), base_dir=pins_path.parent)
    if problems:  # the rewrite must round-trip into a valid file, or nothing is written
        raise PinsError(f"the rewritten pins.toml is invalid: {problems[0]}")
    notices = generate_notices(pins_path, pins=new_pins, distributions=checkout.distributions)
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
        tag=new_tag,
        files=verified,
        pins_diff=pins_diff,
        notices_diff=notices_diff,
        changed=changed,
        written=written,
    )


def load_document_text(text: str) -> Any:
    # deferred: tomlkit is the release extra's: without it, mux-release says how to get it (release/cli.py)
    import tomlkit

    return tomlkit.parse(text)
