"""Release notes from signed data: ``mux-release package --notes`` puts them in the manifest,
``mux update`` shows those of the releases it moved past, the check and a server's
``update-available`` event carry the offered release's.

In-process: the model, the notes file's reader, the choice of releases, the lines shown, the
offer and the event. One real ``mux update`` from a loopback feed shows them end to end.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from release import cli as release_cli
from release.publish.formats import manifest_document
from release.publish.package import read_release_notes
from tests.support.documents import manifest_doc
from tests.support.installs import bootstrap
from tests.support.offers import release_offer
from tests.support.releases import make_feed, serve_directory
from updater.cli.render import release_notes_lines, safe_lines, to_json_line
from updater.commands import release_notes
from updater.core.notices import offer_notice
from updater.core.offer import ReleaseOffer
from updater.core.release_notes import ReleaseNotes, releases_between
from updater.core.request import Decision
from updater.errors import EXIT_USAGE, ParseError, UsageError, VerificationError
from updater.formats import models
from updater.formats.lifecycle import Lifecycle, SignedLifecycle, Withdrawal
from updater.protocol import MAX_WATCH_LINE
from updater.trust.layers import VerifiedRelease

# -- the manifest ----------------------------------------------------------------------------


def parsed(**overrides: object) -> models.Manifest:
    return models.parse_manifest(json.dumps(manifest_doc(**overrides)).encode())


def test_notes_round_trip_through_the_manifest_and_none_is_empty() -> None:
    manifest = parsed(release_notes="## Fixed\n- the resize crash\n")
    assert manifest.release_notes == "## Fixed\n- the resize crash\n"
    assert models.parse_manifest(json.dumps(manifest_document(manifest)).encode()) == manifest
    plain = parsed()
    assert plain.release_notes == ""
    assert "release_notes" not in manifest_document(plain)  # a release without notes


@pytest.mark.parametrize("notes", [None, 3, ["a"], {"text": "a"}])
def test_notes_that_are_not_text_refuse_the_manifest(notes: object) -> None:
    with pytest.raises(ParseError, match="release_notes must be a string"):
        parsed(release_notes=notes)


def test_a_huge_notes_field_is_kept_bounded_and_cut_at_a_line_end() -> None:
    """mux does not trust the manifest's size: a signed manifest with 4 MiB of notes keeps
    at most RELEASE_NOTES_KEPT characters of them, cut where a line ends."""
    line = "- " + "x" * 61 + "\n"  # 64 characters
    manifest = parsed(release_notes=line * 65536)
    assert len(manifest.release_notes) <= models.RELEASE_NOTES_KEPT
    assert manifest.release_notes.endswith("x\n…")
    assert manifest.release_notes.count("\n") == manifest.release_notes.count("- ")
    one_line = parsed(release_notes="y" * 100_000).release_notes
    assert one_line == "y" * (models.RELEASE_NOTES_KEPT - 2) + "\n…"


# -- mux-release package --notes -------------------------------------------------------------


def test_the_notes_file_is_read_as_markdown(tmp_path: Path) -> None:
    path = tmp_path / "NOTES.md"
    path.write_bytes(b"\n## What's new\r\n\r\n- faster start-up\t(2x)\r\n- \xc3\xa9t\xc3\xa9\n\n")
    assert read_release_notes(path) == "## What's new\n\n- faster start-up\t(2x)\n- été"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"x" * (models.RELEASE_NOTES_LIMIT + 1), "larger than 65536 bytes"),
        (b"caf\xe9\n", "not UTF-8 text"),
        (b"fine\n\x1b]52;c;ZXZpbA==\x07\n", "line 2 holds the control character U+001B"),
        ("a\u009bb".encode(), "line 1 holds the control character U+009B"),
    ],
)
def test_notes_mux_release_refuses(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "NOTES.md"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=re.escape(message)):
        read_release_notes(path)


def test_the_package_command_refuses_notes_in_one_line_before_writing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "NOTES.md"
    notes.write_bytes(b"x" * (models.RELEASE_NOTES_LIMIT + 1))
    out = tmp_path / "release"
    argv = ["mux-release", "package", str(tmp_path), "--out", str(out), "--notes", str(notes)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        release_cli.main()
    assert done.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("mux-release: error: --notes ") and "64 KiB" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


# -- which releases, which lines -------------------------------------------------------------


def tags(*names: str) -> list[tuple[str, Version]]:
    return [(name, Version(name[1:])) for name in names]


@pytest.mark.parametrize(
    ("listed", "installed", "target", "expected"),
    [
        (tags("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"), "1.0.0", "1.3.0", ["v1.2.0", "v1.1.0"]),
        (tags("v1.3.0", "v1.1.0", "v1.2.0"), "1.1.0", "1.3.0", ["v1.2.0"]),  # any order listed
        (tags("v1.0.0", "v1.1.0"), "1.0.0", "1.1.0", []),  # the target's own come with it
        (tags("v1.1.0rc1", "v1.1.0", "v1.2.0"), "1.0.0", "1.2.0", ["v1.1.0"]),
        (tags("v2.0.0a1", "v2.0.0a2", "v2.0.0b1"), "1.0.0", "2.0.0b1", ["v2.0.0a2", "v2.0.0a1"]),
        (
            tags(*(f"v1.{n}.0" for n in range(20))),
            "1.0.0",
            "1.19.0",
            [f"v1.{n}.0" for n in (18, 17, 16, 15)],
        ),
        (tags("v0.9.0", "v1.0.0"), "1.0.0", "1.1.0", []),  # nothing newer than the installed
    ],
)
def test_the_releases_between_are_newest_first_and_bounded(
    listed: list[tuple[str, Version]], installed: str, target: str, expected: list[str]
) -> None:
    assert releases_between(listed, Version(installed), Version(target)) == expected


def notes(version: str, text: str, *, read: bool = True) -> ReleaseNotes:
    return ReleaseNotes(version, text, f"https://example.test/v{version}", read)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([notes("1.2.0", ""), notes("1.1.0", "")], []),  # no release had notes: nothing said
        (
            [notes("1.2.0", "# Faster\n\n- start-up\n"), notes("1.1.0", "- a fix")],
            [
                "what's new:",
                "  mux 1.2.0: # Faster",
                "             - start-up",
                "  mux 1.1.0: - a fix",
            ],
        ),
        (
            [notes("1.2.0", "\n".join(f"line {n}" for n in range(1, 5))), notes("1.1.0", "a\nb")],
            [
                "what's new:",
                "  mux 1.2.0: line 1",
                *(f"             line {n}" for n in range(2, 5)),
                "  mux 1.1.0: a",
                "  more: https://example.test/v1.1.0",  # where b is
            ],
        ),
        (
            [notes("1.2.0", "z" * 150), notes("1.1.0", "", read=False)],
            [
                "what's new:",
                "  mux 1.2.0: " + "z" * 99 + "…",
                "  more: https://example.test/v1.2.0",
            ],
        ),
        (
            [notes("1.2.0", "- new"), notes("1.1.0", "", read=False)],
            ["what's new:", "  mux 1.2.0: - new", "  more: https://example.test/v1.1.0"],
        ),
    ],
)
def test_about_five_lines_newest_first_with_the_page_for_the_rest(
    given: list[ReleaseNotes], expected: list[str]
) -> None:
    assert release_notes_lines(given) == expected


def test_escape_sequences_in_notes_reach_no_terminal() -> None:
    """What update_text does with the lines: every one through the one escaping function."""
    hostile = "\x1b]52;c;ZXZpbA==\x07copied\x1b[2J\u202egnp.exe\r- fine"
    shown = safe_lines(release_notes_lines([notes("1.2.0", hostile)]))
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\x1b]52;c;ZXZpbA==\\x07copied\\x1b[2J\\u202egnp.exe" in shown
    assert "- fine" in shown  # a carriage return ends a line: it cannot rewrite one


# -- reading them from a source -------------------------------------------------------------


class Source:
    """What notes_since asks of a source: its signed list of releases and their pages."""

    def __init__(self, listed: SignedLifecycle | Exception | None) -> None:
        self.listed = listed

    def lifecycle(self) -> SignedLifecycle | None:
        if isinstance(self.listed, Exception):
            raise self.listed
        return self.listed

    def release_page(self, tag: str) -> str:
        return f"https://example.test/{tag}"


def manifest_of(tag: str) -> models.Manifest:
    return parsed(version=tag[1:], release_notes=f"notes of {tag}")


def signed_list(*tags: str, withdrawn: tuple[str, ...] = ()) -> SignedLifecycle:
    records = [
        (tag, Lifecycle(withdrawn=Withdrawal("broken", None) if tag in withdrawn else None))
        for tag in tags
    ]
    return SignedLifecycle(listed=tuple(records), origin="the signed index")


def read_notes(
    source: Source, installed: str | None, monkeypatch: pytest.MonkeyPatch, fails: str = ""
) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """notes_since for an update to v1.4.0 (verifying ``fails`` raises, as a bad release
    does): what it found, and the releases it verified."""
    asked: list[str] = []

    def verify(_source: object, tag: str, _policy: object, _log: object) -> VerifiedRelease:
        asked.append(tag)
        if tag == fails:
            raise VerificationError(f"verification failed (signature): {tag}")
        return VerifiedRelease(tag, {}, manifest_of(tag))

    monkeypatch.setattr(release_notes, "verify_release_metadata", verify)
    newest = VerifiedRelease("v1.4.0", {}, manifest_of("v1.4.0"))
    found = release_notes.notes_since(source, None, newest, installed)  # type: ignore[arg-type]
    return [(n.version, n.text, n.read) for n in found], asked


def test_the_releases_in_between_come_from_the_signed_list_each_verified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(signed_list("v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0", withdrawn=("v1.2.0",)))
    assert read_notes(source, "1.1.0", monkeypatch) == (
        [
            ("1.4.0", "notes of v1.4.0", True),
            ("1.3.0", "notes of v1.3.0", True),  # 1.2.0 was withdrawn: nobody got it
        ],
        ["v1.3.0"],
    )


def test_a_release_that_does_not_verify_ends_the_reading_and_is_pointed_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(signed_list("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0"))
    assert read_notes(source, "1.0.0", monkeypatch, fails="v1.2.0") == (
        [
            ("1.4.0", "notes of v1.4.0", True),
            ("1.3.0", "notes of v1.3.0", True),
            ("1.2.0", "", False),
            ("1.1.0", "", False),  # not asked: after a failure, the pages stand for the rest
        ],
        ["v1.3.0", "v1.2.0"],
    )


def test_a_downgrade_brings_nothing_new(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(signed_list("v1.2.0", "v1.3.0", "v1.4.0", "v1.5.0"))
    assert read_notes(source, "1.5.0", monkeypatch) == ([], [])
    assert read_notes(source, "1.4.0", monkeypatch) == ([], [])  # installed again


@pytest.mark.parametrize(
    ("listed", "installed"),
    [
        (None, "1.0.0"),  # GitHub's pages: no signed list of releases
        (ParseError("the index's record of v1.2.0 is not valid"), "1.0.0"),
        (signed_list("v1.0.0", "v1.2.0", "v1.4.0"), None),  # a first install
    ],
)
def test_without_a_signed_list_only_the_new_release_speaks(
    listed: SignedLifecycle | Exception | None,
    installed: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert read_notes(Source(listed), installed, monkeypatch) == (
        [("1.4.0", "notes of v1.4.0", True)],
        [],
    )


# -- the check and the server's event --------------------------------------------------------


def offer(**fields: object) -> ReleaseOffer:
    return release_offer(Decision.UPDATE)._replace(**fields)


def test_the_offer_carries_the_notes_through_its_cache_and_into_the_event() -> None:
    said = offer(release_notes="- faster\n- \x1b[31mred\x1b[0m")
    cached = json.loads(to_json_line(said.to_cache()))
    assert cached["latest"]["release_notes"] == "- faster\n- \x1b[31mred\x1b[0m"
    assert ReleaseOffer.from_cache(cached) == said
    notice = offer_notice(said, installed_version="1.0.0")
    assert notice is not None and notice.data["release_notes"] == said.release_notes
    older_cache = {
        **cached,
        "latest": {k: v for k, v in cached["latest"].items() if k != "release_notes"},
    }
    assert ReleaseOffer.from_cache(older_cache) == said._replace(release_notes="")


def test_the_largest_notes_kept_still_fit_one_event_line() -> None:
    """Every character \\u-escaped, the event that carries the most notes mux keeps is one
    line a watcher reads (a server's stream refuses longer ones)."""
    kept = models.parse_manifest(json.dumps(manifest_doc(release_notes="\x01" * 10**6)).encode())
    notice = offer_notice(offer(release_notes=kept.release_notes), installed_version="1.0.0")
    assert notice is not None
    line = to_json_line({"type": notice.type, "data": notice.data})
    assert len(kept.release_notes) == models.RELEASE_NOTES_KEPT
    assert len(line.encode()) < MAX_WATCH_LINE


# -- end to end ------------------------------------------------------------------------------


def test_mux_update_shows_the_notes_of_the_releases_it_moved_past_once(
    tmp_path: Path, sandbox_env: dict[str, str]
) -> None:
    feed = make_feed(
        tmp_path,
        versions=["0.1.0", "0.2.0", "0.3.0", "0.4.0"],
        release_notes={
            "0.2.0": "- resize works\x1b]52;c;ZXZpbA==\x07",  # signed, still escaped when shown
            "0.4.0": "## 0.4.0\n\n- faster start-up\n- `mux completions`\n",
        },
    )
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        check = install.run("update", "--check", "--json")
        assert check.returncode == 10, check.stderr
        latest = json.loads(check.stdout)["latest"]
        assert latest["release_notes"] == "## 0.4.0\n\n- faster start-up\n- `mux completions`\n"

        updated = install.run("update")
        assert updated.returncode == 0, updated.stderr
        out = updated.stdout
        assert out.startswith("updated mux 0.1.0 → 0.4.0")
        assert out.endswith(
            "what's new:\n"
            "  mux 0.4.0: ## 0.4.0\n"
            "             - faster start-up\n"
            "             - `mux completions`\n"
            "  mux 0.2.0: - resize works\\x1b]52;c;ZXZpbA==\\x07\n"
        )  # 0.3.0 has none: it says nothing
        assert "\x1b" not in out + updated.stderr

        again = install.run("update")
        assert again.returncode == 0 and "already installed" in again.stdout
        assert "what's new" not in again.stdout
