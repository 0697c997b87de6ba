"""The machine policy (/etc/mux/policy.toml): each setting, loosening attempts, bad files.

The development mux runs in this process (tests/support/inprocess.py) against loopback feeds;
installed release builds run as real processes (their refusals keep a real exit code and
line). The development entry point reads the policy from ``MUX_POLICY_FILE`` (a file the test owns, so these run as any user); a release build reads
the path baked into its build info (here a "temporary root", ``<tmp>/root/etc/mux/``), which
only root may own: those tests need root to make such a file, and show that a release build
ignores ``MUX_POLICY_FILE``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.feeds import KEYS, trusting, write_feed, write_release
from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap, snapshot
from tests.support.releases import Feed, make_feed, make_keypair, serve_directory
from tests.support.servers import mux_runtime_dir  # noqa: F401 (a fixture)
from updater.config import settings as mux_settings
from updater.config.policy import parse_policy, read_policy
from updater.errors import EXIT_POLICY, PolicyError
from updater.sources.opener import open_source
from updater.urls import parse_download_host

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a root-owned policy file can only be made by root"
)


def write_policy(path: Path, text: str, *, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def one_policy_line(result, *, code: int = EXIT_POLICY) -> str:
    """The single ``mux:`` line a refusal prints; checks the code and that nothing else was."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mux: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def check_feed(tmp_path: Path) -> Path:
    """A feed folder offering 9.0.0 (the check needs only manifests)."""
    root = tmp_path / "check-feed"
    write_release(root, "9.0.0")
    write_feed(root, [("v9.0.0", False)])
    return root


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    return tmp_path / "admin" / "policy.toml"


@pytest.fixture
def env(sandbox_env: dict[str, str], policy_path: Path) -> dict[str, str]:
    return {**sandbox_env, "MUX_POLICY_FILE": str(policy_path)}


# -- updates -----------------------------------------------------------------------------------


def test_disabled_refuses_check_update_and_rollback_naming_file_and_setting(
    env: dict[str, str], policy_path: Path, check_feed: Path, tmp_path: Path
) -> None:
    write_policy(policy_path, 'updates = "disabled"\n')
    home = tmp_path / "some-home"
    for args in (
        ["update", "--check", "--source", str(check_feed)],
        ["update", "--check", "--max-age", "1h", "--source", str(check_feed)],
        ["update", "--home", str(home)],
        ["update", "--home", str(home), "--dry-run"],
        ["update", "--home", str(home), "--rollback"],
    ):
        line = one_policy_line(run_in_process(args, env))
        assert str(policy_path) in line and 'updates = "disabled"' in line, (args, line)
    assert not home.exists()
    result = run_in_process(["update", "--check", "--json", "--source", str(check_feed)], env)
    assert result.returncode == EXIT_POLICY
    assert json.loads(result.stdout)["exit_code"] == EXIT_POLICY


def test_disabled_also_refuses_a_cached_answer(
    sandbox_env: dict[str, str], env: dict[str, str], policy_path: Path, check_feed: Path
) -> None:
    """The fast path (a cached --max-age answer) obeys the policy like the full one."""
    args = ["update", "--check", "--max-age", "1h", "--json", "--source", str(check_feed)]
    args += trusting()
    first = run_in_process(args, sandbox_env)
    assert first.returncode == 10 and json.loads(first.stdout)["cached"] is False
    cached = run_in_process(args, sandbox_env)
    assert cached.returncode == 10 and json.loads(cached.stdout)["cached"] is True
    write_policy(policy_path, 'updates = "disabled"\n')
    one_policy_line(run_in_process(args, env))


def test_check_only_allows_the_check_without_an_install_command(
    env: dict[str, str], policy_path: Path, check_feed: Path
) -> None:
    write_policy(policy_path, 'updates = "check-only"\n')
    check = ["update", "--check", "--source", str(check_feed), *trusting()]
    result = run_in_process([*check, "--json"], env)
    assert result.returncode == 10, result.stderr
    doc = json.loads(result.stdout)
    assert doc["update_available"] is True and doc["latest"]["version"] == "9.0.0"
    assert doc["install_command"] is None
    assert doc["managed_by"] == {
        "kind": "policy",
        "name": "the machine policy",
        "command": None,
        "origin": str(policy_path),
        "announce_delay_seconds": 0.0,
    }
    text = run_in_process(check, env)
    assert text.returncode == 10
    assert "install it with" not in text.stdout
    assert f"the machine policy ({policy_path}) lets only its administrator install it" in (
        text.stdout
    )


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])


@pytest.fixture
def installed(tmp_path: Path, sandbox_env: dict[str, str], feed: Feed) -> Install:
    return bootstrap(
        tmp_path, sandbox_env, source=str(feed.path), version="0.1.0",
        public_key=feed.keypair.public_key,
    )  # fmt: skip


def test_check_only_refuses_every_change_and_leaves_the_install(
    installed: Install, feed: Feed, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, 'updates = "check-only"\n')
    before = snapshot(installed.home, installed.bin_dir)
    run = {**installed.env, "MUX_POLICY_FILE": env["MUX_POLICY_FILE"]}
    key = feed.keypair.public_key
    for extra in (["--trust-key", key], ["--dry-run"], ["--rollback"], ["--version", "0.2.0"]):
        args = ["update", "--home", str(installed.home), *extra]
        line = one_policy_line(run_in_process(args, run))
        assert 'updates = "check-only"' in line and "mux update --check still works" in line
    assert snapshot(installed.home, installed.bin_dir) == before
    check = run_in_process(["update", "--check", "--json", "--trust-key", key], run)
    assert check.returncode == 10, check.stderr  # the check itself is allowed
    assert json.loads(check.stdout)["latest"]["version"] == "0.2.0"


def test_enabled_changes_nothing(
    installed: Install, feed: Feed, env: dict[str, str], policy_path: Path
) -> None:
    write_policy(policy_path, '# the default, said out loud\nupdates = "enabled"\n')
    run = {**installed.env, "MUX_POLICY_FILE": env["MUX_POLICY_FILE"]}
    args = ["update", "--home", str(installed.home), "--trust-key", feed.keypair.public_key]
    result = run_in_process(args, run)
    assert result.returncode == 0, result.stderr
    assert installed.active() == "0.2.0"


# -- source and trusted_keys -------------------------------------------------------------------


def test_the_policy_source_is_used_and_cannot_be_changed(
    env: dict[str, str], policy_path: Path, check_feed: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-feed"
    write_release(other, "7.0.0")
    write_feed(other, [("v7.0.0", False)])
    # The feed is signed with KEYS: the policy that names the source names its key too.
    write_policy(policy_path, f'source = "{check_feed}"\ntrusted_keys = ["{KEYS.public_key}"]\n')
    result = run_in_process(["update", "--check", "--json"], env)
    assert result.returncode == 10, result.stderr
    doc = json.loads(result.stdout)
    assert doc["latest"]["version"] == "9.0.0"
    assert doc["source"]["location"] == str(check_feed)
    same = run_in_process(["update", "--check", "--json", "--source", str(check_feed)], env)
    assert same.returncode == 10, same.stderr  # repeating the policy's choice is fine
    attempts = {
        "--source": (["--source", str(other)], {}),
        "MUX_UPDATE_SOURCE": ([], {"MUX_UPDATE_SOURCE": str(other)}),
        "--trust-key": (["--trust-key", make_keypair(tmp_path / "k").public_key], {}),
        "--insecure-skip-attestation": (["--insecure-skip-attestation"], {}),
        "MUX_SIGSTORE_TRUSTED_ROOT": ([], {"MUX_SIGSTORE_TRUSTED_ROOT": str(tmp_path / "root")}),
        "MUX_GITHUB_DOWNLOAD_HOSTS": ([], {"MUX_GITHUB_DOWNLOAD_HOSTS": "storage.example.com"}),
    }
    for name, (flags, extra_env) in attempts.items():
        for command in (["update", "--check"], ["update", "--home", str(tmp_path / "h")]):
            line = one_policy_line(run_in_process([*command, *flags], {**env, **extra_env}))
            assert f"sets source = {json.dumps(str(check_feed))}" in line, line
            assert name in line, line


def test_a_github_source_pins_the_enterprise_urls(env: dict[str, str], policy_path: Path) -> None:
    write_policy(
        policy_path,
        'source = "github"\ngithub_url = "https://ghe.example.com"\n'
        'github_api_url = "https://ghe.example.com/api/v3"\n',
    )
    for variable, value, setting in (
        ("MUX_GITHUB_URL", "https://github.com", "github_url"),
        ("MUX_GITHUB_API_URL", "https://api.github.com", "github_api_url"),
        ("MUX_UPDATE_SOURCE", "https://mirror.example.com", "source"),
    ):
        line = one_policy_line(run_in_process(["update", "--check"], {**env, variable: value}))
        assert setting in line and variable in line, line
    settings = mux_settings.load(
        {"MUX_POLICY_FILE": str(policy_path), "MUX_GITHUB_URL": "https://ghe.example.com/"},
        development=True,
    )
    assert settings.source == "github"
    assert settings.github.web_url == "https://ghe.example.com"
    assert settings.github.api_url == "https://ghe.example.com/api/v3"


def test_an_enterprise_url_alone_pins_that_servers_own_api(policy_path: Path) -> None:
    """github_url without github_api_url: the API is that server's (never api.github.com,
    which must not get its token), and MUX_GITHUB_API_URL may repeat it, not change it."""
    write_policy(policy_path, 'source = "github"\ngithub_url = "https://ghe.example.com"\n')
    environ = {"MUX_POLICY_FILE": str(policy_path), "MUX_REPO": "corp/mux"}
    settings = mux_settings.load(
        {**environ, "MUX_GITHUB_API_URL": "https://ghe.example.com/api/v3/"}, development=True
    )
    assert settings.github.web_url == "https://ghe.example.com"
    with open_source(settings) as source:
        assert source.api == "https://ghe.example.com/api/v3"
    with pytest.raises(PolicyError) as refused:
        mux_settings.load(
            {**environ, "MUX_GITHUB_API_URL": "https://api.github.com"}, development=True
        )
    assert "MUX_GITHUB_API_URL" in refused.value.message


def test_the_policy_names_the_enterprise_repository(
    env: dict[str, str], policy_path: Path, tmp_path: Path
) -> None:
    """An Enterprise mirror rarely has the build's owner/name: the policy's repo is used,
    MUX_REPO may repeat it and cannot change it."""
    from tests.support.feeds import write_release
    from tests.support.github import FakeGitHub, serve_github

    root = tmp_path / "ghe-releases"
    write_release(root, "9.0.0")
    with serve_github(FakeGitHub(root=root, repo="corp/mux-mirror")) as ghe:
        write_policy(
            policy_path,
            f'source = "github"\ngithub_url = "{ghe.web_url}"\n'
            f'github_api_url = "{ghe.api_url}"\nrepo = "corp/mux-mirror"\n',
        )
        result = run_in_process(["update", "--check", "--json"], env)
        assert result.returncode == 10, result.stderr
        assert json.loads(result.stdout)["latest"]["version"] == "9.0.0"
        assert any(r.path == "/corp/mux-mirror/releases/latest" for r in ghe.requests_to("web"))
        again = run_in_process(["update", "--check"], {**env, "MUX_REPO": "corp/mux-mirror"})
        assert again.returncode == 10, again.stderr
        line = one_policy_line(
            run_in_process(["update", "--check"], {**env, "MUX_REPO": "acme/mux"})
        )
    assert 'sets repo = "corp/mux-mirror"; MUX_REPO=acme/mux cannot change it' in line
    # A release build's own repository gives way to the policy's too.
    settings = mux_settings.load(
        {"MUX_POLICY_FILE": str(policy_path)}, build_repo="acme/mux", development=True
    )
    assert settings.github.repo == "corp/mux-mirror"
    for text in (
        'repo = "corp/mux"\n',  # only with source = "github"
        'source = "github"\nrepo = "corp"\n',
        'source = "github"\nrepo = "corp/mux/extra"\n',
        'source = "github"\nrepo = "corp/.."\n',
        'source = "github"\nrepo = ["corp/mux"]\n',
    ):
        with pytest.raises(PolicyError):
            parse_policy(text.encode(), "policy.toml")


def test_trusted_keys_let_a_mirror_signed_with_another_key_in(
    tmp_path: Path, sandbox_env: dict[str, str], policy_path: Path
) -> None:
    """A mirror re-signs the releases (and its index) with its own key: without the policy's
    key its signed index is refused (exit 3); with it, mux installs from it."""
    mirror_key = make_keypair(tmp_path / "mirror-key")
    mirror = make_feed(tmp_path / "mirror", versions=["0.1.0", "0.2.0"], keypair=mirror_key)
    home = tmp_path / "home-install"
    env = {
        **sandbox_env,
        "MUX_POLICY_FILE": str(policy_path),
        "MUX_INSTALL_DIR": str(tmp_path / "bin"),
    }
    write_policy(policy_path, f'source = "{mirror.path}"\n')
    refused = run_in_process(["update", "--home", str(home), "--version", "0.1.0"], env)
    assert refused.returncode == 3, refused.stderr
    assert "no trusted minisign key to check the release list" in refused.stderr
    write_policy(
        policy_path,
        f'source = "{mirror.path}"\ntrusted_keys = ["{mirror.keypair.public_key}"]\n',
    )
    installed = run_in_process(["update", "--home", str(home), "--version", "0.1.0", "--json"], env)
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["to_version"] == "0.1.0"


# -- allow_expired_feed and download_hosts (merged into the settings) --------------------------


def test_allow_expired_feed(policy_path: Path) -> None:
    environ = {"MUX_POLICY_FILE": str(policy_path)}
    expired_feed = mux_settings.Requested(allow_expired_feed=True)  # --allow-expired-feed
    write_policy(policy_path, "allow_expired_feed = true\n")
    assert mux_settings.load(environ, development=True).allow_expired_feed is True
    write_policy(policy_path, "allow_expired_feed = false\n")
    assert mux_settings.load(environ, development=True).allow_expired_feed is False
    with pytest.raises(PolicyError) as refused:
        mux_settings.load(environ, development=True, flags=expired_feed)
    assert "allow_expired_feed = false" in refused.value.message
    assert "--allow-expired-feed" in refused.value.message
    write_policy(policy_path, 'updates = "enabled"\n')  # says nothing: the user decides
    assert mux_settings.load(environ, development=True, flags=expired_feed).allow_expired_feed


def test_download_hosts(policy_path: Path) -> None:
    environ = {"MUX_POLICY_FILE": str(policy_path)}
    write_policy(policy_path, 'download_hosts = ["Storage.GHE.example.com", "10.0.0.5:8443"]\n')
    loaded = mux_settings.load(environ, development=True)
    assert loaded.github.download_hosts == ("storage.ghe.example.com", "10.0.0.5:8443")
    repeated = mux_settings.load(
        {**environ, "MUX_GITHUB_DOWNLOAD_HOSTS": "storage.ghe.example.com"}, development=True
    )
    assert repeated.github.download_hosts == loaded.github.download_hosts
    with pytest.raises(PolicyError) as refused:
        mux_settings.load(
            {**environ, "MUX_GITHUB_DOWNLOAD_HOSTS": "evil.example"}, development=True
        )
    assert "download_hosts" in refused.value.message and "evil.example" in refused.value.message
    os.unlink(policy_path)
    free = mux_settings.load({**environ, "MUX_GITHUB_DOWNLOAD_HOSTS": "a.example, b.example"})
    assert free.github.download_hosts == ("a.example", "b.example")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("storage.example.com", "storage.example.com"),
        ("STORAGE.example.com:443", "storage.example.com:443"),
        ("127.0.0.2", "127.0.0.2"),
        ("[::1]", "[::1]"),
        ("https://storage.example.com", None),
        ("storage.example.com/path", None),
        ("*.example.com", None),
        ("storage.example.com:99999", None),
        ("", None),
    ],
)
def test_download_host_entries(text: str, parsed: str | None) -> None:
    assert parse_download_host(text) == parsed


# -- bad policy files fail closed --------------------------------------------------------------


BAD_FILES = {
    "not TOML": ("updates = \n", "not valid TOML (Invalid value (at line 1, column 11))"),
    "an unknown setting": ('updates = "enabled"\ncolour = "blue"\n', "'colour' is not a setting"),
    "a table": ('[updates]\nmode = "on"\n', 'updates = {"mode": "on"} is not'),
    "an unknown value": ('updates = "sometimes"\n', 'updates = "sometimes" is not'),
    "a relative source": ('source = "mirror"\n', 'source = "mirror" is not'),
    "plain http off loopback": ('source = "http://mirror.example"\n', "source = "),
    "a URL without github": ('github_url = "https://ghe.example"\n', 'goes with source = "github"'),
    "a bad key": ('trusted_keys = ["RWQ"]\n', "trusted_keys: not a minisign public key"),
    "a string for a bool": ('allow_expired_feed = "yes"\n', 'allow_expired_feed = "yes" is not'),
    "a wildcard host": ('download_hosts = ["*.example"]\n', "download_hosts = "),
    "not UTF-8": (b'updates = "\xff"\n', "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_policy_is_refused_never_ignored(
    case: str, env: dict[str, str], policy_path: Path, check_feed: Path
) -> None:
    content, expected = BAD_FILES[case]
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_bytes(content if isinstance(content, bytes) else content.encode())
    policy_path.chmod(0o644)
    line = one_policy_line(run_in_process(["update", "--check", "--source", str(check_feed)], env))
    assert f"the machine policy {policy_path} cannot be used" in line
    assert expected in line, line
    assert "updates are off until it is fixed" in line


def test_a_huge_policy_is_refused(policy_path: Path) -> None:
    write_policy(policy_path, "# padding\n" * 10_000)
    with pytest.raises(PolicyError, match="larger than 65536 bytes"):
        read_policy(str(policy_path), fixed=False)


def test_control_characters_in_a_bad_value_are_escaped(policy_path: Path) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(b'updates = "\\u001b[31mred"\n', str(policy_path))
    assert "\x1b" not in refused.value.message and "\\u001b" in refused.value.message


@pytest.mark.parametrize(
    ("where", "mode"), [("file", 0o664), ("file", 0o646), ("folder", 0o775), ("folder", 0o757)]
)
def test_a_policy_others_can_change_is_refused(
    where: str, mode: int, env: dict[str, str], policy_path: Path, check_feed: Path
) -> None:
    write_policy(policy_path, 'updates = "enabled"\n')
    target = policy_path if where == "file" else policy_path.parent
    target.chmod(mode)
    try:
        line = one_policy_line(
            run_in_process(["update", "--check", "--source", str(check_feed)], env)
        )
    finally:
        target.chmod(0o755 if where == "folder" else 0o644)
    who = "other users" if mode & 0o002 else "its group"
    assert f"{target} is writable by {who}" in line, line


def test_a_sticky_world_writable_folder_is_fine(policy_path: Path) -> None:
    """/tmp-like folders: others may write in them but cannot replace the policy."""
    write_policy(policy_path, 'updates = "check-only"\n')
    policy_path.parent.chmod(0o1777)
    try:
        loaded = read_policy(str(policy_path), fixed=False)
    finally:
        policy_path.parent.chmod(0o755)
    assert loaded is not None and loaded.updates == "check-only"


def test_a_link_to_nothing_is_refused(
    env: dict[str, str], policy_path: Path, tmp_path: Path, check_feed: Path
) -> None:
    policy_path.parent.mkdir(parents=True)
    policy_path.symlink_to(tmp_path / "gone.toml")
    line = one_policy_line(run_in_process(["update", "--check", "--source", str(check_feed)], env))
    assert "a symbolic link to nothing" in line


def test_a_link_is_judged_by_where_it_leads(policy_path: Path, tmp_path: Path) -> None:
    real = write_policy(tmp_path / "managed" / "policy.toml", 'updates = "disabled"\n')
    policy_path.parent.mkdir(parents=True)
    policy_path.symlink_to(real)
    loaded = read_policy(str(policy_path), fixed=False)
    assert loaded is not None and loaded.updates == "disabled"
    real.parent.chmod(0o777)
    try:
        with pytest.raises(PolicyError, match=f"{real.parent} is writable by other users"):
            read_policy(str(policy_path), fixed=False)
    finally:
        real.parent.chmod(0o755)


def test_no_policy_file_means_no_policy(env: dict[str, str], check_feed: Path) -> None:
    args = ["update", "--check", "--json", "--source", str(check_feed), *trusting()]
    result = run_in_process(args, env)
    assert result.returncode == 10, result.stderr
    assert json.loads(result.stdout)["managed_by"] is None


# -- the fixed path of a release build ---------------------------------------------------------


@pytest.fixture
def root_policy(tmp_path: Path) -> Path:
    """``<tmp>/root/etc/mux/policy.toml``: the path the release builds below are built with."""
    return tmp_path / "root" / "etc" / "mux" / "policy.toml"


@pytest.fixture
def policed_feed(tmp_path: Path, root_policy: Path) -> Feed:
    keypair = make_keypair(tmp_path / "keys")
    feed = make_feed(tmp_path / "pf", versions=["0.1.0"], keypair=keypair)
    from tests.support.releases import make_release

    make_release(
        feed.path, "0.2.0", protocol_version=1, keypair=keypair,
        build={"policy_file": str(root_policy)},
    )  # fmt: skip
    make_release(
        feed.path, "0.3.0", protocol_version=1, keypair=keypair,
        build={"policy_file": str(root_policy)},
    )  # fmt: skip
    return feed


@pytest.fixture
def policed(tmp_path: Path, sandbox_env: dict[str, str], policed_feed: Feed) -> Install:
    """An install whose active build (0.2.0) reads the policy at the baked path."""
    with serve_directory(policed_feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.2.0",
            public_key=policed_feed.keypair.public_key,
        )  # fmt: skip
    return Install(install.home, install.bin_dir, {**install.env, "MUX_UPDATE_SOURCE": ""})


def test_a_release_build_reads_its_baked_path_and_ignores_the_variable(
    policed: Install, policed_feed: Feed, root_policy: Path, tmp_path: Path
) -> None:
    env = {**policed.env, "MUX_UPDATE_SOURCE": str(policed_feed.path)}
    write_policy(root_policy, 'updates = "disabled"\n')
    os.chmod(root_policy.parent, 0o755)
    permissive = write_policy(tmp_path / "mine.toml", 'updates = "enabled"\n')
    # A real process: the policy's exit code (4) and one line as a shell sees them.
    result = policed.run("update", "--check", process=True)
    if os.geteuid() != 0:  # the baked path is owned by this user, not root: refused too
        line = one_policy_line(result)
        assert f"is owned by uid {os.geteuid()}, not by root" in line
        return
    for extra in ({}, {"MUX_POLICY_FILE": str(permissive)}):
        run = Install(policed.home, policed.bin_dir, {**env, **extra})
        line = one_policy_line(run.run("update", "--check"))
        assert f'{root_policy} sets updates = "disabled"' in line
        line = one_policy_line(run.run("update"))
        assert f'{root_policy} sets updates = "disabled"' in line
    assert policed.active() == "0.2.0"


@needs_root
def test_at_the_baked_path_only_root_may_own_the_policy(
    policed: Install, policed_feed: Feed, root_policy: Path
) -> None:
    env = Install(
        policed.home, policed.bin_dir, {**policed.env, "MUX_UPDATE_SOURCE": str(policed_feed.path)}
    )
    write_policy(root_policy, 'updates = "enabled"\n')
    assert env.run("update", "--check").returncode == 10
    for owned in (root_policy, root_policy.parent):
        os.chown(owned, 65534, -1)
        try:
            line = one_policy_line(env.run("update", "--check"))
        finally:
            os.chown(owned, 0, -1)
        assert f"{owned} is owned by uid 65534, not by root" in line
    result = env.run("update", "--json")
    assert result.returncode == 0, result.stderr
    assert policed.active() == "0.3.0"


def test_help_names_the_policy_and_exit_4(sandbox_env: dict[str, str]) -> None:
    result = run_in_process(["update", "--help"], sandbox_env)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "4 the machine policy (/etc/mux/policy.toml) does not allow it" in text
    assert "exits 4 and says which setting" in text
    assert "MUX_GITHUB_DOWNLOAD_HOSTS" in text


def test_a_fifo_is_refused_without_hanging(policy_path: Path) -> None:
    policy_path.parent.mkdir(parents=True)
    os.mkfifo(policy_path, 0o644)
    with pytest.raises(PolicyError, match="it is not a regular file"):
        read_policy(str(policy_path), fixed=False)


def test_a_server_under_a_disabled_policy_checks_nothing_in_the_background(
    sandbox_env: dict[str, str],
    policy_path: Path,
    mux_runtime_dir: Path,  # noqa: F811
) -> None:
    from tests.support.servers import server_log, start_mux_server

    write_policy(policy_path, 'updates = "disabled"\n')
    env = {
        **os.environ,
        **sandbox_env,
        "MUX_POLICY_FILE": str(policy_path),
        "MUX_UPDATE_CHECK_INTERVAL": "1",
    }
    start_mux_server(mux_runtime_dir, "policed", env=env)
    text = server_log(mux_runtime_dir, "policed").read_text()
    assert "background update checks are off (the machine policy disables updates)" in text
