"""release/pins/pinfile.py: the pins.toml format and the offline ``pins --check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from release.pins.pinfile import (
    DEFAULT_NOTICES_PATH,
    DEFAULT_PINS_PATH,
    PinsError,
    check_pins,
    load_pins,
    parse_tag_version,
    pin_marker,
)
from updater.errors import ParseError

SHA = "ab" * 32

ENTRY = """\
# Why libfoo is pinned: the server links it.
[artifacts.libfoo]
repository = "acme/libfoo"  # the producer
asset = "libfoo-x86_64.tar.gz"
license = "MIT"
license_file = "licenses/libfoo.txt"
license_url = "https://github.com/acme/libfoo/blob/0123abc/LICENSE"
tag = "v1.2.3"
url = "https://github.com/acme/libfoo/releases/download/v1.2.3/libfoo-x86_64.tar.gz"
sha256 = "{sha}"
size = 1234

[artifacts.libfoo.attestation]
repository = "acme/libfoo"
signer_workflow = ".github/workflows/release.yml"
"""


def write_pins(folder: Path, body: str, *, licence: str | None = "MIT licence text\n") -> Path:
    (folder / "licenses").mkdir(parents=True, exist_ok=True)
    if licence is not None:
        (folder / "licenses" / "libfoo.txt").write_text(licence)
    path = folder / "pins.toml"
    path.write_text("schema = 1\n\n" + body)
    return path


def notices_naming(folder: Path, *markers: str) -> Path:
    path = folder / "THIRD_PARTY_NOTICES.md"
    path.write_text("# Third-party notices\n\n" + "\n".join(markers) + "\n")
    return path


def test_the_repository_pins_pass_the_check() -> None:
    # The committed file documents the format in comments and pins nothing (nothing has been
    # verified here); its notices must then name no pin either.
    assert check_pins(DEFAULT_PINS_PATH, notices_path=DEFAULT_NOTICES_PATH) == []
    assert load_pins(DEFAULT_PINS_PATH) == []
    assert "[artifacts.NAME]" in DEFAULT_PINS_PATH.read_text()


def test_a_complete_pin_named_by_the_notices_passes(tmp_path: Path) -> None:
    path = write_pins(tmp_path, ENTRY.format(sha=SHA))
    notices = notices_naming(tmp_path, pin_marker("libfoo", "v1.2.3", SHA))
    assert check_pins(path, notices_path=notices) == []
    (pin,) = load_pins(path)
    assert (pin.name, pin.tag, pin.sha256, pin.size) == ("libfoo", "v1.2.3", SHA, 1234)
    assert (pin.identity.repository, pin.identity.signer_workflow) == (
        "acme/libfoo",
        ".github/workflows/release.yml",
    )


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (f'sha256 = "{SHA}"', 'sha256 = "abc"', "sha256 must be 64 lower-case hex"),
        (f'sha256 = "{SHA}"', f'sha256 = "{SHA.upper()}"', "sha256 must be 64 lower-case hex"),
        ('url = "https://', 'url = "http://', "url must be an https:// URL"),
        ("releases/download/v1.2.3/libfoo-x86_64.tar.gz", "x/other.tar.gz", "url does not end"),
        ('tag = "v1.2.3"', 'tag = "nightly"', "does not end in a version"),
        ('asset = "libfoo-x86_64.tar.gz"', 'asset = "../evil"', "asset must be a plain file name"),
        ('license = "MIT"', 'license = ""', "license (an SPDX expression) is missing"),
        ('license = "MIT"', 'license = "Foo Public Licence"', "not a valid SPDX expression"),
        ('license = "MIT"', 'license = "mit"', "should be written 'MIT'"),
        ('license_file = "licenses/libfoo.txt"', 'license_file = "../x.txt"', "relative path"),
        (
            'license_file = "licenses/libfoo.txt"',
            'license_file = "licenses/none.txt"',
            "does not exist",
        ),
        (
            'repository = "acme/libfoo"  #',
            'repository = "libfoo"  #',
            "repository must be owner/name",
        ),
        (
            'signer_workflow = ".github/workflows/release.yml"',
            'signer_workflow = "release.yml"',
            "signer_workflow",
        ),
        ("size = 1234", "size = -1", "size must be a non-negative integer"),
        ("size = 1234", "sizes = 1234", "unknown field(s) sizes"),
    ],
)
def test_each_malformed_field_is_a_problem(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    body = ENTRY.format(sha=SHA)
    assert old in body
    path = write_pins(tmp_path, body.replace(old, new, 1))
    problems = check_pins(path)
    assert any(problem in line and line.startswith("libfoo: ") for line in problems), problems
    with pytest.raises(PinsError, match="libfoo"):
        load_pins(path)


def test_a_missing_identity_is_a_problem(tmp_path: Path) -> None:
    body = ENTRY.format(sha=SHA).split("[artifacts.libfoo.attestation]")[0]
    problems = check_pins(write_pins(tmp_path, body))
    assert problems == [
        "libfoo: the [attestation] identity (repository, signer_workflow) is missing"
    ]


def test_an_empty_licence_text_is_a_problem(tmp_path: Path) -> None:
    problems = check_pins(write_pins(tmp_path, ENTRY.format(sha=SHA), licence="\n"))
    assert problems == ["libfoo: license_file 'licenses/libfoo.txt' is empty"]


def test_loopback_http_is_allowed_for_test_fixtures(tmp_path: Path) -> None:
    body = ENTRY.format(sha=SHA).replace(
        "https://github.com/acme/libfoo/releases", "http://127.0.0.1:8080/acme/libfoo/releases"
    )
    assert check_pins(write_pins(tmp_path, body)) == []


def test_an_entry_never_pinned_fails_the_check_with_the_command_to_run(tmp_path: Path) -> None:
    body = "\n".join(
        line
        for line in ENTRY.format(sha=SHA).splitlines()
        if not line.startswith(("tag =", "url =", "sha256 =", "size ="))
    )
    path = write_pins(tmp_path, body + "\n")
    assert check_pins(path) == ["libfoo: not pinned yet; run mux-release repin libfoo --tag <tag>"]


def test_a_partly_pinned_entry_is_a_problem(tmp_path: Path) -> None:
    body = ENTRY.format(sha=SHA).replace("\nurl = ", "\n# url = ")
    problems = check_pins(write_pins(tmp_path, body))
    assert problems == ["libfoo: url must be an https:// URL (plain http only on loopback)"]


def test_notices_that_name_an_old_pin_or_miss_one_fail(tmp_path: Path) -> None:
    path = write_pins(tmp_path, ENTRY.format(sha=SHA))
    stale = notices_naming(tmp_path, pin_marker("libfoo", "v1.2.2", "cd" * 32))
    problems = check_pins(path, notices_path=stale)
    assert problems == [
        "libfoo: the notices do not name v1.2.3 (abababababab); run mux-release notices",
        "libfoo: the notices name v1.2.2 (cdcdcdcdcdcd), which is not the current pin;"
        " run mux-release notices",
    ]
    (tmp_path / "THIRD_PARTY_NOTICES.md").unlink()
    assert check_pins(path, notices_path=stale) == [
        "THIRD_PARTY_NOTICES.md is missing (run mux-release notices)"
    ]


def test_notices_naming_a_removed_pin_fail(tmp_path: Path) -> None:
    path = write_pins(tmp_path, "")
    notices = notices_naming(tmp_path, pin_marker("gone", "v1.0.0", SHA))
    assert check_pins(path, notices_path=notices) == [
        "gone: the notices name v1.0.0 (abababababab), which is not the current pin;"
        " run mux-release notices"
    ]


def test_malformed_toml_and_schema_are_problems(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("schema = 1\n[artifacts.x\n")
    (problem,) = check_pins(broken)
    assert problem.startswith(f"{broken} is not valid TOML")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("schema = 2\nextra = true\n")
    assert check_pins(wrong) == ["schema must be 1 (found 2)", "unknown top-level field(s) extra"]
    assert check_pins(tmp_path / "missing.toml") == [f"{tmp_path / 'missing.toml'} does not exist"]


@pytest.mark.parametrize(
    ("tag", "prefix", "version"),
    [
        ("v1.2.3", "", "1.2.3"),
        ("1.2.3", "", "1.2.3"),
        ("libfoo-v2.0.0rc1", "libfoo-", "2.0.0rc1"),
        ("ghostty-1.1.3", "ghostty-", "1.1.3"),
    ],
)
def test_tags_split_into_prefix_and_version(tag: str, prefix: str, version: str) -> None:
    found_prefix, found_version = parse_tag_version(tag)
    assert (found_prefix, str(found_version)) == (prefix, version)


@pytest.mark.parametrize("tag", ["nightly", "xcframework-94fe8694-apple-v6", "", "v1 .2"])
def test_tags_without_a_version_are_refused(tag: str) -> None:
    with pytest.raises(ParseError):
        parse_tag_version(tag)
