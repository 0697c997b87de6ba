"""A source's releases as its TUF repository lists them (docs/contracts.md, "TUF repository").

A build that trusts a TUF root (baked in by ``mux-release build --tuf-root``, or named by the
machine policy's ``tuf_root``) reads every source through that repository: which releases
exist, which is the newest and every file's length and sha256 come from verified TUF
metadata, and nothing else (a feed's ``releases.json``, GitHub's ``/releases/latest`` redirect
or its API) decides. :func:`tuf_spec` says where the repository is for a source:

* a feed (a folder or a URL): its own ``metadata/`` folder (a mirror copies it with the
  releases, so a mirror of the project's repository needs no key of its own);
* GitHub: the metadata URL the machine policy names (``tuf_metadata_url``, an Enterprise's
  or a mirror's), else ``MUX_TUF_METADATA_URL`` (tests), else the one baked into the build
  (the project's GitHub Pages), with release files from ``/releases/download/<tag>/``.

:class:`TufIndex` refreshes the repository once per source (:mod:`updater.trust.tuf_client`) and
answers from its :class:`~updater.trust.tuf_targets.SignedTargets`: the releases, their files
and their lifecycle records (:meth:`TufIndex.lifecycle`, what the source's
``lifecycle()`` returns).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from updater.config.policy import check_file_owner
from updater.config.settings import TUF_METADATA_URL_ENV
from updater.core.hints import listed_versions
from updater.errors import MuxError, ParseError, UsageError, VerificationError
from updater.files import NotReadable, read_small_file
from updater.formats import models
from updater.trust.layers import LAYER_TUF, layer_failure
from updater.trust.tuf_targets import ROOT_LIMIT

if TYPE_CHECKING:
    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.core.request import ReleaseRequest
    from updater.formats.lifecycle import SignedLifecycle
    from updater.net.client import HttpClient
    from updater.trust.tuf_client import TufClient
    from updater.trust.tuf_targets import SignedFile, SignedTargets


class TufSpec(NamedTuple):
    """Where a source's TUF repository is, and the root it is read with."""

    metadata_url: str  # an https:// (loopback http://) URL, or a folder
    root: bytes
    root_origin: str  # where the root came from, for messages
    state_dir: str  # the user's state dir: the trusted metadata is kept below it
    clock_ahead: float = 0.0  # seconds added to the clock for expiry (never negative)


def _state_dir(settings: Settings) -> str:
    if settings.state_dir is not None:
        return os.fspath(settings.state_dir)
    from platformdirs import user_state_dir  # (as feed_seq: the state dir install.sh computes)

    return user_state_dir("mux", appauthor=False)


def _read_root(path: str, *, owner: str) -> bytes:
    """A root.json named by the policy (held to the policy's ownership rules: ``owner``
    ``root``, or ``user`` for a development policy) or by MUX_TUF_ROOT (``owner`` "")."""

    def inspect(info: os.stat_result) -> None:
        if owner:
            check_file_owner(path, info, fixed=owner == "root")

    try:
        data = read_small_file(path, ROOT_LIMIT, inspect=inspect)
    except NotReadable as exc:
        raise VerificationError(f"the TUF root {path} cannot be used: {exc}") from None
    if data is None:
        raise VerificationError(f"the TUF root {path} does not exist")
    return data


def tuf_spec(settings: Settings, build: BuildInfo, *, feed: str | None) -> TufSpec | None:
    """The TUF repository a source is read through (the module docstring); None for a
    build that trusts no TUF root (one of before TUF, or a development checkout)."""
    if settings.tuf_root_file:
        root = _read_root(settings.tuf_root_file, owner=settings.tuf_root_owner)
        origin = settings.tuf_root_file
    elif build.trust.tuf_root:
        root = build.trust.tuf_root.encode("utf-8")
        origin = "this build"
    else:
        return None
    if feed is not None:
        url = f"{feed.rstrip('/')}/{models.TUF_METADATA_DIR}"
    else:
        url = settings.tuf_metadata_url or build.trust.tuf_metadata_url
        if not url:
            raise UsageError(
                "this mux trusts a TUF root but knows no metadata URL for GitHub",
                hint=f"the machine policy names one (tuf_metadata_url), or {TUF_METADATA_URL_ENV}",
            )
    return TufSpec(
        url.rstrip("/"), root, origin, _state_dir(settings), max(0.0, settings.tuf_clock_ahead)
    )


class TufIndex:
    """A source's TUF repository, refreshed once, and what it says of the releases."""

    def __init__(self, spec: TufSpec, *, client: HttpClient | None, lock_wait: float) -> None:
        self.spec = spec
        # deferred (+125 ms, 123 modules: python-tuf, securesystemslib, urllib3): only a build
        # that trusts a TUF root reads through it, and every other check would pay for it
        from updater.sources.tuf_fetcher import open_client

        self._client: TufClient = open_client(
            spec.metadata_url,
            spec.state_dir,
            spec.root,
            client=client,
            lock_wait=lock_wait,
            clock_ahead=spec.clock_ahead,
        )
        self._targets: SignedTargets | None = None

    @property
    def location(self) -> str:
        return self.spec.metadata_url

    def targets(self) -> SignedTargets:
        if self._targets is None:
            self._targets = self._client.refresh()
        return self._targets

    def resolve(self, request: ReleaseRequest) -> str:
        """The tag ``request`` names (it must be on offer), or the newest on offer."""
        targets = self.targets()
        tag = request.tag()
        if tag is not None:
            if not targets.lists(tag):
                listed = sorted((models.parse_tag(t) for t in targets.tags()), reverse=True)
                raise MuxError(
                    f"the signed TUF targets of {self.location} do not list {tag}",
                    hint=listed_versions(str(version) for version in listed),
                )
            return tag
        newest = targets.newest(include_pre=request.include_pre)
        if newest is None:
            what = "release" if request.include_pre else "stable release"
            raise MuxError(
                f"the signed TUF targets of {self.location} list no {what}",
                hint="pass --version X (or --pre) to take a pre-release, or check the source",
            )
        return newest

    def file(self, tag: str, name: str) -> SignedFile | None:
        return self.targets().file(tag, name)

    def lifecycle(self) -> SignedLifecycle:
        """Each release's lifecycle record from the verified targets; a record the client's
        parser refuses fails the whole answer (exit 3), as a bad record in a feed's index."""
        targets = self.targets()
        try:
            return targets.lifecycle()
        except ParseError as exc:
            raise layer_failure(
                LAYER_TUF,
                f"the signed TUF targets of {self.location} carry a lifecycle record mux cannot "
                f"read: {exc.message}",
                hint="the publisher's tooling wrote a record this mux does not understand; "
                "report it",
            ) from None
