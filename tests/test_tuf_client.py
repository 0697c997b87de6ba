"""mux's TUF client (``updater.trust.tuf_client`` over ``updater.sources.tuf_fetcher``) against
repositories made by ``release.publish.tuf_repo``: served on loopback through mux's own
HttpClient, or read from a folder. Each refusal is one line naming the role and why, and
leaves the trusted metadata as it was."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tuf.api.metadata import Metadata, Root, Snapshot, Targets, Timestamp

from release.publish import tuf_repo
from release.publish.tuf_keys import LocalKeys
from release.rehearsal.serve import serve_directory
from tests.support.releases import default_keypair, make_feed
from tests.support.tuf import forge
from updater.config.settings import HttpSettings
from updater.errors import MuxError, NetworkError, VerificationError
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.sources.feed import FeedSource
from updater.sources.tuf_fetcher import FolderFetcher, HttpFetcher, open_client
from updater.sources.tuf_index import TufIndex, TufSpec
from updater.trust.layers import VerificationLog
from updater.trust.pipeline import FilesRequest, verify_release_files, verify_release_metadata
from updater.trust.trust_policy import TrustPolicy
from updater.trust.tuf_client import TufClient, TufOptions
from updater.urls import url_origin

DAY = 24 * 3600


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> LocalKeys:
    return LocalKeys.generate(tmp_path_factory.mktemp("tuf-keys"))


@pytest.fixture
def repo(tmp_path: Path, keys: LocalKeys) -> Path:
    """A feed of two releases and its TUF repository (root v1, both releases listed)."""
    feed = make_feed(tmp_path, ["0.1.0", "0.2.0"]).path
    tuf_repo.create_local(feed, keys)
    tuf_repo.publish_feed(feed, keys.signers(keys.RELEASE), keys.signers(keys.ONLINE))
    return feed


def root_v1(repo: Path) -> bytes:
    return (repo / "metadata" / "1.root.json").read_bytes()


def folder_client(repo: Path, state: Path, *, root: bytes | None = None, **kw) -> TufClient:
    return TufClient(
        str(repo / "metadata"),
        str(state),
        fetcher=FolderFetcher(),
        bootstrap=root or root_v1(repo),
        options=TufOptions(**kw),
    )


def trusted_files(state: Path) -> dict[str, str]:
    return {
        str(p.relative_to(state)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(state.rglob("*.json"))
    }


def one_line(exc: pytest.ExceptionInfo[Exception]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_the_repository_lists_every_release_file_and_the_newest(repo: Path, tmp_path: Path) -> None:
    signed = folder_client(repo, tmp_path / "state").refresh()
    assert signed.tags() == ["v0.1.0", "v0.2.0"]
    assert signed.newest(include_pre=False) == "v0.2.0"
    on_disk = {f"{d.name}/{p.name}": p for d in repo.glob("v*") for p in d.iterdir() if p.is_file()}
    assert set(signed.files) == set(on_disk)
    for path, file in signed.files.items():
        data = on_disk[path].read_bytes()
        assert (file.length, file.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert file.facts["version"] == path.split("/")[0][1:]
        assert file.facts["protocol_version"] == 1
        assert file.role == tuf_repo.RELEASE_ROLE
    archive = next(f for p, f in signed.files.items() if p.endswith(".tar.gz"))
    assert archive.facts["kind"] == "archive" and archive.facts["target"]
    # What this machine now trusts is kept in the state dir, as python-tuf lays it out.
    assert {"root.json", "timestamp.json", "snapshot.json", "targets.json"} <= {
        p.name for p in (tmp_path / "state").iterdir()
    }


def test_every_request_goes_through_mux_s_http_client(repo: Path, tmp_path: Path) -> None:
    """The fetcher sends through HttpClient: its host rules refuse a redirect elsewhere."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        path = repo / request.url.path.lstrip("/")
        if path.is_file():
            return httpx.Response(200, content=path.read_bytes())
        return httpx.Response(404)

    base = "https://mirror.example"
    http = HttpClient(
        policy=HostPolicy(allowed_hosts=frozenset({url_origin(base)})),
        settings=HttpSettings(retries=0),
        transport=httpx.MockTransport(handler),
    )
    client = TufClient(
        f"{base}/metadata",
        str(tmp_path / "state"),
        fetcher=HttpFetcher(http),
        bootstrap=root_v1(repo),
    )
    assert client.refresh().newest(include_pre=False) == "v0.2.0"
    # Consistent snapshots: only timestamp.json by its plain name (and the next root probe).
    assert "/metadata/timestamp.json" in seen and "/metadata/2.root.json" in seen
    assert any(p.endswith(".snapshot.json") and p.split("/")[-1][0].isdigit() for p in seen)
    assert "/metadata/snapshot.json" not in seen and "/metadata/targets.json" not in seen


def http_client(url: str, state: Path, root: bytes) -> TufClient:
    """The TUF client ``mux update`` makes for the metadata at ``url`` (a loopback server),
    its trusted metadata kept below the state dir ``state`` as mux keeps it."""
    http = HttpClient(
        policy=HostPolicy(allowed_hosts=frozenset({url_origin(url)})), plain_loopback_only=True
    )
    return open_client(f"{url}/metadata", str(state), root, client=http, lock_wait=5, clock_ahead=0)


def kept(state: Path) -> list[Path]:
    """The folders of trusted metadata below the state dir."""
    return sorted(p for p in (state / "tuf").iterdir() if p.is_dir())


def test_over_real_http_and_metadata_kept_per_repository(repo: Path, tmp_path: Path) -> None:
    with serve_directory(repo) as url:
        assert http_client(url, tmp_path / "state", root_v1(repo)).refresh().tags() == [
            "v0.1.0",
            "v0.2.0",
        ]
    (folder,) = kept(tmp_path / "state")
    assert (folder / "timestamp.json").stat().st_mode & 0o077 == 0
    assert folder.stat().st_mode & 0o077 == 0


def withdraw(repo: Path, keys: LocalKeys, tag: str = "v0.2.0") -> None:
    tuf_repo.set_lifecycle(
        repo,
        tag,
        {"withdrawn": {"reason": "bad"}},
        keys.signers(keys.RELEASE),
        keys.signers(keys.ONLINE),
    )


def lifecycle(signed, tag: str = "v0.2.0") -> dict:
    return signed.files[f"{tag}/manifest.json"].facts.get("lifecycle") or {}


def test_every_url_of_one_repository_shares_one_rollback_floor(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    """Issue 35, finding 3: the floor was kept per URL, so the same repository under another
    URL (a second mirror, ``localhost`` for ``127.0.0.1``) started again from root v1, and a
    mirror holding an older, still valid timestamp hid a withdrawal already seen. The root
    rotated since the bootstrap: the state still belongs to the root v1 the client starts
    from."""
    new = LocalKeys.generate(tmp_path / "new")
    tuf_repo.rotate(
        repo,
        [tuf_repo.KeyChange(Root.type, add=[new.public("root-1")])],
        keys.signers("root-1", "root-2") + new.signers("root-1"),
    )
    tuf_repo.refresh(repo, keys.signers(keys.ONLINE))
    mirror = tmp_path / "mirror"
    shutil.copytree(repo, mirror)  # a keyless mirror, synced before the withdrawal
    withdraw(repo, keys)
    state = tmp_path / "state"
    with serve_directory(repo) as a, serve_directory(mirror) as b:
        seen = http_client(a, state, root_v1(repo)).refresh()
        assert seen.versions.root == 2 and lifecycle(seen)["withdrawn"] == {"reason": "bad"}
        before = trusted_files(state)
        # Alone, the mirror verifies: a fresh client takes it, the withdrawal unseen.
        alone = http_client(b, tmp_path / "fresh", root_v1(repo)).refresh()
        assert "withdrawn" not in lifecycle(alone)
        # After the withdrawal was seen at A, the mirror's older state is a rollback.
        with pytest.raises(VerificationError) as refused:
            http_client(b, state, root_v1(repo)).refresh()
        line = one_line(refused)
        assert "timestamp metadata" in line and "went back" in line
        assert trusted_files(state) == before
        # localhost for 127.0.0.1: the same server, the same repository, the same state.
        same = a.replace("127.0.0.1", "localhost")
        assert lifecycle(http_client(same, state, root_v1(repo)).refresh())["withdrawn"]
    assert len(kept(state)) == 1


def test_repositories_with_different_roots_keep_apart(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    for _ in range(3):
        tuf_repo.refresh(repo, keys.signers(keys.ONLINE))
    other_keys = LocalKeys.generate(tmp_path / "other-keys")
    other = make_feed(tmp_path / "other", ["0.1.0"]).path
    tuf_repo.create_local(other, other_keys)
    tuf_repo.publish_feed(
        other, other_keys.signers(other_keys.RELEASE), other_keys.signers(other_keys.ONLINE)
    )
    state = tmp_path / "state"
    with serve_directory(repo) as a, serve_directory(other) as b:
        first = http_client(a, state, root_v1(repo)).refresh()
        second = http_client(b, state, root_v1(other)).refresh()
    # The other repository's timestamp is lower, and no rollback: its state is its own.
    assert second.versions.timestamp < first.versions.timestamp
    assert second.tags() == ["v0.1.0"] and first.tags() == ["v0.1.0", "v0.2.0"]
    assert len(kept(state)) == 2


def earlier_folder(state: Path, url: str) -> Path:
    """Where mux up to a152f27 kept the trusted metadata of ``<url>/metadata``: per URL."""
    text = f"{url}/metadata"
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", text.split("://", 1)[-1]).strip("_")[-60:]
    return state / "tuf" / f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def test_the_state_an_earlier_mux_kept_per_url_is_carried_over(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    """The first run of the per-repository layout starts from the highest floor the earlier
    per-URL folders of the repository reached (they stay as they were); so does a client
    bootstrapped from a later root of a repository it already follows."""
    mirror = tmp_path / "mirror"
    shutil.copytree(repo, mirror)
    withdraw(repo, keys)
    state = tmp_path / "state"
    with serve_directory(repo) as a, serve_directory(mirror) as b:
        earlier = {url: earlier_folder(state, url) for url in (b, a)}
        for url, folder in earlier.items():
            http = HttpClient(
                policy=HostPolicy(allowed_hosts=frozenset({url_origin(url)})),
                plain_loopback_only=True,
            )
            client = TufClient(
                f"{url}/metadata", str(folder), fetcher=HttpFetcher(http), bootstrap=root_v1(repo)
            )
            client.refresh()
        held = {url: trusted_files(folder) for url, folder in earlier.items()}
        # An earlier mux refreshing A's folder holds its lock: the copy waits for it.
        busy = os.open(earlier[a], os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(busy, fcntl.LOCK_EX)
        threading.Timer(0.5, os.close, [busy]).start()
        started = time.monotonic()
        with pytest.raises(VerificationError) as refused:
            http_client(b, state, root_v1(repo)).refresh()
        assert time.monotonic() - started >= 0.5
        assert "timestamp metadata" in one_line(refused) and "went back" in one_line(refused)
        (first,) = set(kept(state)) - set(earlier.values())
        assert trusted_files(first)["timestamp.json"] == held[a]["timestamp.json"]
        assert {url: trusted_files(folder) for url, folder in earlier.items()} == held

        # Root v2 is published; the client that started from v1 follows it at A. A build (or
        # a machine policy) that starts from root v2 then shares the floor reached with v1.
        tuf_repo.rotate(repo, [tuf_repo.KeyChange(Root.type)], keys.signers("root-1", "root-2"))
        assert http_client(a, state, root_v1(repo)).refresh().versions.root == 2
        root_v2 = (repo / "metadata" / "2.root.json").read_bytes()
        with pytest.raises(VerificationError) as refused:
            http_client(b, state, root_v2).refresh()
        assert "went back" in one_line(refused)
    (second,) = set(kept(state)) - set(earlier.values()) - {first}
    assert trusted_files(second)["timestamp.json"] == trusted_files(first)["timestamp.json"]


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files another user owns")
def test_trusted_metadata_another_user_owns_is_never_used(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    """A folder of the state dir that is not this user's is neither carried over nor read."""
    mirror = tmp_path / "mirror"
    shutil.copytree(repo, mirror)
    withdraw(repo, keys)
    state = tmp_path / "state"
    with serve_directory(repo) as a, serve_directory(mirror) as b:
        theirs = earlier_folder(state, a)
        http = HttpClient(
            policy=HostPolicy(allowed_hosts=frozenset({url_origin(a)})), plain_loopback_only=True
        )
        TufClient(
            f"{a}/metadata", str(theirs), fetcher=HttpFetcher(http), bootstrap=root_v1(repo)
        ).refresh()
        for path in [theirs, *theirs.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        # Its floor is not taken: the older mirror is read as by a fresh client.
        assert "withdrawn" not in lifecycle(http_client(b, state, root_v1(repo)).refresh())
        (mine,) = set(kept(state)) - {theirs}
        os.chown(mine, NOBODY, NOBODY)
        with pytest.raises(MuxError) as refused:
            http_client(a, state, root_v1(repo)).refresh()
        assert f"belongs to another user (uid {NOBODY})" in one_line(refused)


def test_a_build_with_root_v1_follows_three_rotations_one_revoking_a_key(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    state = tmp_path / "state"
    folder_client(repo, state).refresh()
    new = [LocalKeys.generate(tmp_path / f"new-{n}") for n in range(2)]
    old_root = [keys.public(n).keyid for n in keys.ROOT]
    # 2: a fourth root key joins; 3: root-1 is revoked (2 of root-2, root-3, new-0);
    # 4: the online key is replaced.
    tuf_repo.rotate(
        repo,
        [tuf_repo.KeyChange(Root.type, add=[new[0].public("root-1")])],
        keys.signers("root-1", "root-2", "root-3") + new[0].signers("root-1"),
    )
    tuf_repo.rotate(
        repo,
        [tuf_repo.KeyChange(Root.type, remove=[old_root[0][:12]])],
        keys.signers("root-2", "root-3"),
    )
    tuf_repo.rotate(
        repo,
        [
            tuf_repo.KeyChange(
                Timestamp.type, add=[new[1].public("online")], remove=[keys.public("online").keyid]
            ),
            tuf_repo.KeyChange(
                Snapshot.type, add=[new[1].public("online")], remove=[keys.public("online").keyid]
            ),
        ],
        keys.signers("root-2") + new[0].signers("root-1"),
    )
    assert tuf_repo.Repository(repo).root_versions() == [1, 2, 3, 4]
    tuf_repo.refresh(repo, new[1].signers("online"))
    # A fresh client shipped with root v1, and the one that already trusts v1, both follow.
    for where in (tmp_path / "fresh", state):
        signed = folder_client(repo, where).refresh()
        assert signed.versions.root == 4 and signed.newest(include_pre=False) == "v0.2.0"
    # The revoked key no longer counts: root v5 signed by root-1 and root-2 is refused.
    v5 = Metadata.from_bytes((repo / "metadata" / "4.root.json").read_bytes())
    v5.signed.version = 5
    forge(repo, v5, keys.signers("root-1", "root-2"), name="5.root.json")
    before = trusted_files(state)
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, state).refresh()
    line = one_line(refused)
    assert "root metadata" in line and "not signed by enough trusted keys" in line
    assert trusted_files(state) == before


def test_one_key_of_a_two_of_three_role_signs_nothing(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    state = tmp_path / "state"
    folder_client(repo, state).refresh()
    before = trusted_files(state)
    # An attacker with one targets key (and the online key) moves the delegation to a key of
    # their own: targets v2 signed by targets-1 only, in a snapshot signed correctly.
    targets = tuf_repo.Repository(repo).targets()
    targets.signed.version += 1
    forge(repo, targets, keys.signers("targets-1"), name="2.targets.json")
    tuf_repo.refresh(repo, keys.signers(keys.ONLINE))
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, state).refresh()
    line = one_line(refused)
    assert "targets metadata" in line
    assert "1 of the 2 signatures it needs" in line
    assert keys.public("targets-1").keyid[:8] in line
    # And a root v2 signed by one root key.
    v2 = Metadata.from_bytes(root_v1(repo))
    v2.signed.version = 2
    forge(repo, v2, keys.signers("root-3"), name="2.root.json")
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, tmp_path / "fresh").refresh()
    assert "root metadata" in one_line(refused)
    # The refused targets was never written; the timestamp and snapshot that did verify are
    # kept (the specification's rule: they are the floor of the next rollback check).
    after = trusted_files(state)
    assert {k: after[k] for k in ("root.json", "targets.json", "release-workflow.json")} == {
        k: before[k] for k in ("root.json", "targets.json", "release-workflow.json")
    }


def test_a_frozen_mirror_is_refused_once_the_timestamp_expires(repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    folder_client(repo, state).refresh()
    before = trusted_files(state)
    expires = Metadata.from_bytes((repo / "metadata" / "timestamp.json").read_bytes())
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, state, clock_ahead=DAY + 60).refresh()
    line = one_line(refused)
    assert "timestamp metadata" in line and "expired at" in line
    assert f"{expires.signed.expires:%Y-%m-%d %H:%M}" in line
    assert trusted_files(state) == before
    # Within the day it is still good.
    folder_client(repo, state, clock_ahead=DAY - 3600).refresh()


def test_the_timestamp_never_goes_back(repo: Path, tmp_path: Path, keys: LocalKeys) -> None:
    state = tmp_path / "state"
    old = (repo / "metadata" / "timestamp.json").read_bytes()
    tuf_repo.refresh(repo, keys.signers(keys.ONLINE))
    folder_client(repo, state).refresh()
    before = trusted_files(state)
    (repo / "metadata" / "timestamp.json").write_bytes(old)  # a mirror replays yesterday's
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, state).refresh()
    line = one_line(refused)
    assert "timestamp metadata" in line and "went back" in line
    assert trusted_files(state) == before


def test_a_snapshot_the_timestamp_does_not_name_is_refused(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    """Mix and match: a snapshot of the same version with other content (signed by the
    online key) does not match the hash the timestamp pins."""
    version = tuf_repo.Repository(repo).snapshot().signed.version
    path = repo / "metadata" / f"{version}.snapshot.json"
    md = Metadata.from_bytes(path.read_bytes())
    md.signed.meta["targets.json"].version = 1
    md.signed.expires = md.signed.expires.replace(year=md.signed.expires.year + 1)
    forge(repo, md, keys.signers(keys.ONLINE), name=path.name)
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, tmp_path / "state").refresh()
    line = one_line(refused)
    assert "snapshot metadata" in line and "mixed" in line


def test_endless_metadata_is_cut_at_its_cap(repo: Path, tmp_path: Path) -> None:
    (repo / "metadata" / "timestamp.json").write_bytes(b" " * 100_000)
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, tmp_path / "state").refresh()
    line = one_line(refused)
    assert "timestamp metadata" in line and "larger than" in line


def test_a_missing_repository_is_a_refusal_and_a_dead_network_is_a_network_error(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "metadata" / "timestamp.json").unlink()
    with pytest.raises(VerificationError) as refused:
        folder_client(repo, tmp_path / "state").refresh()
    assert "does not serve its signed timestamp metadata" in one_line(refused)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    http = HttpClient(
        policy=HostPolicy(allowed_hosts=frozenset({"https://down.example"})),
        settings=HttpSettings(retries=0),
        transport=httpx.MockTransport(down),
    )
    client = TufClient(
        "https://down.example/metadata",
        str(tmp_path / "s2"),
        fetcher=HttpFetcher(http),
        bootstrap=root_v1(repo),
    )
    with pytest.raises(NetworkError) as failed:
        client.refresh()
    assert "metadata of https://down.example/metadata" in one_line(failed)


def test_the_tooling_keeps_the_timestamp_within_a_day_and_files_immutable(
    repo: Path, keys: LocalKeys
) -> None:
    with pytest.raises(Exception, match="24 hours"):
        tuf_repo.refresh(repo, keys.signers(keys.ONLINE), expires_in=DAY + 1)
    stamp = json.loads((repo / "metadata" / "timestamp.json").read_text())
    assert stamp["signed"]["spec_version"]
    root = Metadata.from_bytes(root_v1(repo)).signed
    assert root.consistent_snapshot is True
    assert root.roles[Root.type].threshold == 2 and len(root.roles[Root.type].keyids) == 3
    assert root.roles[Targets.type].threshold == 2 and len(root.roles[Targets.type].keyids) == 3
    assert root.roles[Timestamp.type].keyids == root.roles[Snapshot.type].keyids
    ts = Metadata.from_bytes((repo / "metadata" / "timestamp.json").read_bytes()).signed
    assert ts.expires <= datetime.now(UTC) + timedelta(seconds=DAY)
    # A release whose files changed under its tag is refused: published files never change.
    release = next(repo.glob("v0.2.0"))
    (release / "extra.txt").write_text("late\n")
    with pytest.raises(tuf_repo.TufRepoError, match="never changes"):
        tuf_repo.add_release(repo, release, keys.signers(keys.RELEASE), keys.signers(keys.ONLINE))


def test_a_fast_forwarded_timestamp_is_left_behind_by_rotating_the_online_key(
    repo: Path, tmp_path: Path, keys: LocalKeys
) -> None:
    """Fast-forward: with the stolen online key, an attacker signs timestamp v1000; the client
    takes it (it verifies). The maintainers rotate the timestamp key in root v2 and sign a
    timestamp of a lower version with the new key: the client follows, as the
    specification's recovery says (the old timestamp is dropped when its keys change)."""
    state = tmp_path / "state"
    folder_client(repo, state).refresh()
    stamp = Metadata.from_bytes((repo / "metadata" / "timestamp.json").read_bytes())
    stamp.signed.version = 1000
    forge(repo, stamp, keys.signers(keys.ONLINE), name="timestamp.json")
    assert folder_client(repo, state).refresh().versions.timestamp == 1000
    new = LocalKeys.generate(tmp_path / "new")
    old_online = keys.public(keys.ONLINE).keyid
    tuf_repo.rotate(
        repo,
        [
            tuf_repo.KeyChange(r, add=[new.public(new.ONLINE)], remove=[old_online])
            for r in (Timestamp.type, Snapshot.type)
        ],
        keys.signers("root-1", "root-2"),
    )
    (repo / "metadata" / "timestamp.json").write_bytes(stamp.to_bytes())  # (v1000 is there)
    stamp.signed.version = 5
    forge(repo, stamp, [], name="timestamp.json")
    tuf_repo.refresh(repo, new.signers(new.ONLINE))
    signed = folder_client(repo, state).refresh()
    assert signed.versions.root == 2 and signed.versions.timestamp < 1000


def test_wrong_software_for_this_target_is_refused_before_a_byte_is_read(
    repo: Path, keys: LocalKeys, tmp_path: Path
) -> None:
    """A release key alone (the delegated role's) lists an archive as a build for another
    target: the pipeline refuses it (``trust.trusted_release._same_as_signed_target``)."""
    md = tuf_repo.Repository(repo).targets(tuf_repo.RELEASE_ROLE)
    for path, info in md.signed.targets.items():
        if path.startswith("v0.2.0/") and path.endswith(".tar.gz"):
            info.unrecognized_fields["custom"]["mux"]["target"] = "aarch64-apple-darwin"
    md.signed.version += 1
    forge(repo, md, keys.signers(keys.RELEASE), name=f"{md.signed.version}.release-workflow.json")
    tuf_repo.refresh(repo, keys.signers(keys.ONLINE))
    spec = TufSpec(str(repo / "metadata"), root_v1(repo), "test", str(tmp_path / "state"))
    source = FeedSource(str(repo))
    source.tuf = TufIndex(spec, client=None, lock_wait=5)
    policy = TrustPolicy.for_release(
        (default_keypair().public_key,), "", skip_attestation=True, trusted_root=None
    )._replace(require_api_digests=False)
    log = VerificationLog()
    release = verify_release_metadata(source, "v0.2.0", policy, log)
    with pytest.raises(VerificationError) as refused:
        verify_release_files(
            source,
            release,
            release.manifest.assets[0],
            policy,
            log,
            FilesRequest(tmp_path, tmp_path / "unpacked", smoke_target=None, smoke_timeout=10),
        )
    assert "signed as a build for aarch64-apple-darwin" in one_line(refused)
    assert not list(tmp_path.glob(".download-*"))
