"""Real releases, feeds and a loopback server for end-to-end tests.

Everything here goes through the production code (``release.build.standin``,
``release.publish.package``, ``release.publish.signing``), so a test that installs or updates
from these releases exercises the same bytes a real release would have. Typical use::

    from tests.support.releases import make_feed, make_keypair, make_release, serve_directory

    def test_update(tmp_path):
        feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])     # signed, stand-in builds
        with serve_directory(feed.path) as base_url:                 # http://127.0.0.1:<port>
            ...  # MUX_UPDATE_SOURCE=base_url, trusted key = feed.keypair.public_key

    def test_lying_build(tmp_path):
        keypair = make_keypair(tmp_path)
        release_dir = make_release(tmp_path / "feed", "0.2.0", protocol_version=1,
                                   keypair=keypair, build={"report_version": "0.3.0"})

What you get:

* :func:`make_keypair` makes a minisign key pair with our generator (password-protected,
  with cheap scrypt settings so signing takes milliseconds; the real ``minisign`` accepts it).
* :func:`make_release` builds stand-in builds (``release.build.standin.build_standin``: a ``sh``
  launcher running this checkout's ``updater`` with the test's Python), packages them into
  ``<feed>/v<version>/`` (archives, ``manifest.json``, ``SHA256SUMS``), signs
  ``SHA256SUMS.minisig`` and rewrites ``<feed>/releases.json``. ``build={...}`` overrides
  ``build_standin`` keyword arguments (``report_version``, ``report_target``, ``python``,
  ``minisign_keys``, ``repo``); ``sign=False`` leaves the release unsigned; ``extra_files``
  are copied in and covered by ``SHA256SUMS`` (add a Sigstore bundle this way, or later with
  ``release.publish.package.rehash_sums`` and then :func:`sign_release_dir`). ``post_build`` is
  called with each build folder before it is packaged (``tests.support.standins``).
* :func:`make_feed` makes a whole feed of several releases with one key pair (given, else
  this process's :func:`default_keypair`). A release asked for again with the same build
  settings, targets and release time is packaged once per process and copied (then signed
  with its own timestamp): the tests' feeds cost a copy, not a build.
* :func:`sign_index` (re)signs a feed's ``releases.json`` (``releases.json.minisig``, through
  ``release.publish.feed``) with a chosen ``seq``, ``expires`` and ``timestamp``: stale, rolled-back
  and expired feeds. :func:`make_release` and :func:`make_feed` sign the index as they go
  (``seq`` 1, 2, ... unless told), valid for 14 days.
* :func:`serve_directory` serves a folder over real HTTP on 127.0.0.1;
  :func:`serve_directory_recording` does the same and records every request's path.
* :func:`flip_byte` corrupts one byte of a file in place (tamper tests).
* :func:`sign_release_dir` (re)signs a release, e.g. with another key pair after
  ``make_release(..., sign=False)`` for "signed by an untrusted key" cases; ``timestamp``
  and ``version`` set its trusted comment (old releases, mix-and-match).

Build info baked into each build trusts ``keypair.public_key`` (unless ``build`` overrides
``minisign_keys``), targets default to this machine's target, and ``repo`` to ``""``.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import http.server
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from release.build.standin import build_standin
from release.publish.feed import DEFAULT_EXPIRES_IN, SignedIndex, sign_feed_index, write_feed_index
from release.publish.package import (
    package_release,
    rehash_sums,
    sign_release,
    trusted_comment_for,
)
from release.publish.signing import SecretKey, generate_keypair
from release.rehearsal.serve import serve_directory as serve_directory  # re-exported for tests
from release.rehearsal.serve import serve_handler
from updater.config.targets import detect_target
from updater.formats.minisign import PublicKey
from updater.formats.models import (
    MANIFEST_NAME,
    SUMS_NAME,
    SUMS_SIGNATURE_NAME,
    attestation_name,
    parse_manifest,
    tag_for,
)
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME

TEST_PASSWORD = "correct horse battery staple"
# Cheap scrypt settings (N=1024, r=8, p=1): stored in the key, so minisign reads them back.
_TEST_OPSLIMIT = 32768
_TEST_MEMLIMIT = 1 << 24
RELEASED_AT = "2024-01-01T00:00:00Z"


@dataclass(frozen=True)
class KeyPair:
    secret_key_path: Path
    public_key: str  # the base64 line of the .pub file (what build info and -P take)
    password: str | None
    public_key_path: Path  # the full .pub file, for `minisign -V -p`

    def secret_key(self) -> SecretKey:
        return SecretKey.parse(self.secret_key_path.read_bytes(), self.password)

    @property
    def key_id(self) -> str:
        return PublicKey.parse(self.public_key).key_id


@dataclass
class Feed:
    path: Path
    keypair: KeyPair
    releases: dict[str, Path] = field(default_factory=dict)  # version -> release folder


def make_keypair(
    tmp: Path, *, password: str | None = TEST_PASSWORD, name: str = "minisign"
) -> KeyPair:
    """A fresh key pair in ``tmp/<name>.key`` and ``tmp/<name>.pub``."""
    tmp = Path(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    secret, public_text = generate_keypair(
        password, opslimit=_TEST_OPSLIMIT, memlimit=_TEST_MEMLIMIT
    )
    secret_path = tmp / f"{name}.key"
    public_path = tmp / f"{name}.pub"
    secret_path.write_bytes(secret)
    secret_path.chmod(0o600)
    public_path.write_text(public_text, encoding="utf-8")
    return KeyPair(
        secret_key_path=secret_path,
        public_key=PublicKey.parse(public_text).to_base64(),
        password=password,
        public_key_path=public_path,
    )


def attest_release(
    release_dir: Path, version: str, sigstore: Any, keypair: KeyPair, repo: str
) -> Path:
    """Attest every file of a release with ``sigstore`` (a throwaway
    :class:`~release.rehearsal.fake_sigstore.FakeSigstore`), as the release workflow does,
    list the bundle in ``SHA256SUMS`` and sign it again; returns the bundle's path."""
    release_dir = Path(release_dir)
    subjects = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release_dir.iterdir()
        if p.name not in (SUMS_NAME, SUMS_SIGNATURE_NAME)
    }
    bundle = release_dir / attestation_name(version)
    bundle.write_bytes(sigstore.attest(subjects, repository=repo, ref=f"refs/tags/v{version}"))
    rehash_sums(release_dir)
    sign_release(release_dir, keypair.secret_key())
    return bundle


def sign_release_dir(
    release_dir: Path,
    keypair: KeyPair,
    *,
    timestamp: int | None = None,
    version: str | None = None,
) -> Path:
    """(Re)sign a release's ``SHA256SUMS``; returns the ``SHA256SUMS.minisig`` path.

    ``timestamp`` and ``version`` replace what the trusted comment would say (the clock,
    the manifest's version): an older release, or one signature moved onto another release.
    """
    if timestamp is None and version is None:
        return sign_release(release_dir, keypair.secret_key())
    release_dir = Path(release_dir)
    if version is None:
        version = parse_manifest((release_dir / MANIFEST_NAME).read_bytes()).version
    comment = trusted_comment_for(version, int(time.time()) if timestamp is None else timestamp)
    path = release_dir / SUMS_SIGNATURE_NAME
    path.write_bytes(keypair.secret_key().sign((release_dir / SUMS_NAME).read_bytes(), comment))
    return path


def sign_index(
    feed_dir: Path,
    keypair: KeyPair,
    *,
    seq: int | None = None,
    expires: int | None = None,
    timestamp: int | None = None,
    refresh: bool = True,
    prerelease: Mapping[str, bool] | None = None,
    new_feed: bool | None = None,
) -> SignedIndex:
    """Sign ``feed_dir/releases.json`` as ``mux-release feed`` does (``refresh``: as it is).

    ``seq`` defaults to the previous signature's plus one; ``timestamp`` to now; ``expires``
    (a Unix time, may be in the past) to 14 days after ``timestamp``. ``new_feed`` defaults
    to whether the folder has no signature yet (the feeds built here are new: the first
    index is ``mux-release feed --new-feed``).
    """
    if new_feed is None:
        new_feed = not refresh and not (Path(feed_dir) / FEED_SIGNATURE_NAME).exists()
    now = int(time.time()) if timestamp is None else timestamp
    if expires is not None and expires <= now and timestamp is None:
        now = expires - 3600  # an index that expired: signed an hour before it did
    expires_in = DEFAULT_EXPIRES_IN if expires is None else expires - now
    return sign_feed_index(
        feed_dir,
        keypair.secret_key(),
        expires_in=expires_in,
        refresh=refresh,
        seq=seq,
        new_feed=new_feed,
        now=now,
        prerelease=dict(prerelease) if prerelease is not None else None,
    )


def make_release(
    feed_dir: Path,
    version: str,
    *,
    protocol_version: int,
    keypair: KeyPair,
    targets: Sequence[str] | None = None,
    repo: str = "",
    prerelease: bool = False,
    sign: bool = True,
    released_at: str = RELEASED_AT,
    extra_files: Sequence[Path] = (),
    build: Mapping[str, Any] | None = None,
    signed_at: int | None = None,
    index_seq: int | None = None,
    index_expires: int | None = None,
    post_build: Callable[[Path], None] | None = None,
    release_notes: str = "",
) -> Path:
    """Build, package and sign ``v<version>`` into ``feed_dir``; returns the release folder.

    ``release_notes`` go into its manifest, as ``mux-release package --notes`` puts them.

    ``signed_at`` is the signed timestamp of its ``SHA256SUMS.minisig`` (default: now).
    The feed's ``releases.json`` is rewritten and signed (``index_seq``: default the previous
    plus one; ``index_expires``: a Unix time, default in 14 days); with ``sign=False``
    neither is signed.
    """
    feed_dir = Path(feed_dir)
    feed_dir.mkdir(parents=True, exist_ok=True)
    release_dir = feed_dir / tag_for(version)
    settings: dict[str, Any] = {
        "version": version,
        "protocol_version": protocol_version,
        "repo": repo,
        "minisign_keys": [keypair.public_key],
        **(build or {}),
    }
    targets = tuple(targets or (detect_target(),))
    if post_build is None and not extra_files:
        _packaged_once(release_dir, settings, targets, released_at, release_notes)
    else:
        _package(
            release_dir, settings, targets, released_at, post_build, extra_files, release_notes
        )
    if not sign:
        write_feed_index(feed_dir, prerelease={tag_for(version): prerelease})
        return release_dir
    sign_release_dir(release_dir, keypair, timestamp=signed_at)
    sign_index(
        feed_dir,
        keypair,
        seq=index_seq,
        expires=index_expires,
        refresh=False,
        prerelease={tag_for(version): prerelease},
    )
    return release_dir


def _package(
    release_dir: Path,
    settings: Mapping[str, Any],
    targets: Sequence[str],
    released_at: str,
    post_build: Callable[[Path], None] | None = None,
    extra_files: Sequence[Path] = (),
    release_notes: str = "",
) -> None:
    with tempfile.TemporaryDirectory(prefix="mux-test-builds-") as scratch:
        build_dirs = [build_standin(Path(scratch), target=t, **settings) for t in targets]
        for folder in build_dirs if post_build else ():
            post_build(folder)
        package_release(
            build_dirs,
            release_dir,
            released_at=released_at,
            extra_files=extra_files,
            release_notes=release_notes,
        )


# Packaged releases (builds, archives, manifest, SHA256SUMS; not signed), by what they were
# made from: the same release asked for again, in any test of this process, is a copy of the
# first (its bytes do not depend on the folder or the time it was made in), then signed.
_PACKAGED: dict[str, Path] = {}


def _packaged_once(
    release_dir: Path,
    settings: Mapping[str, Any],
    targets: Sequence[str],
    released_at: str,
    release_notes: str = "",
) -> None:
    key = json.dumps(
        [dict(settings), list(targets), released_at, release_notes], sort_keys=True, default=str
    )
    pristine = _PACKAGED.get(key)
    if pristine is None:
        pristine = _cache_root() / str(len(_PACKAGED)) / release_dir.name
        _package(pristine, settings, targets, released_at, release_notes=release_notes)
        _PACKAGED[key] = pristine
    if release_dir.exists() and any(release_dir.iterdir()):
        _package(release_dir, settings, targets, released_at)  # refused, as package_release does
    shutil.copytree(pristine, release_dir, symlinks=True, dirs_exist_ok=True)


@functools.cache
def _cache_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="mux-test-releases-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.cache
def default_keypair() -> KeyPair:
    """The key pair of every feed that is not given one (one per process, so that the same
    release asked for by many tests is packaged once: :func:`_packaged_once`)."""
    return make_keypair(_cache_root() / "keys")


def make_feed(
    tmp: Path,
    versions: Sequence[str] = ("0.1.0", "0.2.0"),
    *,
    protocol_version: int = 1,
    protocols: Mapping[str, int] | None = None,
    prereleases: Sequence[str] = (),
    keypair: KeyPair | None = None,
    targets: Sequence[str] | None = None,
    repo: str = "",
    signed_at: Mapping[str, int] | None = None,
    post_build: Callable[[Path], None] | None = None,
    release_notes: Mapping[str, str] | None = None,
) -> Feed:
    """A feed folder ``tmp/feed`` with one signed release per version.

    ``protocols`` gives a version its own protocol version (default ``protocol_version``);
    versions listed in ``prereleases`` are marked prerelease in ``releases.json``. Each
    release's signed timestamp is ``signed_at[version]``, else one hour apart in the order
    given, the last an hour ago (so that order never depends on the clock's seconds). The
    index is signed after each release: ``seq`` ends at ``len(versions)``.
    ``release_notes`` gives a version notes in its manifest.
    """
    now = int(time.time())
    tmp = Path(tmp)
    keypair = keypair or default_keypair()
    feed = Feed(path=tmp / "feed", keypair=keypair)
    for number, version in enumerate(versions):
        feed.releases[version] = make_release(
            feed.path,
            version,
            protocol_version=(protocols or {}).get(version, protocol_version),
            keypair=keypair,
            targets=targets,
            repo=repo,
            prerelease=version in prereleases,
            signed_at=(signed_at or {}).get(version, now - 3600 * (len(versions) - number)),
            post_build=post_build,
            release_notes=(release_notes or {}).get(version, ""),
        )
    if not versions:
        feed.path.mkdir(parents=True, exist_ok=True)
        sign_index(feed.path, keypair, refresh=False)
    return feed


def flip_byte(path: Path, position: int = -1) -> None:
    """Invert one byte of ``path`` in place (default: the last one)."""
    data = bytearray(Path(path).read_bytes())
    data[position] ^= 0xFF
    Path(path).write_bytes(bytes(data))


@contextmanager
def serve_directory_recording(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Like :func:`serve_directory`; also yields the list of request paths, in order."""
    paths: list[str] = []

    class Recording(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def send_head(self):  # type: ignore[no-untyped-def]
            paths.append(self.path)
            return super().send_head()

    with serve_handler(functools.partial(Recording, directory=str(path))) as url:
        yield url, paths


def signed_pair(root: Path, old: str, new: str) -> Feed:
    """A feed folder under ``root`` with ``old`` then ``new`` (protocol 1), signed an hour
    apart by a new key that their builds trust."""
    keypair = make_keypair(root / "keys")
    feed = Feed(path=root / "feed", keypair=keypair)
    now = int(time.time())
    for number, version in enumerate((old, new)):
        feed.releases[version] = make_release(
            feed.path,
            version,
            protocol_version=1,
            keypair=keypair,
            signed_at=now - 3600 * (2 - number),
            build={"minisign_keys": [keypair.public_key]},
        )
    return feed
