"""install.sh under the machine policy: each setting, loosening attempts, bad files, and its
small TOML reader against Python's tomllib.

The script is rendered as a release publishes it, with its policy path in a "temporary
root" (``<tmp>/root/etc/mux/policy.toml``). Only root may own a policy there, so the tests
that need a policy in force run as root; as any other user, the same file is refused for
its owner, which is tested too.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.installsh import (
    call,
    env,
    error_lines,
    feed_url,
    library,
    policy_path,
    render_install_sh,
    run_install,
    script,
    snapshot,
    tmp_path,
)
from tests.support.processes import run_mux
from tests.support.releases import Feed, make_feed, make_keypair, serve_directory, sign_index
from updater.config.policy import parse_policy

__all__ = [
    "env",
    "feed_url",
    "library",
    "policy_path",
    "script",
    "tmp_path",
]  # fixtures, imported for pytest

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can make the root-owned policy install.sh requires"
)
SHELLS = ("dash", "bash", "busybox", "ksh93", "mksh", "yash", "posh")


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return make_feed(tmp_path_factory.mktemp("feed"), versions=["0.1.0", "0.2.0"])


def write_policy(path: Path, text: str | bytes, *, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.chmod(mode)
    return path


def refused(result: subprocess.CompletedProcess[str], home: Path, before) -> str:
    """install.sh stopped with exit 4, one error line, and changed nothing in HOME."""
    assert result.returncode == 4, (result.stdout, result.stderr)
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert snapshot(home) == before
    return lines[0]


def installed_version(env: dict[str, str]) -> str | None:
    link = Path(env["HOME"]) / ".local" / "bin" / "mux"
    return Path(os.readlink(link)).parent.name if link.is_symlink() else None


def test_without_a_policy_nothing_changes(script: Path, env: dict[str, str]) -> None:
    result = run_install(script, env=env)
    assert result.returncode == 0, result.stderr
    assert installed_version(env) == "0.2.0"


@needs_root
@pytest.mark.parametrize("mode", ["off", "download"])
def test_the_settings_a_user_config_may_make_are_read_and_change_nothing_for_it(
    mode: str, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    """A policy that fixes auto_install and download_on_metered: install.sh installs by hand,
    so they change nothing for it, but it reads and checks them (an unknown setting would
    stop it)."""
    write_policy(policy_path, f'auto_install = "{mode}"\ndownload_on_metered = false\n')
    result = run_install(script, env=env)
    assert result.returncode == 0, result.stderr
    assert installed_version(env) == "0.2.0"


# -- updates ------------------------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("updates", ["disabled", "check-only"])
def test_updates_off_installs_nothing(
    shell: str, updates: str, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, f'updates = "{updates}"  # set by IT\n')
    home = Path(env["HOME"])
    before = snapshot(home)
    for args in ([], ["--dry-run"], ["--version", "0.1.0"]):
        line = refused(run_install(script, env=env, shell=shell, args=args), home, before)
        assert f'the machine policy {policy_path} sets updates = "{updates}"' in line
        assert "install.sh installs nothing on this machine" in line


@needs_root
def test_uninstall_still_works_under_a_disabled_policy(
    script: Path, env: dict[str, str], policy_path: Path
) -> None:
    assert run_install(script, env=env).returncode == 0
    write_policy(policy_path, 'updates = "disabled"\n')
    result = run_install(script, env=env, args=["--uninstall"])
    assert result.returncode == 0, result.stderr
    assert installed_version(env) is None


# -- source and keys -------------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("shell", SHELLS)
def test_the_policy_source_is_used_and_cannot_be_changed(
    shell: str, script: Path, env: dict[str, str], policy_path: Path, feed_url: str
) -> None:
    write_policy(policy_path, f'source = "{feed_url}/"\n# keys: none added\n')
    without = {k: v for k, v in env.items() if k != "MUX_DOWNLOAD_URL"}
    result = run_install(script, env=without, shell=shell)
    assert result.returncode == 0, result.stderr
    assert installed_version(env) == "0.2.0"
    assert f"from {feed_url}" in result.stderr
    same = run_install(script, env={**without, "MUX_DOWNLOAD_URL": feed_url})
    assert same.returncode == 0, same.stderr
    home = Path(env["HOME"])
    before = snapshot(home)
    other = {**without, "MUX_DOWNLOAD_URL": "http://127.0.0.1:9/other"}
    line = refused(run_install(script, env=other, shell=shell), home, before)
    assert f'sets source = "{feed_url}"; MUX_DOWNLOAD_URL cannot change it' in line


@needs_root
def test_a_github_source_refuses_a_feed_and_another_github(
    script: Path, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, 'source = "github"\ngithub_url = "https://ghe.example.com"\n')
    home = Path(env["HOME"])
    before = snapshot(home)
    line = refused(run_install(script, env=env), home, before)
    assert 'sets source = "github"; MUX_DOWNLOAD_URL cannot change it' in line
    without = {k: v for k, v in env.items() if k != "MUX_DOWNLOAD_URL"}
    other = {**without, "MUX_GITHUB_URL": "https://github.com", "MUX_REPO": "acme/mux"}
    line = refused(run_install(script, env=other), home, before)
    assert 'sets github_url = "https://ghe.example.com"; MUX_GITHUB_URL cannot change it' in line


@needs_root
def test_the_policy_names_the_enterprise_repository(
    tmp_path: Path, env: dict[str, str], policy_path: Path, feed: Feed
) -> None:
    from tests.support.github import FakeGitHub, serve_github

    script = render_install_sh(
        tmp_path / "install-acme.sh",
        keys=[feed.keypair.public_key],
        repo="acme/mux",
        policy_file=str(policy_path),
    )
    without = {k: v for k, v in env.items() if k != "MUX_DOWNLOAD_URL"}
    with serve_github(FakeGitHub(root=feed.path, repo="corp/mux-mirror")) as ghe:
        write_policy(
            policy_path,
            f'source = "github"\ngithub_url = "{ghe.web_url}"\nrepo = "corp/mux-mirror"\n',
        )
        result = run_install(script, env=without)
        assert result.returncode == 0, result.stderr
        assert installed_version(env) == "0.2.0"
        assert any(r.path == "/corp/mux-mirror/releases/latest" for r in ghe.requests_to("web"))
        home = Path(env["HOME"])
        before = snapshot(home)
        line = refused(run_install(script, env={**without, "MUX_REPO": "acme/mux"}), home, before)
        assert 'sets repo = "corp/mux-mirror"; MUX_REPO cannot change it' in line
        for bad in ('"corp"', '"corp/mux/x"', '"../x"', '"corp/.."'):
            write_policy(policy_path, f'source = "github"\nrepo = {bad}\n')
            line = refused(run_install(script, env=without), home, before)
            assert "is not a GitHub repository (owner/name)" in line, bad
        write_policy(policy_path, f'source = "{ghe.web_url}"\nrepo = "corp/mux"\n')
        line = refused(run_install(script, env=without), home, before)
        assert 'go with source = "github"' in line


@needs_root
def test_a_folder_source_is_for_mux_not_install_sh(
    script: Path, env: dict[str, str], policy_path: Path, feed: Feed
) -> None:
    write_policy(policy_path, f'source = "{feed.path}"\n')
    home = Path(env["HOME"])
    line = refused(run_install(script, env=env), home, snapshot(home))
    assert "not from a folder (mux update does)" in line


@needs_root
def test_trusted_keys_let_in_a_mirror_signed_with_its_own_key(
    tmp_path: Path, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    # The mirror signs with a key of its own, not the one the script was built to trust.
    mirror_key = make_keypair(tmp_path / "mirror-key")
    mirror = make_feed(tmp_path / "mirror", versions=["0.1.0"], keypair=mirror_key)
    with serve_directory(mirror.path) as url:
        write_policy(policy_path, f'source = "{url}"\n')
        without = {k: v for k, v in env.items() if k != "MUX_DOWNLOAD_URL"}
        untrusted = run_install(script, env=without)
        assert untrusted.returncode == 3, untrusted.stderr
        write_policy(
            policy_path,
            f'source = "{url}"\ntrusted_keys = [\n  # the mirror\'s key\n'
            f'  "{mirror.keypair.public_key}",\n]\n',
        )
        result = run_install(script, env=without)
    assert result.returncode == 0, result.stderr
    assert installed_version(env) == "0.1.0"


# -- allow_expired_feed ----------------------------------------------------------------------


@pytest.fixture
def expired(tmp_path: Path) -> Iterator[tuple[Feed, str]]:
    stale = make_feed(tmp_path / "stale", versions=["0.1.0"])
    sign_index(stale.path, stale.keypair, seq=5, expires=int(time.time()) - 3600)
    with serve_directory(stale.path) as url:
        yield stale, url


@needs_root
def test_allow_expired_feed_false_refuses_the_flag_and_the_variable(
    tmp_path: Path, env: dict[str, str], policy_path: Path, expired: tuple[Feed, str]
) -> None:
    stale, url = expired
    script = render_install_sh(
        tmp_path / "stale.sh", keys=[stale.keypair.public_key], policy_file=str(policy_path)
    )
    write_policy(policy_path, "allow_expired_feed = false\n")
    home = Path(env["HOME"])
    before = snapshot(home)
    stale_env = {**env, "MUX_DOWNLOAD_URL": url}
    for extra_env, args in (({}, ["--allow-expired-feed"]), ({"MUX_ALLOW_EXPIRED_FEED": "1"}, [])):
        line = refused(run_install(script, env={**stale_env, **extra_env}, args=args), home, before)
        assert "sets allow_expired_feed = false; --allow-expired-feed" in line
    write_policy(policy_path, "allow_expired_feed = true\n")
    result = run_install(script, env=stale_env)
    assert result.returncode == 0, result.stderr
    assert "expired" in result.stderr.lower()  # the loud warning stays


# -- bad files -------------------------------------------------------------------------------

BAD_FILES = {
    "not TOML": ("updates = \n", "line 1: the value of updates is not"),
    "an unknown setting": ('colour = "blue"\n', "'colour' is not a setting mux knows"),
    "a table": ('[updates]\nmode = "on"\n', "line 1: a table"),
    "an unknown value": ('updates = "sometimes"\n', 'updates = "sometimes" is not'),
    "a number": ("updates = 1\n", "the value of updates is not"),
    "set twice": ('updates = "enabled"\nupdates = "disabled"\n', "line 2: updates is set twice"),
    "an unended string": ('updates = "enabled\n', "line 1: a string must end on its line"),
    "text after the value": ('updates = "enabled" x\n', "unexpected text after the value"),
    "a relative source": ('source = "mirror"\n', 'source = "mirror" is not'),
    "plain http off loopback": ('source = "http://mirror.example"\n', "only https://"),
    "a URL without github": ('github_url = "https://ghe.example"\n', 'go with source = "github"'),
    "a bad key": ('trusted_keys = ["RWQ"]\n', 'trusted_keys: "RWQ" is not a minisign public key'),
    "a string for a bool": ('allow_expired_feed = "yes"\n', "allow_expired_feed has a value of"),
    "a wildcard host": ('download_hosts = ["*.example"]\n', 'download_hosts: "*.example" is not'),
    "an unknown auto_install": (
        'auto_install = "sometimes"\n',
        'auto_install = "sometimes" is not',
    ),
    "a string for download_on_metered": (
        'download_on_metered = "yes"\n',
        "download_on_metered has a value of",
    ),
    "an escape": ('updates = "en\\u0061bled"\n', "escapes"),
    "a control character": (b'updates = "enabled\x1b"\n', "a control character"),
}


@needs_root
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_policy_is_refused_never_ignored(
    case: str, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    content, expected = BAD_FILES[case]
    write_policy(policy_path, content)
    home = Path(env["HOME"])
    line = refused(run_install(script, env=env), home, snapshot(home))
    assert f"the machine policy {policy_path} cannot be used" in line, line
    assert expected in line, line
    assert "\x1b" not in line


@pytest.mark.parametrize("case", [c for c in BAD_FILES if c != "an escape"])
def test_mux_refuses_the_same_files(case: str, sandbox_env: dict[str, str], tmp_path: Path) -> None:
    """What install.sh refuses, mux refuses too (except escapes, which mux reads)."""
    content, _ = BAD_FILES[case]
    policy = write_policy(tmp_path / "own" / "policy.toml", content)
    result = run_mux(["update", "--check"], {**sandbox_env, "MUX_POLICY_FILE": str(policy)})
    assert result.returncode == 4 and "cannot be used" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("where", "mode", "why"),
    [
        ("file", 0o664, "is writable by its group"),
        ("file", 0o646, "is writable by other users"),
        ("folder", 0o777, "is writable by other users"),
    ],
)
def test_a_policy_others_can_change_is_refused(
    where: str, mode: int, why: str, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, 'updates = "enabled"\n')
    target = policy_path if where == "file" else policy_path.parent
    target.chmod(mode)
    home = Path(env["HOME"])
    try:
        line = refused(run_install(script, env=env), home, snapshot(home))
    finally:
        target.chmod(0o755 if where == "folder" else 0o644)
    if os.geteuid() == 0:
        assert f"{target} {why}" in line, line
    else:  # as any other user, its owner is the first thing wrong with it
        assert f"is owned by uid {os.geteuid()}, not by root" in line, line


@needs_root
def test_only_root_may_own_the_policy_and_its_folders(
    script: Path, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, 'updates = "enabled"\n')
    home = Path(env["HOME"])
    for owned in (policy_path, policy_path.parent, policy_path.parent.parent):
        os.chown(owned, 65534, -1)
        try:
            line = refused(run_install(script, env=env), home, snapshot(home))
        finally:
            os.chown(owned, 0, -1)
        assert f"{owned} is owned by uid 65534, not by root" in line


@needs_root
def test_a_link_is_judged_by_where_it_leads(
    tmp_path: Path, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    real = write_policy(tmp_path / "managed" / "real.toml", 'updates = "disabled"\n')
    policy_path.parent.mkdir(parents=True)
    policy_path.symlink_to(real)
    home = Path(env["HOME"])
    line = refused(run_install(script, env=env), home, snapshot(home))
    assert 'sets updates = "disabled"' in line
    real.parent.chmod(0o777)
    try:
        line = refused(run_install(script, env=env), home, snapshot(home))
    finally:
        real.parent.chmod(0o755)
    assert f"{real.parent} is writable by other users" in line
    real.unlink()
    line = refused(run_install(script, env=env), home, snapshot(home))
    assert "a symbolic link to nothing" in line


# -- the TOML reader against tomllib ----------------------------------------------------------

_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\"'\\\t\n\r\x7f", min_codepoint=0x20),
    max_size=30,
)


@st.composite
def policy_documents(draw: st.DrawFn) -> str:
    """A TOML text in the forms a policy uses, written in varied styles."""
    keys = draw(st.lists(st.sampled_from(["updates", "source", "a", "b-c", "x_1"]), unique=True))
    lines = []
    for key in keys:
        space = draw(st.sampled_from(["", " ", "\t"]))
        kind = draw(st.sampled_from(["basic", "literal", "true", "false", "array"]))
        if kind == "basic":
            value = json.dumps(draw(_text), ensure_ascii=False)
        elif kind == "literal":
            value = "'" + draw(_text) + "'"
        elif kind in ("true", "false"):
            value = kind
        else:
            items = [json.dumps(s, ensure_ascii=False) for s in draw(st.lists(_text, max_size=3))]
            sep = draw(st.sampled_from([", ", ",\n  ", " ,\n# note\n"]))
            trailing = draw(st.sampled_from(["", ","])) if items else ""
            value = "[" + sep.join(items) + trailing + draw(st.sampled_from(["", "\n"])) + "]"
        comment = draw(st.sampled_from(["", "  # why", "#x"]))
        lines.append(f"{space}{key}{space}={space}{value}{comment}")
        lines.extend(draw(st.lists(st.sampled_from(["", "# a comment", "   "]), max_size=2)))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines) + draw(st.sampled_from(["", newline]))


def read_with_install_sh(lib: Path, tmp_path: Path, text: str) -> dict[str, object] | None:
    path = tmp_path / "p.toml"
    path.write_bytes(text.encode())
    shown = call(lib, f'toml_settings "{path}"')
    if shown.returncode != 0:
        return None
    values: dict[str, object] = {}
    for line in shown.stdout.split("\n")[:-1]:  # (not splitlines: values may hold U+0085)
        key, kind, value = line.split("\t", 2)
        if kind == "s":
            values[key] = value
        elif kind == "b":
            values[key] = value == "true"
        elif kind == "a":
            values[key] = []
        else:
            values.setdefault(key, []).append(value)  # type: ignore[union-attr]
    return values


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(policy_documents())
@example('updates = "check-only"\n')
@example("keys = [\n]\n")
@example("a = [ 'x' , \"y\" , ]  # done\n")
def test_the_reader_agrees_with_tomllib(library: Path, tmp_path: Path, text: str) -> None:
    assert read_with_install_sh(library, tmp_path, text) == tomllib.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        'a = "x" "y"\n',
        "a = [1]\n",
        "a = {b = 1}\n",
        '"a" = "x"\n',
        "a.b = 'x'\n",
        "a = '''x'''\n",
        'a = """x"""\n',
        "a = tru\n",
        'a = ["x"\n',
        "= 'x'\n",
    ],
)
def test_the_reader_refuses_what_it_does_not_read(library: Path, tmp_path: Path, text: str) -> None:
    assert read_with_install_sh(library, tmp_path, text) is None


def test_a_policy_both_read_means_the_same(library: Path, tmp_path: Path) -> None:
    """A policy with every setting: mux's validated reading, and install.sh's raw one."""
    key = make_keypair(tmp_path / "k").public_key
    text = (
        "# /etc/mux/policy.toml\n"
        'updates = "check-only"\n'
        "source = 'https://mirror.example.com/mux'\n"
        f'trusted_keys = [\n  "{key}",  # the mirror\n]\n'
        "allow_expired_feed = true\n"
        'download_hosts = ["storage.example.com", "10.0.0.5:8443"]\n'
        'auto_install = "off"\n'
        "download_on_metered = false\n"
    )
    policy = parse_policy(text.encode(), "policy.toml")
    assert (policy.auto_install, policy.download_on_metered) == ("off", False)
    assert policy.updates == "check-only" and policy.trusted_keys == (key,)
    assert policy.source == "https://mirror.example.com/mux"
    assert tomllib.loads(text)["download_hosts"] == list(policy.download_hosts or ())
    assert read_with_install_sh(library, tmp_path, text) == tomllib.loads(text)
