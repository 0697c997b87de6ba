"""``mux-release repin NAME --tag T | --latest``: move a pin to a verified release asset.

The steps (``../shared/notes/repin-and-notices.md`` §3.3), each failing closed:

1. read ``pins.toml``; the entry must exist and be well formed;
2. resolve the release: ``--tag``, or the newest release (GitHub's ``/releases/latest``
   redirect, or a mirror's ``releases.json``); a tag must keep the entry's tag prefix;
3. refuse a downgrade unless ``allow_downgrade``;
4. read the release (GitHub API): not a draft, every asset of the entry is listed (one per
   declared target, all from this one tag; a missing one is named with its target), each
   size is within the cap, each ``digest``; whether it publishes ``SHA256SUMS``;
5. for every asset, in parallel under one progress display: stream it while hashing it, with
   a size cap (the bytes are not kept: the pin is the digest, and ``mux-release build``
   checks the file it is given in --artifacts DIR against the pin), then
6. every available digest must agree: the computed one, the API ``digest`` and the release's
   ``SHA256SUMS`` line (mandatory on a mirror, which has no API), and
7. its build-provenance attestation must verify for the entry's identity, at
   ``refs/tags/<tag>`` (the updater's own verifier, :mod:`updater.attestation`);
8. only when every asset passed: rewrite the entry's ``tag`` and each asset's ``url``,
   ``sha256`` and ``size`` with tomlkit (comments and order kept, nothing else touched),
   regenerate the notices, and write both files together: both are staged as temp files next
   to their targets, then renamed; if anything fails, neither changes.

``dry_run`` stops before step 8's writes and reports the diffs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from updater.errors import MuxError, NetworkError, ParseError, UsageError, VerificationError
from updater.models import SUMS_NAME, is_sha256, parse_sha256sums

from .notices import Distribution, generate_notices
from .pins import (
    ARTIFACTS_KEY,
    DEFAULT_NOTICES_PATH,
    DEFAULT_PINS_PATH,
    PINNED_KEY,
    Pin,
    PinnedAsset,
    PinsError,
    load_document,
    parse_tag_version,
    read_pins,
)

if TYPE_CHECKING:
    from updater.attestation import AttestationReport
    from updater.sources import FeedSource, GitHubSource

CHUNK_SIZE = 64 * 1024
MAX_DIFF_LINES = 120


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

    # The single asset's fields (an entry shipped by every target).
    @property
    def sha256(self) -> str:
        return self.files[0].sha256

    @property
    def size(self) -> int:
        return self.files[0].size

    @property
    def url(self) -> str:
        return self.files[0].url

    @property
    def digests(self) -> tuple[str, ...]:
        return self.files[0].digests

    @property
    def attestation(self) -> AttestationReport:
        return self.files[0].attestation

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
            f"sha256 {self.sha256[:12]}" if len(self.files) == 1 else f"{len(self.files)} targets"
        )
        lines.append(
            f"commit: repin {self.name}: {old}-> {self.tag}, {what}, "
            f"attested by {self.files[0].attestation.repository}"
        )
        return lines


# --- pure helpers -----------------------------------------------------------------------


def _diff(before: str, after: str, name: str) -> str:
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{name} (before)",
            tofile=f"{name} (after)",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more lines)\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def check_not_downgrade(pin: Pin, new_tag: str, *, allow_downgrade: bool) -> None:
    """Refuse a tag older than the pinned one, or one of another tag family (prefix)."""
    new_prefix, new_version = parse_tag_version(new_tag)
    if pin.tag is None:
        return
    old_prefix, old_version = parse_tag_version(pin.tag)
    if new_prefix != old_prefix:
        raise RepinRefused(
            f"{pin.name}: tag {new_tag} does not start like the pinned {pin.tag} "
            f"({old_prefix or 'no prefix'})"
        )
    if new_version < old_version and not allow_downgrade:
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
    for a per-target entry its ``[artifacts.<name>.pinned.<target>]`` tables."""
    import tomlkit

    document = tomlkit.parse(document_text)
    entry = document[ARTIFACTS_KEY][name]
    for key, value in fields.items():
        entry[key] = value
    if per_target is not None:
        pinned = entry.get(PINNED_KEY)
        if pinned is None:
            pinned = tomlkit.table(is_super_table=True)
            entry[PINNED_KEY] = pinned
        for target in sorted(per_target):
            table = pinned.get(target)
            if table is None:
                table = tomlkit.table()
                pinned[target] = table
            for key, value in per_target[target].items():
                table[key] = value
    return tomlkit.dumps(document)


# --- network (I/O) ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Release:
    tag: str
    assets: dict[str, tuple[str | None, int | None]] | None  # name -> (API digest, size)
    publishes_sums: bool


def _open_source(
    pin: Pin, mirror: str | None, github_url: str | None, api_url: str | None
) -> GitHubSource | FeedSource:
    from updater.sources import FeedSource, GitHubSource

    if mirror:
        return FeedSource(mirror)
    return GitHubSource(pin.repository, web_url=github_url, api_url=api_url)


def _latest_tag(source: GitHubSource | FeedSource) -> str:
    from updater.sources import GitHubSource

    if not isinstance(source, GitHubSource):
        return source.latest_tag(include_pre=False)
    # As the updater does: read the /releases/latest redirect, off the rate-limited API. The
    # updater's own parser accepts only mux's vX.Y.Z tags; a pin's tags may carry a prefix.
    url = f"{source.web}/{source.repo}/releases/latest"
    with source.client.stream(url, follow_redirects=False) as response:
        location = response.headers.get("location", "")
        status = response.status_code
    _, found, tag = location.rstrip("/").rpartition("/releases/tag/")
    if status not in (301, 302, 303, 307, 308) or not found or not tag:
        raise NetworkError(f"{source.location} has no published release ({url} did not redirect)")
    return unquote(tag)


def _release_info(source: GitHubSource | FeedSource, tag: str, pin: Pin) -> _Release:
    """The release's asset list (names, API digests, sizes); every asset of ``pin`` must be in
    it and within the size cap, or nothing is downloaded."""
    from updater.sources import GitHubSource

    if not isinstance(source, GitHubSource):
        # A mirror has no API: no asset list and no digest field, so SHA256SUMS is mandatory.
        return _Release(tag, None, True)
    url = f"{source.api}/repos/{source.repo}/releases/tags/{quote(tag, safe='')}"
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    try:
        doc = json.loads(source.client.get(url, headers=headers).content)
    except ValueError:
        raise NetworkError(f"{url} answered something that is not JSON") from None
    if not isinstance(doc, dict):
        raise NetworkError(f"{url} did not answer a release object")
    if doc.get("draft"):
        raise RepinRefused(f"{pin.name}: release {tag} is a draft; pin a published release")
    listed: dict[str, tuple[str | None, int | None]] = {}
    for asset in doc.get("assets") or []:
        if not isinstance(asset, dict) or not isinstance(asset.get("name"), str):
            continue
        digest = asset.get("digest")
        api_digest = None
        if isinstance(digest, str) and digest.startswith("sha256:"):
            api_digest = digest.removeprefix("sha256:").lower()
            if not is_sha256(api_digest):
                raise VerificationError(
                    f"GitHub's digest for {asset['name']} is malformed: {digest[:80]}"
                )
        size = asset.get("size")
        listed[asset["name"]] = (
            api_digest,
            size if isinstance(size, int) and not isinstance(size, bool) else None,
        )
    missing = [item for item in pin.files if item.asset not in listed]
    if missing:
        named = ", ".join(
            f"{item.asset} (for {item.target})" if item.target else item.asset for item in missing
        )
        raise NetworkError(f"release {tag} of {pin.repository} has no asset {named}")
    for item in pin.files:
        size = listed[item.asset][1]
        if size is not None and size > pin.max_bytes:
            raise RepinRefused(
                f"{pin.name}: {item.asset} is {size} bytes, more than max_bytes ({pin.max_bytes})"
            )
    return _Release(tag, listed, SUMS_NAME in listed)


def _hash_stream(chunks: Any, limit: int, what: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise VerificationError(f"{what} is larger than {limit} bytes; refusing it")
        digest.update(chunk)
    return digest.hexdigest(), size


def _download_and_hash(
    source: GitHubSource | FeedSource,
    tag: str,
    asset: str,
    max_bytes: int,
    expected_size: int | None,
    progress: Any,
) -> tuple[str, int]:
    """Fetch the asset and hash it; the bytes are not kept (the pin is their digest).

    With a known size (GitHub's API lists it; a mirror folder is capped by ``max_bytes``) this
    is the updater's own downloader: resumed with Range, never past the size, retried. A mirror
    URL lists no sizes, so its body is streamed through sha256 here, capped by ``max_bytes``.
    """
    from updater.download import download

    location = source.file_url(tag, asset)
    client = getattr(source, "client", None)
    remote = location.startswith(("http://", "https://"))
    if expected_size is not None or not remote:
        with tempfile.TemporaryDirectory(prefix="mux-repin-") as scratch:
            fetched = download(
                location,
                Path(scratch),
                expected_size=expected_size if expected_size is not None else max_bytes,
                client=client,
                label=f"{asset} {tag}",
                progress=progress,
            )
            return fetched.sha256, fetched.size

    import httpx

    assert client is not None
    with client.stream(location) as response:
        try:
            return _hash_stream(response.iter_bytes(CHUNK_SIZE), max_bytes, location)
        except httpx.HTTPError as exc:
            # A body shorter than its Content-Length, a reset or a stall: never a pin.
            raise NetworkError(
                f"download of {location} failed: {exc or type(exc).__name__}"
            ) from None


def _sums(source: GitHubSource | FeedSource, tag: str) -> dict[str, str]:
    raw = source.fetch(tag, SUMS_NAME)
    try:
        return parse_sha256sums(raw)
    except ParseError as exc:
        raise VerificationError(f"release {tag}: {exc.message}") from None


def _attestation_bundles(
    source: GitHubSource | FeedSource, tag: str, pin: Pin, item: PinnedAsset, sha256: str
) -> bytes:
    bundle_asset = pin.attestation_asset_for(item.target)
    if bundle_asset:
        return source.fetch(tag, bundle_asset, max_size=16 * 1024 * 1024)
    from updater.sources import GitHubSource

    if not isinstance(source, GitHubSource):
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
    staged: list[tuple[Path, str]] = []
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
            Path(temporary).unlink(missing_ok=True)


def _stage(path: Path, data: bytes, mode: int) -> str:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


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
) -> RepinResult:
    """Move pin ``name`` to ``tag`` (or the latest release) after verifying the asset.

    ``source`` is a mirror (feed URL or folder) instead of GitHub; ``github_url`` and
    ``api_url`` replace GitHub's bases (GitHub Enterprise, tests), else ``MUX_GITHUB_URL`` /
    ``MUX_GITHUB_API_URL`` apply as in the updater. ``trusted_root`` is the Sigstore trusted
    root (default: ``MUX_SIGSTORE_TRUSTED_ROOT``, else Sigstore's production root).
    ``distributions`` replaces the installed ones in the regenerated notices (tests).
    """
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

    artifact_source = _open_source(pin, source, github_url, api_url)
    try:
        say("[2/7] resolve the release")
        new_tag = tag if tag is not None else _latest_tag(artifact_source)
        try:
            check_not_downgrade(pin, new_tag, allow_downgrade=allow_downgrade)
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
            trusted_root=trusted_root,
            quiet=progress is None,
        )
    finally:
        artifact_source.close()

    say("[6/7] plan the writes")
    updated = _rewrite(original, pin, new_tag, verified)
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
        tag=new_tag,
        files=verified,
        pins_diff=pins_diff,
        notices_diff=notices_diff,
        changed=changed,
        written=written,
    )


def _verify_one(
    source: GitHubSource | FeedSource,
    pin: Pin,
    item: PinnedAsset,
    release: _Release,
    sums: dict[str, str] | None,
    *,
    trusted_root: Path | None,
    progress: Any,
) -> RepinnedFile:
    """Download, cross-check and attestation-verify one asset (runs in a worker thread)."""
    from updater.attestation import AttestationIdentity, verify_attestation

    tag = release.tag
    api_digest, api_size = (release.assets or {}).get(item.asset, (None, None))
    computed, size = _download_and_hash(source, tag, item.asset, pin.max_bytes, api_size, progress)
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
    report = verify_attestation(bundle, computed, identity, trusted_root=trusted_root)
    return RepinnedFile(
        target=item.target,
        asset=item.asset,
        url=_canonical_url(source, pin, tag, item.asset),
        sha256=computed,
        size=size,
        digests=tuple(agreed),
        attestation=report,
    )


MAX_PARALLEL = 4


def _verify_all(
    source: GitHubSource | FeedSource,
    pin: Pin,
    release: _Release,
    sums: dict[str, str] | None,
    *,
    trusted_root: Path | None,
    quiet: bool,
) -> tuple[RepinnedFile, ...]:
    """Every asset of the entry, in parallel under one progress display; the first failure
    (in the entry's target order) is raised once all have finished, so nothing is half done."""
    from concurrent.futures import ThreadPoolExecutor

    display = RepinProgress(quiet=quiet)
    with display, ThreadPoolExecutor(max_workers=MAX_PARALLEL) as pool:
        futures = [
            pool.submit(
                _verify_one,
                source,
                pin,
                item,
                release,
                sums,
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


class RepinProgress:
    """One progress display for parallel downloads: a rich bar per asset on a terminal, else
    one line when each starts and ends (the updater's :class:`PlainProgress`)."""

    def __init__(self, *, quiet: bool) -> None:
        import os
        import sys

        self._quiet = quiet
        self._rich: Any = None
        if (
            not quiet
            and sys.stderr.isatty()
            and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb"
        ):
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            self._rich = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> RepinProgress:
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def task(self, label: str) -> Any:
        from updater.download import make_progress

        if self._rich is None:
            return make_progress(label, quiet=self._quiet)
        rich = self._rich

        class _Task:
            def __init__(self) -> None:
                self.id: Any = None

            def start(self, total: int) -> None:
                self.id = rich.add_task(label, total=total)

            def advance(self, done: int) -> None:
                rich.update(self.id, completed=done)

            def finish(self) -> None:
                if self.id is not None:
                    rich.update(self.id, visible=False)

        return _Task()


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


def _canonical_url(source: GitHubSource | FeedSource, pin: Pin, tag: str, asset: str) -> str:
    """The asset's GitHub download URL, whichever source it was fetched from: the pin names
    the artifact (the sha256 fixes its bytes), not the mirror that happened to serve it."""
    from updater.sources import GITHUB_WEB, GitHubSource

    web = source.web if isinstance(source, GitHubSource) else GITHUB_WEB
    return f"{web}/{pin.repository}/releases/download/{quote(tag)}/{quote(asset)}"


def load_document_text(text: str) -> Any:
    import tomlkit

    return tomlkit.parse(text)
