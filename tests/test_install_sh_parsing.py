"""install.sh's own parsers, run as install.sh runs them (its functions, under dash, with
the machine's awk), against the Python libraries mux uses: PEP 440 ordering and channel
against ``packaging.version`` with hypothesis-generated versions of the forms tags take, the
choice of the newest stable release against mux's, and the JSON flattener against ``json``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.version import InvalidVersion, Version

from tests.support.installsh import SHELLS, call, library, shell_argv, tmp_path

__all__ = ["library", "tmp_path"]  # fixtures, imported for pytest

# What a release tag may look like (updater.formats.models._TAG_RE, install.sh's is_version).
TAG_FORM = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-.+]?[0-9A-Za-z.]+)?")


def sh_keys(library: Path, versions: Sequence[str]) -> list[tuple[str, bool]]:
    """install.sh's (sort key, is a pre-release) for each version; key "" when invalid."""
    shown = call(library, "version_keys", "".join(f"{v}\n" for v in versions))
    assert shown.returncode == 0, shown.stderr
    rows = [line.split("\t") for line in shown.stdout.splitlines()]
    assert [row[2] for row in rows] == list(versions)
    return [(row[0], row[1] == "1") for row in rows]


def py_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


# -- versions of the forms tags take -------------------------------------------------------

_number = st.sampled_from(["0", "1", "2", "9", "10", "01", "007", "123456789012345678901"])
_sep = st.sampled_from(["", ".", "-"])
_pre_label = st.sampled_from(["a", "b", "c", "rc", "alpha", "beta", "pre", "preview", "RC", "A"])
_post_label = st.sampled_from(["post", "rev", "r", "POST"])
_segment = st.one_of(
    st.builds(
        lambda s, label, t, n: f"{s}{label}{t}{n}", _sep, _pre_label, _sep, _number | st.just("")
    ),
    st.builds(
        lambda s, label, t, n: f"{s}{label}{t}{n}", _sep, _post_label, _sep, _number | st.just("")
    ),
    st.builds(lambda n: f"-{n}", _number),
    st.builds(lambda s, t, n: f"{s}dev{t}{n}", _sep, _sep, _number | st.just("")),
    st.builds(lambda n: f".{n}", _number),
    st.builds(
        lambda parts: "+" + ".".join(parts),
        st.lists(st.sampled_from(["1", "02", "abc", "ubuntu", "x1", "B"]), min_size=1, max_size=3),
    ),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789.", min_size=1, max_size=4),
)
versions = st.builds(
    lambda release, suffix: release + "".join(suffix),
    st.lists(_number, min_size=3, max_size=5).map(".".join),
    st.lists(_segment, max_size=3),
).filter(lambda v: TAG_FORM.fullmatch(v) is not None and len(v) <= 64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(versions, min_size=1, max_size=12))
@example(["1.0.0", "1.0.0.0", "1.0.0rc1", "1.0.0-rc.2", "1.0.0.dev1", "1.0.0.post1", "1.0.0+1"])
@example(["1.0.0a1", "1.0.0a1.dev1", "1.0.0.post1.dev1", "1.0.0-1", "1.0.0+abc", "1.0.0+1.a"])
@example(["0.10.0", "0.9.0", "0.10.0rc1", "0.0.0", "0.0.0.0.1", "1.2.3-foo", "1.2.3..4"])
def test_version_order_and_channel_are_packaging_s(library: Path, listed: list[str]) -> None:
    keys = sh_keys(library, listed)
    parsed = [py_version(v) for v in listed]
    for text, (key, pre), version in zip(listed, keys, parsed, strict=True):
        assert (key != "") == (version is not None), text
        if version is not None:
            assert pre == version.is_prerelease, text
    valid = [(k, v) for (k, _), v in zip(keys, parsed, strict=True) if v is not None]
    for key_a, version_a in valid:
        for key_b, version_b in valid:
            assert (key_a < key_b) == (version_a < version_b), (version_a, version_b)
            assert (key_a == key_b) == (version_a == version_b), (version_a, version_b)


def _flat_index(tags: Sequence[str], drafts: Sequence[int] = ()) -> str:
    return "".join(
        f"releases/{i}/tag\ts\tv{t}\nreleases/{i}/prerelease\tl\tfalse\n"
        + (f"releases/{i}/draft\tl\ttrue\n" if i in drafts else "")
        for i, t in enumerate(tags)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(versions.filter(lambda v: py_version(v) is not None), min_size=1, max_size=10))
def test_the_newest_stable_release_is_mux_s(
    library: Path, tmp_path_factory: pytest.TempPathFactory, listed: list[str]
) -> None:
    """pick_from_index chooses what mux's feed source does: the highest stable version by
    PEP 440 (the first of equal ones), whatever the order of the list and its flags."""
    from updater.formats.models import parse_tag

    flat = tmp_path_factory.mktemp("index") / "releases.flat"
    flat.write_text(_flat_index(listed))
    picked = call(library, 'pick_from_index "$1"', "", str(flat))
    assert picked.returncode == 0, picked.stderr
    lines = picked.stdout.splitlines()
    # "listed<TAB>version<TAB>state<TAB>reason": none of these has a lifecycle record
    assert lines[: len(listed)] == [f"listed\t{v}\tok\t" for v in listed]
    stable = [v for v in listed if not parse_tag(f"v{v}").is_prerelease]
    if stable:
        assert lines[len(listed) :] == [f"latest\t{max(stable, key=Version)}"]
    else:
        assert lines[len(listed) :] == []


def test_an_invalid_tag_spoils_the_list_and_drafts_are_not_offered(
    library: Path, tmp_path: Path
) -> None:
    flat = tmp_path / "releases.flat"
    flat.write_text(_flat_index(["0.1.0", "0.9.0", "0.2.0"], drafts=[1]))
    picked = call(library, 'pick_from_index "$1"', "", str(flat))
    assert picked.stdout.splitlines() == [
        "listed\t0.1.0\tok\t",
        "listed\t0.2.0\tok\t",
        "latest\t0.2.0",
    ]
    flat.write_text(_flat_index(["0.1.0", "1.2.3-foo", "0.2.0"]))
    picked = call(library, 'pick_from_index "$1"', "", str(flat))
    assert picked.stdout.splitlines()[-1] == "bad\tv1.2.3-foo"


# -- JSON ----------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
)
_documents = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), inner, max_size=4
        )
    ),
    max_leaves=20,
)


def _expected_flat(doc: object, ascii_only: bool, path: str = "") -> list[str]:
    """What json_flatten prints for ``doc`` written by json.dumps: raw (escaped) strings."""
    if isinstance(doc, dict):
        rows = []
        for key, value in doc.items():
            raw_key = json.dumps(key, ensure_ascii=ascii_only)[1:-1].replace("/", "\x01")
            rows += _expected_flat(value, ascii_only, f"{path}/{raw_key}" if path else raw_key)
        return rows
    if isinstance(doc, list):
        rows = []
        for index, value in enumerate(doc):
            rows += _expected_flat(value, ascii_only, f"{path}/{index}" if path else str(index))
        return rows
    if isinstance(doc, str):
        return [f"{path}\ts\t{json.dumps(doc, ensure_ascii=ascii_only)[1:-1]}"]
    return [f"{path}\tl\t{json.dumps(doc)}"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents, st.sampled_from([None, 0, 2]), st.booleans())
def test_the_json_flattener_reads_what_json_writes(
    library: Path,
    tmp_path_factory: pytest.TempPathFactory,
    doc: object,
    indent: int | None,
    ascii_only: bool,
) -> None:
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    source = tmp_path_factory.mktemp("json") / "doc.json"
    source.write_bytes(text.encode("utf-8"))
    flat = call(library, 'json_limit=1048576; json_flatten "$1"', "", str(source))
    assert flat.returncode == 0, (text, flat.stderr)
    if isinstance(doc, dict | list) and not doc:
        assert flat.stdout == ""
    else:
        # split, not splitlines: a string may hold U+0085 or U+2028, which are no newline here
        assert flat.stdout.split("\n")[:-1] == _expected_flat(doc, ascii_only), text


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1,}',
        "[1,]",
        '{"a" 1}',
        "[1 2]",
        '"abc',
        '{"a": tru}',
        '{"a": "\\x"}',
        "[01]",
        "{}{}",
        "",
        '{"a": "b\tc"}',
        "[1,\n2]x",
        "[NaN]",
        "[1e]",
        '{"a": "\\u12"}',
        "[" * 40 + "]" * 40,
        '{"a": 1 "b": 2}',
        "]",
    ],
)
def test_the_json_flattener_refuses_what_is_not_json(
    library: Path, tmp_path: Path, text: str
) -> None:
    source = tmp_path / "doc.json"
    source.write_text(text)
    flat = call(library, 'json_limit=1048576; json_flatten "$1"', "", str(source))
    assert flat.returncode != 0, flat.stdout


def test_the_json_flattener_refuses_a_document_over_the_cap_unread(
    library: Path, tmp_path: Path
) -> None:
    source = tmp_path / "doc.json"
    source.write_text(json.dumps(list(range(1000))))
    assert call(library, 'json_limit=10000; json_flatten "$1"', "", str(source)).returncode == 0
    assert call(library, 'json_limit=1000; json_flatten "$1"', "", str(source)).returncode != 0


# -- the small helpers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "less"),
    [
        ("1", "2", True),
        ("2", "10", True),
        ("10", "2", False),
        ("007", "8", True),
        ("5", "5", False),
        (str(10**30), str(10**30 + 1), True),  # no machine integer holds these
        ("4294967296", "4294967295", False),
        ("0", "0000", False),
    ],
)
def test_decimal_comparison_of_any_length(library: Path, a: str, b: str, less: bool) -> None:
    assert (call(library, 'dec_lt "$1" "$2"', "", a, b).returncode == 0) is less


@given(st.integers(min_value=0, max_value=253402300799))
@settings(max_examples=40, deadline=None)
def test_utc_text(library: Path, unix: int) -> None:
    import datetime

    shown = call(library, 'utc_text "$1"', "", str(unix))
    expected = datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert shown.stdout.strip() == expected


def test_key_ids_are_minisign_s(library: Path, tmp_path: Path) -> None:
    from tests.support.releases import make_keypair
    from updater.formats.minisign import PublicKey

    for number in range(5):
        keypair = make_keypair(tmp_path / str(number), password=None)
        shown = call(library, 'key_id_of "$1"', "", keypair.public_key)
        assert shown.stdout.strip() == PublicKey.parse(keypair.public_key).key_id
        assert f"minisign public key {shown.stdout.strip()}" in keypair.public_key_path.read_text()


@pytest.mark.parametrize(
    ("comment", "key", "value"),
    [
        ("timestamp:1\tfile:releases.json\thashed\tseq:7\texpires:9", "seq", "7"),
        ("timestamp:1\tfile:releases.json\thashed\tseq:7\texpires:9", "nope", ""),
        ("timestamp:1\tversion:1.2.3:x", "version", "1.2.3:x"),
        ("timestamp:1\tseq:7\tseq:8", "seq", None),  # named twice: refused
        ("timestamp:1\t\tseq:7", "seq", None),  # an empty token
    ],
)
def test_trusted_comment_values(library: Path, comment: str, key: str, value: str | None) -> None:
    shown = call(library, 'comment_value "$1" "$2"', "", comment, key)
    if value is None:
        assert shown.returncode != 0
    else:
        assert shown.returncode == 0 and shown.stdout == f"{value}\n"


# -- small helpers that start no process in the usual case ----------------------------------

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (HEX, True),
        (HEX.upper(), False),  # sha256_of lower-cases first
        (HEX[:-1], False),
        (HEX + "0", False),
        (HEX[:-1] + "g", False),
        (HEX[:-1] + " ", False),
        (f"{HEX}\n{HEX}", False),
        (f"{HEX}\nx", False),  # grep once took any line that was a digest
        ("", False),
    ],
)
def test_is_sha256_takes_exactly_64_lower_case_hex_digits(
    library: Path, value: str, valid: bool
) -> None:
    assert (call(library, 'is_sha256 "$1"', "", value).returncode == 0) is valid


@pytest.mark.parametrize(
    ("url", "authority"),
    [
        ("https://Example.COM:8443/path?q=A#F", "example.com:8443"),
        ("https://example.com/Path", "example.com"),
        ("http://user:PW@127.0.0.1:80", "user:pw@127.0.0.1:80"),
        ("https://[::1]:443/", "[::1]:443"),
        ("https://xn--caf-dma.example/É", "xn--caf-dma.example"),
    ],
)
def test_url_authority_is_lower_cased(library: Path, url: str, authority: str) -> None:
    shown = call(library, 'url_authority "$1"', "", url)
    assert (shown.returncode, shown.stdout) == (0, authority)


def test_file_size_reads_padded_and_bare_counts(library: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"x" * 1234)
    assert call(library, 'file_size "$1"', "", str(data)).stdout == "1234"
    padded = tmp_path / "bin"
    padded.mkdir()
    (padded / "wc").write_text("#!/bin/sh\nprintf '    1234\\n'\n")  # BSD wc's padding
    (padded / "wc").chmod(0o755)
    shown = call(library, f'PATH={padded}:$PATH; file_size "$1"', "", str(data))
    assert (shown.returncode, shown.stdout) == (0, "1234")
    assert call(library, 'file_size "$1"', "", str(tmp_path / "missing")).returncode != 0


def test_sha256_of_lower_cases_what_the_hash_tool_prints(library: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"mux")
    digest = hashlib.sha256(b"mux").hexdigest()
    shown = call(library, 'hasher=sha256sum; sha256_of "$1"', "", str(data))
    assert (shown.returncode, shown.stdout) == (0, digest)
    upper = tmp_path / "bin"
    upper.mkdir()
    (upper / "sha256sum").write_text(f"#!/bin/sh\nprintf '%s  %s\\n' {digest.upper()} \"$2\"\n")
    (upper / "sha256sum").chmod(0o755)
    shown = call(library, f'PATH={upper}:$PATH; hasher=sha256sum; sha256_of "$1"', "", str(data))
    assert (shown.returncode, shown.stdout) == (0, digest)


def test_remove_path_removes_files_and_links_and_is_quiet_about_nothing(
    library: Path, tmp_path: Path
) -> None:
    file, dangling, nothing = tmp_path / "file", tmp_path / "dangling", tmp_path / "nothing"
    file.write_text("x")
    dangling.symlink_to(tmp_path / "gone")
    for path in (file, dangling, nothing):
        shown = call(library, 'remove_path "$1"', "", str(path))
        assert (shown.returncode, shown.stderr) == (0, "")
        assert not path.exists() and not path.is_symlink()


# What printable shows: plain text as it is (without an awk), anything else through the awk
# (escaped, cut at 2000 bytes). The same in every shell install.sh runs under.
_SHOWN = [
    ("mux 0.3.0 is already installed in /home/a_b/.local/bin (x=1, 50%)", None),
    ("https://user@example.com:8443/v0.3.0/mux-x86_64.tar.gz", None),
    ("--allow-downgrade +local", None),
    ("", None),
    ("a" * 1999, None),
    ("a" * 2000, "a" * 2000 + "..."),  # the awk's cut, as before
    ("b" * 2500, "b" * 2000 + "..."),
    ("red\x1b[31m", "red\\x1b[31m"),
    ("tab\there", "tab\\x09here"),
    ("two\nlines", "two\\x0alines"),
    ("del\x7f", "del\\x7f"),
    ("c1 \u009b2K", "c1 \\xc2\\x9b2K"),
    ("café ✓", "café ✓"),
    ('quote\'s "and" (parens) [brackets] ! ^ ~ * ? # & ; | < > $ ` \\', None),
]


@pytest.mark.parametrize("shell", [s for s in SHELLS if s != "sh"])
def test_printable_shows_plain_text_as_it_is_and_escapes_the_rest_in_every_shell(
    library: Path, shell: str
) -> None:
    import subprocess

    for text, expected in _SHOWN:
        shown = subprocess.run(
            [*shell_argv(shell), "-c", '. "$0"; printable "$1"', str(library), text],
            capture_output=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},  # (yash drops undecodable words)
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.decode() == (text if expected is None else expected), (shell, text)
