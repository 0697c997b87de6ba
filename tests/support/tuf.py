"""Feeds with a TUF repository, made with the production tooling (``release.publish.tuf_repo``).

::

    feed = make_tuf_feed(tmp_path, ["0.1.0", "0.2.0"])   # stand-in builds trusting root v1
    with serve_directory(feed.path) as url: ...           # metadata at <url>/metadata

* One set of keys per process (:func:`default_tuf_keys`: root and targets 2 of 3, the release
  key, the online key) and one root v1 made from them, so that the builds that bake it are the
  same bytes in every test and packaged once (``tests.support.releases``).
* :func:`make_tuf_feed` makes a minisign-signed feed (``releases.json`` included: what a build
  of before TUF and install.sh read) whose ``metadata/`` starts from that root v1 and lists
  every release; each build trusts root v1 and knows ``repo`` (for the attestation rule).
* :func:`forge` writes metadata signed by whatever keys a test names (an attacker holding some
  of them), consistent-snapshot named, bypassing the tooling's threshold checks.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from securesystemslib.signer import Signer
from tuf.api.metadata import Metadata
from tuf.api.serialization.json import JSONSerializer

from release.publish import tuf_repo
from release.publish.tuf_keys import LocalKeys
from tests.support.installs import Install, bootstrap
from tests.support.releases import (
    Feed,
    KeyPair,
    default_keypair,
    make_release,
    serve_directory,
)

METADATA_URL = "https://mux.example/metadata"  # baked in; a feed reads its own metadata/


@functools.cache
def default_tuf_keys() -> LocalKeys:
    return LocalKeys.generate(Path(tempfile.mkdtemp(prefix="mux-test-tuf-keys-")))


# Root v1 is made once per process (same keys, same time: the same bytes, so the builds that
# bake it are packaged once); its timestamp and snapshot are re-made fresh for every feed.
_ROOT_TIME = datetime.now(UTC).replace(microsecond=0)


@functools.cache
def default_root() -> bytes:
    scratch = Path(tempfile.mkdtemp(prefix="mux-test-tuf-root-"))
    tuf_repo.create_local(scratch, default_tuf_keys(), now=_ROOT_TIME)
    data = tuf_repo.root_bytes(scratch, 1)
    shutil.rmtree(scratch)
    return data


@dataclass
class TufFeed(Feed):
    keys: LocalKeys = field(default_factory=default_tuf_keys)
    root_v1: bytes = b""

    @property
    def metadata(self) -> Path:
        return self.path / tuf_repo.METADATA_DIR

    def publish(self, *, now: datetime | None = None) -> list[str]:
        """List every release folder not yet listed; a new timestamp."""
        k = self.keys
        return tuf_repo.publish_feed(self.path, k.signers(k.RELEASE), k.signers(k.ONLINE), now=now)

    def refresh(self, *, expires_in: int = tuf_repo.DAY, now: datetime | None = None) -> None:
        tuf_repo.refresh(
            self.path, self.keys.signers(self.keys.ONLINE), expires_in=expires_in, now=now
        )

    def signers(self, *names: str) -> list[Signer]:
        return self.keys.signers(*names)


def tuf_build(repo: str = "") -> dict[str, Any]:
    """``build_standin`` settings of a build that trusts the process's root v1."""
    return {"tuf_root": default_root(), "tuf_metadata_url": METADATA_URL, "repo": repo}


def make_tuf_feed(
    tmp: Path,
    versions: Sequence[str] = ("0.1.0", "0.2.0"),
    *,
    protocols: Mapping[str, int] | None = None,
    repo: str = "",
    keypair: KeyPair | None = None,
    publish: bool = True,
) -> TufFeed:
    """A feed ``tmp/feed`` of stand-in releases, each build trusting root v1, whose TUF
    repository lists every release (unless ``publish`` is false)."""
    keypair = keypair or default_keypair()
    feed = TufFeed(path=Path(tmp) / "feed", keypair=keypair, root_v1=default_root())
    feed.path.mkdir(parents=True, exist_ok=True)
    add_repository(feed.path, publish=False)
    now = int(time.time())
    for number, version in enumerate(versions):
        feed.releases[version] = make_release(
            feed.path,
            version,
            protocol_version=(protocols or {}).get(version, 1),
            keypair=keypair,
            repo=repo,
            build=tuf_build(repo),
            signed_at=now - 3600 * (len(versions) - number),
        )
    if publish:
        feed.publish()
    return feed


def add_repository(folder: Path, *, publish: bool = True) -> None:
    """Give ``folder`` (a feed) a TUF repository from the process's root v1, fresh, listing
    every release folder in it (unless ``publish`` is false)."""
    keys = default_tuf_keys()
    tuf_repo.create_local(folder, keys, now=_ROOT_TIME)
    # The roles made with root v1 may be hours old: a fresh snapshot and timestamp first.
    tuf_repo.refresh(folder, keys.signers(keys.ONLINE))
    if publish:
        tuf_repo.publish_feed(folder, keys.signers(keys.RELEASE), keys.signers(keys.ONLINE))


def forge(folder: Path, md: Metadata[Any], signers: Sequence[Signer], *, name: str) -> Path:
    """Write ``md`` signed only by ``signers`` as ``metadata/<name>`` (an attacker's file)."""
    md.signatures.clear()
    for signer in signers:
        md.sign(signer, append=True)
    path = Path(folder) / tuf_repo.METADATA_DIR / name
    path.write_bytes(md.to_bytes(JSONSerializer(compact=False)) + b"\n")  # as the tooling writes
    return path


def later(hours: float) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(hours=hours)


# -- fixtures: a served TUF feed of 0.1.0 and 0.2.0 (protocol 2), 0.1.0 installed from it ------
# (import them into a test module, and name them in its __all__)


@pytest.fixture
def feed(tmp_path: Path) -> TufFeed:
    return make_tuf_feed(tmp_path / "f", ["0.1.0", "0.2.0"], protocols={"0.2.0": 2})


@pytest.fixture
def served(feed: TufFeed):
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: TufFeed, served: str) -> Install:
    return bootstrap(
        tmp_path, sandbox_env, source=served, version="0.1.0", public_key=feed.keypair.public_key
    )
