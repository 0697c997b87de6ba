"""The TUF client: python-tuf's ngclient workflow, through mux's fetchers and storage rules.

:class:`TufClient` wraps one :class:`tuf.ngclient.Updater` (:class:`~updater.trust.tuf_store.StoredUpdater`,
mux's storage rules) for one repository: its metadata URL (or folder), the folder of metadata
this machine trusts for it (in the state dir, one per repository whatever its URL, which first
takes what an earlier folder of the same repository kept: ``carry_over_state``,
:func:`~updater.trust.tuf_store.carry_over`), the fetcher every request goes through
(:mod:`updater.sources.tuf_fetcher`), the root it is bootstrapped with (the one baked into the
build, or one the machine policy names: never the cached ``root.json``, whose chain from that
root is walked again on every refresh) and how it reads (:class:`TufOptions`). :meth:`TufClient.refresh` runs the specification's
client workflow (root rotations, then timestamp, snapshot and targets, each checked for its
signatures and threshold, expiry, version and the length and hashes its parent gives) and
answers the verified :class:`~updater.trust.tuf_targets.SignedTargets`: every release file with its
signed length, sha256 and custom facts.

Every failure is one :class:`~updater.errors.MuxError` line naming the role and why
(:func:`explain`): an expired role with its expiry time, a threshold not met with the key ids
that signed and those that did not, a version that went back, a length or hash that does not
match, a document past its cap; a refusal is a :class:`~updater.errors.VerificationError`
(exit 3), a network that failed is a :class:`~updater.errors.NetworkError` (exit 1).

Release files are not downloaded here: their digests come from :meth:`refresh`, and the
sources fetch them and check them against those digests before anything reads them
(:mod:`updater.sources.base`). Only ``mux-release tuf-client`` (the conformance suite's
client-under-test) downloads targets with python-tuf (:meth:`TufClient.download`).

Imported only where a TUF repository is read: the cached check never imports python-tuf.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tuf.api import exceptions
from tuf.api.metadata import Metadata, Root, Targets
from tuf.ngclient import FetcherInterface, UpdaterConfig

from updater.errors import MuxError, NetworkError, VerificationError
from updater.timestamps import utc_text
from updater.trust.tuf_store import StoredUpdater, carry_over, refreshing
from updater.trust.tuf_targets import ROOT_LIMIT, RoleVersions, SignedFile, SignedTargets

if TYPE_CHECKING:
    from tuf.api.metadata import TargetFile

# What each role may weigh when the metadata that names it gives no length (python-tuf's
# defaults, but a timestamp of a few hundred bytes needs no more than 16 KiB).
TIMESTAMP_LIMIT = 16_384
SNAPSHOT_LIMIT = 2_000_000
TARGETS_LIMIT = 5_000_000
LAYER = "tuf"


# What a fetcher keeps for messages: only metadata, which python-tuf caps at 5 MB (targets).
_REMEMBERED_LIMIT = 8 * 1024 * 1024


class RememberingFetcher(FetcherInterface):
    """A python-tuf fetcher that keeps the last bytes it handed out for each URL, so that a
    refusal can say what the refused document claimed (its expiry, its signatures). The
    fetchers are I/O and live with the sources (:mod:`updater.sources.tuf_fetcher`: every
    request through mux's HTTP client, or from a folder)."""

    def __init__(self) -> None:
        self._last: dict[str, bytes] = {}
        self.last_url: str | None = None

    def last(self, url: str) -> bytes | None:
        """The bytes last handed out for ``url`` (None: never fetched, or too large)."""
        return self._last.get(url)

    def _remember(self, url: str, data: bytes) -> None:
        self.last_url = url
        if len(data) <= _REMEMBERED_LIMIT:
            self._last[url] = data

    def _fetch(self, url: str) -> Iterator[bytes]:
        raise NotImplementedError  # download_bytes and download_file are the ways in


@dataclass(frozen=True)
class TufOptions:
    """How a :class:`TufClient` reads its repository, beyond where from and what it trusts:
    its ``name`` in messages (default: the metadata URL), how long it waits for another
    mux's refresh of the same folder (``lock_wait``, seconds), how far ahead of the real
    clock it judges expiry (``clock_ahead``, seconds: a test's clock, never back), whether
    the folder first takes what an earlier folder of the same repository kept
    (``carry_over_state``); and, for ``mux-release tuf-client`` alone, where targets are
    downloaded (``target_dir``, ``target_base_url``, ``prefix_targets_with_hash``)."""

    name: str | None = None
    lock_wait: float = 10.0
    clock_ahead: float = 0.0
    carry_over_state: bool = False
    target_dir: str | None = None
    target_base_url: str | None = None
    prefix_targets_with_hash: bool = False


class TufClient:
    """One repository's TUF client (see the module docstring)."""

    def __init__(
        self,
        metadata_url: str,
        metadata_dir: str,
        *,
        fetcher: RememberingFetcher,
        bootstrap: bytes | None,
        options: TufOptions = TufOptions(),
    ) -> None:
        self.metadata_url = metadata_url.rstrip("/")
        self.metadata_dir = metadata_dir
        self.name = options.name or self.metadata_url
        self.fetcher = fetcher
        self._bootstrap = bootstrap
        self._target_dir = options.target_dir
        self._target_base_url = options.target_base_url
        self._lock_wait = options.lock_wait
        self._carry_over = options.carry_over_state
        self._clock_ahead = timedelta(seconds=max(0.0, options.clock_ahead))
        self._config = UpdaterConfig(
            root_max_length=ROOT_LIMIT,
            timestamp_max_length=TIMESTAMP_LIMIT,
            snapshot_max_length=SNAPSHOT_LIMIT,
            targets_max_length=TARGETS_LIMIT,
            prefix_targets_with_hash=options.prefix_targets_with_hash,
            app_user_agent="mux-updater",
        )
        self._updater: StoredUpdater | None = None

    # -- the workflow -------------------------------------------------------------------------

    def refresh(self) -> SignedTargets:
        """Run the client workflow and list every release file the verified metadata names."""
        listed = self._refresh(list_targets=True)
        assert listed is not None
        return listed

    def refresh_top_level(self) -> None:
        """The specification's refresh alone (root, timestamp, snapshot, top-level targets),
        as ``mux-release tuf-client refresh`` does: delegated roles are loaded only when a
        target is looked up, so a delegation the snapshot no longer lists is no error until
        then. :meth:`refresh` also loads every delegated role, to list every release."""
        self._refresh(list_targets=False)

    def _refresh(self, *, list_targets: bool) -> SignedTargets | None:
        with refreshing(self.metadata_dir, wait=self._lock_wait):
            try:
                if self._carry_over and self._bootstrap is not None:
                    carry_over(self.metadata_dir, self._bootstrap, wait=self._lock_wait)
                updater = self._updater = StoredUpdater(
                    self.metadata_dir,
                    self.metadata_url + "/",
                    self._target_dir,
                    self._target_base_url,
                    fetcher=self.fetcher,
                    config=self._config,
                    bootstrap=self._bootstrap,
                )
                # Expiry is judged against one reference time, taken when the trusted set is
                # made; moved forward only (a test's clock), never back.
                updater._trusted_set.reference_time += self._clock_ahead
                updater.refresh()
                return self._listed(updater) if list_targets else None
            except (exceptions.RepositoryError, exceptions.DownloadError, ValueError) as exc:
                raise explain(exc, self) from None
            except OSError as exc:
                raise MuxError(
                    f"cannot keep the trusted TUF metadata in {self.metadata_dir}: "
                    f"{exc.strerror or exc}",
                    hint="check that folder's permissions (it is in mux's state dir)",
                ) from None

    def download(self, path: str) -> str:
        """Download the target ``path`` into the target folder, unless a verified copy is
        there (``mux-release tuf-client``); its local path."""
        updater = self._updater
        assert updater is not None, "refresh() first"
        try:
            info = updater.get_targetinfo(path)
            if info is None:
                raise VerificationError(f"{self.name} lists no target {path[:200]!r}")
            return updater.find_cached_target(info) or updater.download_target(info)
        except (exceptions.RepositoryError, exceptions.DownloadError, ValueError) as exc:
            raise explain(exc, self) from None

    def _listed(self, updater: StoredUpdater) -> SignedTargets:
        """Every target of the top-level targets role and of the roles it delegates to
        (one level, in order, each only for the paths its delegation allows; a path listed
        by more than one role is taken from the first, as the specification's search does).

        python-tuf answers lookups of one path at a time; listing needs its trusted set and
        its loader for delegated roles (python-tuf 7, as locked)."""
        trusted = updater._trusted_set
        top = trusted.targets
        files: dict[str, SignedFile] = {}
        _add(files, top, Targets.type, None)
        delegations = top.delegations
        if delegations is not None and delegations.roles:
            for role in list(delegations.roles.values())[: self._config.max_delegations]:
                delegated = updater._load_targets(role.name, Targets.type)
                _add(files, delegated, role.name, role)
        versions = RoleVersions(
            root=trusted.root.version,
            timestamp=trusted.timestamp.version,
            snapshot=trusted.snapshot.version,
            targets=top.version,
            timestamp_expires=trusted.timestamp.expires.timestamp(),
        )
        return SignedTargets(location=self.name, files=files, versions=versions)


def _add(files: dict[str, SignedFile], targets: Targets, role: str, delegation: Any) -> None:
    for path, info in targets.targets.items():
        if path in files or (delegation is not None and not delegation.is_delegated_path(path)):
            continue
        signed = _signed_file(path, info, role)
        if signed is not None:
            files[path] = signed


def _signed_file(path: str, info: TargetFile, role: str) -> SignedFile | None:
    """A target mux can check: it must carry a sha256 (others are not release files)."""
    sha256 = info.hashes.get("sha256")
    if not isinstance(sha256, str) or len(sha256) != 64:
        return None
    return SignedFile(
        path=path,
        length=info.length,
        sha256=sha256.lower(),
        custom=info.custom if isinstance(info.custom, dict) else {},
        role=role,
    )


# -- refusals, one line each ------------------------------------------------------------------


def _role_of(url: str | None) -> str:
    """The role a metadata URL names: ``…/3.snapshot.json`` → ``snapshot``."""
    if not url:
        return "metadata"
    name = url.rsplit("/", 1)[-1].removesuffix(".json")
    head, dot, rest = name.partition(".")
    return rest if dot and head.isdigit() else name


def _short(keyids: Any) -> str:
    return ", ".join(sorted(str(k)[:8] for k in keyids)) or "none"


def explain(exc: Exception, client: TufClient) -> MuxError:
    """One line for a failure of the client workflow (see the module docstring)."""
    fetcher = client.fetcher
    url = fetcher.last_url
    role = _role_of(url)
    where = client.name
    text = str(exc) or exc.__class__.__name__
    if isinstance(exc, exceptions.DownloadLengthMismatchError):
        return VerificationError(
            f"verification failed ({LAYER}): the {role} metadata of {where} is larger than it "
            f"may be ({text}); refusing it (endless data)",
            hint="the repository or a mirror in between serves something no valid repository "
            "does; use another mirror",
        )
    if isinstance(exc, exceptions.DownloadHTTPError):
        return VerificationError(
            f"verification failed ({LAYER}): {where} does not serve its signed {role} "
            f"metadata ({text})",
            hint="this mux reads releases only through its TUF repository; use a complete, "
            "up-to-date mirror of it",
        )
    if isinstance(exc, exceptions.DownloadError):
        return NetworkError(
            f"cannot read the {role} metadata of {where}: {text}",
            hint="check the network or the mirror, then retry",
        )
    if isinstance(exc, exceptions.ExpiredMetadataError):
        return VerificationError(
            f"verification failed ({LAYER}): the {_expired_role(text, role)} metadata of "
            f"{where} expired at {_expiry(text, role, client)} (a mirror that stopped "
            "updating, or a replay)",
            hint="use an up-to-date mirror; the project re-signs its timestamp every few hours",
        )
    if isinstance(exc, exceptions.UnsignedMetadataError):
        return VerificationError(
            f"verification failed ({LAYER}): the {role} metadata of {where} is not signed by "
            f"enough trusted keys: {_threshold(role, client) or text}",
            hint="it was altered, or signed by keys this mux does not trust (a stolen key "
            "alone cannot sign it); do not use this mirror",
        )
    if isinstance(exc, exceptions.BadVersionNumberError):
        return VerificationError(
            f"verification failed ({LAYER}): the {role} metadata of {where} went back: "
            f"{text} (a rollback: this machine already trusts newer metadata)",
            hint=f"use an up-to-date mirror (what this machine trusts: {client.metadata_dir})",
        )
    if isinstance(exc, exceptions.LengthOrHashMismatchError):
        return VerificationError(
            f"verification failed ({LAYER}): the {role} metadata of {where} is not the one its "
            f"signed parent names ({text}): pieces of different repository states mixed",
            hint="a mirror half-way through a sync, or a tampered one; retry later or use "
            "another mirror",
        )
    if isinstance(exc, ValueError) and not isinstance(exc, exceptions.RepositoryError):
        return VerificationError(
            f"verification failed ({LAYER}): the trusted root for {where} cannot be used: {text}",
            hint="the root this mux was built or configured with is damaged",
        )
    return VerificationError(
        f"verification failed ({LAYER}): the {role} metadata of {where} was refused: {text}",
        hint="do not use this mirror, and report it",
    )


def _expired_role(text: str, fallback: str) -> str:
    """python-tuf's message names the role that expired ("Final root.json is expired")."""
    for role in ("root", "timestamp", "snapshot", "targets"):
        if text.startswith((f"{role}.json", f"Final {role}.json")):
            return role
    if text.startswith("New "):
        return text.split()[1]
    return fallback


def _expiry(text: str, fallback: str, client: TufClient) -> str:
    role = _expired_role(text, fallback)
    updater = client._updater
    try:
        if role == Root.type and updater is not None:
            return utc_text(int(updater._trusted_set.root.expires.timestamp()))
        data = _last_of(role, client)
        if data is not None:
            return utc_text(int(Metadata.from_bytes(data).signed.expires.timestamp()))
        if updater is not None and role in updater._trusted_set:
            return utc_text(int(updater._trusted_set[role].expires.timestamp()))
    except Exception:  # the message is the refusal; its detail is a courtesy
        pass
    return "a time already past"


def _last_of(role: str, client: TufClient) -> bytes | None:
    url = client.fetcher.last_url
    return client.fetcher.last(url) if url and _role_of(url) == role else None


def _threshold(role: str, client: TufClient) -> str | None:
    """ "signed by 1 of the 2 keys it needs (signed: …; missing: …)" for the refused
    document, computed from what was fetched and what this machine trusts."""
    updater = client._updater
    data = _last_of(role, client)
    if updater is None or data is None:
        return None
    try:
        md = Metadata.from_bytes(data)
        trusted = updater._trusted_set
        if role == Root.type:
            result = md.signed.get_root_verification_result(
                trusted.root, md.signed_bytes, md.signatures
            )
            parts = [("the trusted root's keys", result.first), ("its own keys", result.second)]
            failed = [(what, r) for what, r in parts if not r.verified]
        else:
            delegator = (
                trusted.root if role in ("timestamp", "snapshot", "targets") else trusted.targets
            )
            failed = [("", delegator.get_verification_result(role, md.signed_bytes, md.signatures))]
    except Exception:
        return None
    lines = []
    for what, res in failed:
        of = f" of {what}" if what else ""
        lines.append(
            f"{len(res.signed)} of the {res.threshold} signatures it needs{of} "
            f"(valid from {_short(res.signed)}; none from {_short(res.unsigned)})"
        )
    return "; ".join(lines) or None
