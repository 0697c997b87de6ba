"""``mux-release delta``: the file lists and deltas of a release, from its earlier releases; the
parsers of both formats; and the one rule of which release files are attested."""

from __future__ import annotations

import base64
import json
import os
import tarfile
from pathlib import Path

import pytest

from release.publish.delta import DeltaError, write_deltas
from release.publish.formats import delta_header_document, file_list_document
from release.publish.package import rehash_sums
from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.processes import mux_release
from tests.support.releases import make_feed
from tests.support.standins import add_file
from updater.config.targets import detect_target
from updater.core.transfer import choose_delta
from updater.errors import ParseError
from updater.files import sha256_file
from updater.formats import delta as fmt
from updater.formats.models import SUMS_NAME, SUMS_SIGNATURE_NAME, parse_sha256sums
from updater.trust.delta import DeltaUnusable, apply_delta
from updater.trust.unpack import unpack

TARGET = detect_target()
ROOT = Path(__file__).resolve().parent.parent


def _unpacked(release: Path, into: Path) -> dict[str, str]:
    into.mkdir()
    digests = unpack(release / f"mux-{TARGET}.tar.gz", into, top=f"mux-{TARGET}")
    return {path: file.sha256 for path, file in digests.items()}


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = (os.readlink(path), 0)
        elif path.is_file():
            found[key] = (sha256_file(path), path.stat().st_mode & 0o7777)
        else:
            found[key] = ("dir", 0)
    return found


def test_the_command_writes_file_lists_and_deltas_that_build_the_new_tree(
    tmp_path: Path,
) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])
    old, new = feed.releases["0.1.0"], feed.releases["0.2.0"]
    result = mux_release("delta", new, "--previous", old, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "1 file lists, 1 deltas written" in result.stdout
    list_name, delta_name = fmt.file_list_name(TARGET), fmt.delta_name(TARGET, "0.1.0")
    # Release files like the archives: listed in SHA256SUMS (whose old signature is gone).
    sums = parse_sha256sums((new / SUMS_NAME).read_bytes())
    assert sums[list_name] == sha256_file(new / list_name)
    assert sums[delta_name] == sha256_file(new / delta_name)
    assert not (new / SUMS_SIGNATURE_NAME).exists()
    file_list = fmt.parse_file_list((new / list_name).read_bytes())
    (ref,) = file_list.deltas
    assert (ref.from_version, ref.size) == ("0.1.0", (new / delta_name).stat().st_size)
    # The list is every member of the archive, with its size, mode and digest.
    with tarfile.open(new / f"mux-{TARGET}.tar.gz") as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar if "/" in m.name}
    assert {e.path for e in file_list.entries} == set(members)
    new_digests = _unpacked(new, tmp_path / "new")
    for entry in file_list.entries:
        member = members[entry.path]
        if entry.kind == fmt.FILE:
            assert (entry.size, entry.mode) == (member.size, member.mode & 0o7777)
            assert entry.sha256 == new_digests[entry.path]
    # The delta applied to the old tree is the new tree, byte for byte and mode for mode.
    old_digests = _unpacked(old, tmp_path / "old")
    built = tmp_path / "built"
    built.mkdir()
    with open(new / delta_name, "rb") as stream:
        apply_delta(
            stream,
            ref.size,
            file_list,
            from_version="0.1.0",
            base_dir=str(tmp_path / "old"),
            base_files=old_digests,
            destination=str(built),
        )
    assert _tree(built) == _tree(tmp_path / "new")


def test_deltas_come_from_the_three_newest_earlier_releases(tmp_path: Path) -> None:
    versions = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0"]
    feed = make_feed(tmp_path, versions=versions)
    report = write_deltas(feed.releases["0.4.0"], [feed.releases[v] for v in versions[:-1]])
    assert sorted(d.from_version for d in report.deltas) == ["0.2.0", "0.3.0", "0.3.1"]
    file_list = fmt.parse_file_list(
        (feed.releases["0.4.0"] / fmt.file_list_name(TARGET)).read_bytes()
    )
    assert sorted(d.from_version for d in file_list.deltas) == ["0.2.0", "0.3.0", "0.3.1"]
    assert not (feed.releases["0.4.0"] / fmt.delta_name(TARGET, "0.1.0")).exists()


def test_a_newer_release_is_refused_as_a_previous_one(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])
    result = mux_release(
        "delta", feed.releases["0.1.0"], "--previous", feed.releases["0.2.0"], cwd=ROOT
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "not older than 0.1.0" in result.stderr


def test_a_delta_of_half_the_archive_or_more_is_not_published(tmp_path: Path) -> None:
    """A release that adds 2 MiB of incompressible bytes: its delta is most of the archive."""
    feed = make_feed(tmp_path / "a", versions=["0.1.0"])
    noisy = make_feed(
        tmp_path / "b",
        versions=["0.2.0"],
        post_build=lambda build: add_file(build, "lib/noise.bin", os.urandom(2 << 20)),
    )
    new = noisy.releases["0.2.0"]
    lines: list[str] = []
    report = write_deltas(new, [feed.releases["0.1.0"]], say=lines.append)
    (refused,) = report.deltas
    assert not refused.published and refused.share >= 0.5
    assert any("not published" in line and "under 50%" in line for line in lines), lines
    assert not (new / fmt.delta_name(TARGET, "0.1.0")).exists()
    file_list = fmt.parse_file_list((new / fmt.file_list_name(TARGET)).read_bytes())
    assert file_list.deltas == ()
    assert fmt.delta_name(TARGET, "0.1.0") not in parse_sha256sums((new / SUMS_NAME).read_bytes())


def test_an_earlier_release_whose_archive_is_not_its_own_is_refused(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])
    archive = feed.releases["0.1.0"] / f"mux-{TARGET}.tar.gz"
    archive.write_bytes(archive.read_bytes()[:-10])
    with pytest.raises(DeltaError, match=r"not the archive manifest\.json describes"):
        write_deltas(feed.releases["0.2.0"], [feed.releases["0.1.0"]])


def test_the_fake_sigstore_attests_exactly_what_sha256sums_lists(tmp_path: Path) -> None:
    """The one rule (docs/contracts.md), as the release workflow's subject-checksums does."""
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])
    release = feed.releases["0.2.0"]
    write_deltas(release, [feed.releases["0.1.0"]])
    listed = parse_sha256sums((release / SUMS_NAME).read_bytes())
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    bundle = sigstore.attest_release(release, "0.2.0", repository="acme/mux")
    envelope = json.loads(bundle.read_bytes())["dsseEnvelope"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects == listed
    assert {fmt.file_list_name(TARGET), fmt.delta_name(TARGET, "0.1.0")} <= set(subjects)
    # ...and the bundle itself is listed afterwards (it cannot be its own subject).
    rehash_sums(release)
    assert bundle.name in parse_sha256sums((release / SUMS_NAME).read_bytes())


# -- the formats ---------------------------------------------------------------------------


def _file_list(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "schema": 1,
        "version": "0.2.0",
        "target": TARGET,
        "archive": {"name": f"mux-{TARGET}.tar.gz", "size": 10, "sha256": "a" * 64},
        "mtime": 0,
        "entries": [
            {"path": "lib", "type": "dir"},
            {"path": "mux", "type": "file", "size": 3, "mode": "0755", "sha256": "b" * 64},
            {"path": "lib/m", "type": "link", "target": "../mux"},
        ],
        "deltas": [],
    }
    doc.update(changes)
    return doc


def _entries(*extra: dict[str, object]) -> list[dict[str, object]]:
    return [
        {"path": "lib", "type": "dir"},
        {"path": "mux", "type": "file", "size": 3, "mode": "0755", "sha256": "b" * 64},
        *extra,
    ]


def test_a_file_list_round_trips() -> None:
    raw = json.dumps(_file_list(entries=_entries())).encode()
    parsed = fmt.parse_file_list(raw)
    assert fmt.parse_file_list(file_list_document(parsed)) == parsed


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"path": "../x", "type": "dir"}, "not a plain path"),
        ({"path": "lib/../../x", "type": "dir"}, "not a plain path"),
        ({"path": "/etc", "type": "dir"}, "not a plain path"),
        ({"path": "lib/x\n", "type": "dir"}, "unsafe path"),
        ({"path": "lib/x", "type": "link", "target": "../../etc/passwd"}, "leaves its folder"),
        ({"path": "lib/x", "type": "link", "target": "/etc/passwd"}, "leaves its folder"),
        ({"path": "lib/x", "type": "link", "target": "nothing"}, "does not name a file"),
        ({"path": "lib/x", "type": "link", "target": "x"}, "does not name a file"),
        ({"path": "lib/dev", "type": "char"}, "not a file, folder or link"),
        ({"path": "lib/fifo", "type": "fifo"}, "not a file, folder or link"),
        ({"path": "lib/s", "type": "file", "size": 1, "mode": "4755", "sha256": "c" * 64}, "mode"),
        ({"path": "mux", "type": "dir"}, "twice"),
        ({"path": "nope/x", "type": "dir"}, "is not listed as one"),
        (
            {
                "path": "lib/big",
                "type": "file",
                "size": 3 << 30,
                "mode": "0644",
                "sha256": "c" * 64,
            },
            "integer from 0",
        ),
    ],
)
def test_a_file_list_is_refused(entry: dict[str, object], message: str) -> None:
    raw = json.dumps(_file_list(entries=_entries(entry))).encode()
    with pytest.raises(ParseError, match=message):
        fmt.parse_file_list(raw)


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b"{", b'{"schema": 2}', b"\xff" * 10, b"[" * 100_000, b" " * (5 << 20)],
)
def test_garbage_is_one_parse_error(raw: bytes) -> None:
    with pytest.raises(ParseError):
        fmt.parse_file_list(raw)
    with pytest.raises(ParseError):
        fmt.parse_delta_header(raw, size=len(raw) + 100)


def _header(entries: list[dict[str, object]], area: int) -> tuple[bytes, int]:
    doc = {"schema": 1, "from": "0.1.0", "version": "0.2.0", "target": TARGET, "entries": entries}
    raw = json.dumps(doc).encode()
    return raw, fmt.DELTA_PREFIX_SIZE + len(raw) + area


@pytest.mark.parametrize(
    ("entries", "area", "message"),
    [
        ([{"path": "../x", "op": "copy", "source": "x"}], 0, "not a plain path"),
        (
            [{"path": "x", "op": "copy", "source": "../x", "source_sha256": "a" * 64}],
            0,
            "not a plain path",
        ),
        ([{"path": "x", "op": "copy", "source": None}], 0, "a copy of nothing"),
        ([{"path": "x", "op": "link", "source": None}], 0, "no known op"),
        ([{"path": "x", "op": "patch", "source": None, "offset": 0, "length": 40}], 10, "where"),
        ([{"path": "x", "op": "patch", "source": None, "offset": 5, "length": 40}], 45, "where"),
        ([{"path": "x", "op": "patch", "source": None, "offset": 0, "length": 40}], 50, "after"),
    ],
)
def test_a_delta_header_is_refused(entries: list, area: int, message: str) -> None:
    raw, size = _header(entries, area)
    with pytest.raises(ParseError, match=message):
        fmt.parse_delta_header(raw, size=size)


def test_a_delta_header_round_trips() -> None:
    raw, size = _header(
        [
            {"path": "a", "op": "copy", "source": "b", "source_sha256": "a" * 64, "source_size": 3},
            {"path": "c", "op": "patch", "source": None, "offset": 0, "length": 40},
        ],
        40,
    )
    header = fmt.parse_delta_header(raw, size=size)
    document = delta_header_document(header)
    assert fmt.header_length(document[: fmt.DELTA_PREFIX_SIZE]) == len(raw_again := document[13:])
    assert fmt.parse_delta_header(raw_again, size=size - len(raw) + len(raw_again)) == header


def test_a_delta_for_another_version_is_unusable(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"])
    new = feed.releases["0.2.0"]
    write_deltas(new, [feed.releases["0.1.0"]])
    file_list = fmt.parse_file_list((new / fmt.file_list_name(TARGET)).read_bytes())
    digests = _unpacked(feed.releases["0.1.0"], tmp_path / "old")
    (tmp_path / "out").mkdir()
    delta = new / fmt.delta_name(TARGET, "0.1.0")
    with open(delta, "rb") as stream, pytest.raises(DeltaUnusable, match=r"not from 0\.0\.1"):
        apply_delta(
            stream,
            delta.stat().st_size,
            file_list,
            from_version="0.0.1",
            base_dir=str(tmp_path / "old"),
            base_files=digests,
            destination=str(tmp_path / "out"),
        )


# -- which delta a client tries (pure) ------------------------------------------------------


def _offering(*refs: tuple[str, int]) -> tuple[fmt.FileList, dict[str, str]]:
    deltas = tuple(
        fmt.DeltaRef(version, fmt.delta_name(TARGET, version), size, f"{n:064x}")
        for n, (version, size) in enumerate(refs)
    )
    file_list = fmt.parse_file_list(json.dumps(_file_list(entries=_entries())).encode())
    file_list = fmt.FileList(
        file_list.version,
        file_list.target,
        file_list.archive,
        file_list.mtime,
        file_list.entries,
        deltas,
    )
    return file_list, {d.name: d.sha256 for d in deltas}


def test_the_delta_from_the_first_kept_version_that_has_one_is_chosen() -> None:
    file_list, sums = _offering(("0.1.0", 10), ("0.1.5", 10))
    choice = choose_delta(file_list, sums, ["0.1.5", "0.1.0"], archive_size=100)
    assert not isinstance(choice, str) and choice.base == "0.1.5"
    choice = choose_delta(file_list, sums, ["0.1.9", "0.1.0"], archive_size=100)
    assert not isinstance(choice, str) and choice.base == "0.1.0"


def test_no_delta_is_chosen_unless_signed_small_and_from_a_kept_version() -> None:
    file_list, sums = _offering(("0.1.0", 50))
    assert "not under half" in str(choose_delta(file_list, sums, ["0.1.0"], archive_size=100))
    file_list, sums = _offering(("0.1.0", 10))
    unlisted = {name: "f" * 64 for name in sums}
    assert "SHA256SUMS does not list" in str(
        choose_delta(file_list, unlisted, ["0.1.0"], archive_size=100)
    )
    assert "keeps" in str(choose_delta(file_list, sums, ["0.0.1"], archive_size=100))
    assert "no delta" in str(choose_delta(_offering()[0], {}, ["0.1.0"], archive_size=100))
