"""GitHub Enterprise whose release downloads redirect to a storage host of its own.

A loopback Enterprise (web and API, tests/support/github.py) answers every
``/releases/download/`` with a redirect to a third server, ``localhost:<port>``, as an
Enterprise server sends downloads to its storage host. mux refuses that host until it is
named in ``MUX_GITHUB_DOWNLOAD_HOSTS`` (or the machine policy's ``download_hosts``), and it
never sends the token there, while the Enterprise server itself gets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serving, url_of
from tests.support.attestations import REPO, attest
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap, snapshot
from tests.support.releases import KeyPair, make_keypair, make_release

TOKEN = "ghe-token-4f1b"


class Storage:
    """The storage host: serves ``/<tag>/<name>`` from the releases, records every request."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[tuple[str, dict[str, str]]] = []
        storage = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                storage.requests.append((self.path, dict(self.headers.items())))
                path = storage.root / unquote(urlsplit(self.path).path).lstrip("/")
                body = path.read_bytes() if path.is_file() and ".." not in self.path else None
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self._handler = Handler
        self._running = ExitStack()
        self.host = ""

    def __enter__(self) -> Storage:
        server = self._running.enter_context(serving(self._handler))
        self.host = f"localhost:{server.server_address[1]}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._running.close()


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def enterprise(
    tmp_path: Path, keypair: KeyPair, sigstore: FakeSigstore
) -> Iterator[tuple[FakeGitHub, Storage]]:
    root = tmp_path / "releases"
    for version, protocol in (("0.1.0", 1), ("0.2.0", 2)):
        release = make_release(root, version, protocol_version=protocol, keypair=keypair, repo=REPO)
        attest(release, keypair, sigstore)
    with serve_github(FakeGitHub(root=root, repo=REPO)) as ghe, Storage(root) as storage:
        yield ghe, storage


@pytest.fixture
def installed(
    tmp_path: Path, sandbox_env, enterprise, sigstore: FakeSigstore, keypair: KeyPair
) -> Install:
    ghe, storage = enterprise
    env = {
        **sandbox_env,
        **github_env(ghe),
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        "MUX_GITHUB_TOKEN": TOKEN,
    }
    install = bootstrap(
        tmp_path, env, source="github", version="0.1.0", public_key=keypair.public_key
    )
    ghe.requests.clear()
    ghe.foreign_download_url = f"http://{storage.host}"  # from now on, downloads go there
    return install


def _authorized(requests: list[tuple[str, dict[str, str]]]) -> list[str]:
    return [path for path, headers in requests if "authorization" in {h.lower() for h in headers}]


def test_the_storage_host_is_refused_until_it_is_named(installed: Install, enterprise) -> None:
    ghe, storage = enterprise
    before = snapshot(installed.home, installed.bin_dir)
    refused = installed.run("update")
    assert refused.returncode == 1, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert f"{storage.host} is not an allowed release host" in line
    assert "MUX_GITHUB_DOWNLOAD_HOSTS" in line
    assert storage.requests == []  # refused before a byte went there
    after = snapshot(installed.home, installed.bin_dir)
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == {
        k: v for k, v in before.items() if not k.endswith(".lock")
    }

    allowed = Install(
        installed.home,
        installed.bin_dir,
        {**installed.env, "MUX_GITHUB_DOWNLOAD_HOSTS": storage.host},
    )
    check = allowed.run("update", "--check")
    assert check.returncode == 10, check.stderr
    result = allowed.run("update")
    assert result.returncode == 0, result.stderr
    assert installed.active() == "0.2.0"
    downloaded = {urlsplit(path).path.rsplit("/", 1)[-1] for path, _ in storage.requests}
    assert {"manifest.json", "SHA256SUMS", "SHA256SUMS.minisig"} <= downloaded
    assert any(name.endswith(".tar.gz") for name in downloaded)
    assert _authorized(storage.requests) == []  # never the token
    web = [r for r in ghe.requests_to("web") if "/releases/download/" in r.path]
    assert web and all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in web)


def test_the_host_must_match_exactly(installed: Install, enterprise) -> None:
    _, storage = enterprise
    port = int(storage.host.rpartition(":")[2])
    for wrong in (f"localhost:{port + 1}", "127.0.0.1", f"storage.localhost:{port}"):
        env = {**installed.env, "MUX_GITHUB_DOWNLOAD_HOSTS": wrong}
        result = Install(installed.home, installed.bin_dir, env).run("update", "--check")
        assert result.returncode == 1 and "not an allowed release host" in result.stderr, wrong
    assert storage.requests == []


def test_a_url_is_not_a_host(installed: Install, enterprise) -> None:
    _, storage = enterprise
    env = {**installed.env, "MUX_GITHUB_DOWNLOAD_HOSTS": f"http://{storage.host}/"}
    result = Install(installed.home, installed.bin_dir, env).run("update", "--check")
    assert result.returncode == 2, result.stderr
    assert "MUX_GITHUB_DOWNLOAD_HOSTS: 'http://" in result.stderr
    assert "is not a host name" in result.stderr


def test_the_policy_names_the_storage_host_for_every_mux(
    installed: Install, enterprise, keypair: KeyPair, tmp_path: Path
) -> None:
    _, storage = enterprise
    policy = tmp_path / "etc" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text(f'download_hosts = ["{storage.host}"]\n')
    policy.chmod(0o644)
    env = {**installed.env, "MUX_POLICY_FILE": str(policy)}
    args = ["update", "--home", str(installed.home), "--trust-key", keypair.public_key]
    result = run_in_process([*args, "--json"], env)
    assert result.returncode == 0, result.stderr
    assert installed.active() == "0.2.0"
    assert _authorized(storage.requests) == []
    refused = run_in_process(args, {**env, "MUX_GITHUB_DOWNLOAD_HOSTS": "other.example"})
    assert refused.returncode == 4 and "download_hosts" in refused.stderr


# -- the token stays with the server it belongs to ---------------------------------------------


def _free_loopback_port_80() -> str | None:
    """A loopback address whose port 80 this process can bind (root, nothing there)."""
    import random
    import socket

    for _ in range(20):
        address = (
            f"127.{random.randrange(1, 255)}.{random.randrange(255)}.{random.randrange(1, 255)}"
        )
        with socket.socket() as probe:
            try:
                probe.bind((address, 80))
            except OSError:
                continue
        return address
    return None


def test_a_portless_enterprise_url_gives_the_token_to_its_port_only(
    tmp_path: Path, sandbox_env, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    """MUX_GITHUB_URL=http://<loopback> (as https://ghe.example.com names no port) and its
    storage host on another port of the same host: the token goes to port 80 (the web) and
    the configured API, never to the storage port, on the check and on the update. Origins
    compare scheme, host and effective port; a host without a port was any port."""
    address = _free_loopback_port_80()
    if address is None:
        pytest.skip("cannot bind port 80 on a loopback address (needs root)")
    root = tmp_path / "releases"
    for version, protocol in (("0.1.0", 1), ("0.2.0", 2)):
        release = make_release(root, version, protocol_version=protocol, keypair=keypair, repo=REPO)
        attest(release, keypair, sigstore)
    storage = Storage(root)
    with (
        serve_github(FakeGitHub(root=root, repo=REPO), host=address, web_port=80) as ghe,
        ExitStack() as running,
    ):
        server = running.enter_context(serving(storage._handler, host=address))
        storage.host = f"{address}:{server.server_address[1]}"
        ghe.foreign_download_url = f"http://{storage.host}"
        assert ghe.web_url == f"http://{address}"  # no port in it
        env = {
            **sandbox_env,
            **github_env(ghe),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
            "MUX_GITHUB_TOKEN": TOKEN,
            "MUX_GITHUB_DOWNLOAD_HOSTS": storage.host,
            "MUX_INSTALL_DIR": str(tmp_path / "bin"),
        }
        trust = ["--trust-key", keypair.public_key]
        check = run_in_process(["update", "--check", *trust], env)
        assert check.returncode == 10, check.stdout + check.stderr
        home = tmp_path / "mux-home"
        update = run_in_process(["update", "--home", str(home), "--version", "0.2.0", *trust], env)
        assert update.returncode == 0, update.stdout + update.stderr
    assert Install(home, tmp_path / "bin", env).active() == "0.2.0"
    downloaded = {urlsplit(path).path.rsplit("/", 1)[-1] for path, _ in storage.requests}
    assert {"SHA256SUMS", "manifest.json"} <= downloaded
    assert any(name.endswith(".tar.gz") for name in downloaded)
    assert _authorized(storage.requests) == []  # the storage port never saw it
    web = [r for r in ghe.requests_to("web") if "/releases/download/" in r.path]
    assert web and all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in web)


def test_the_token_goes_to_an_origin_never_to_another_port_or_scheme() -> None:
    from updater.sources.github import GitHubSource

    portless = GitHubSource(
        REPO,
        web_url="https://ghe.corp.example",
        token=TOKEN,
        download_hosts=["ghe.corp.example:8443"],
    )
    for url in (
        "https://ghe.corp.example/x",
        "https://ghe.corp.example:443/x",
        "https://GHE.corp.example/api/v3/repos/x/y/releases",
    ):
        assert portless.policy.may_see_token(url), url
    for url in (
        "https://ghe.corp.example:8443/x",  # its storage port: allowed, never the token
        "http://ghe.corp.example:443/x",
        "https://ghe.corp.example.evil/x",
    ):
        assert not portless.policy.may_see_token(url), url
    portless.policy.check("https://ghe.corp.example:8443/blob")
    with pytest.raises(Exception, match="not an allowed release host"):
        portless.policy.check("https://ghe.corp.example:9443/blob")
    public = GitHubSource(REPO, token=TOKEN)
    assert not public.policy.may_see_token("https://github.com:8443/acme/mux/releases/latest")
    assert not public.policy.may_see_token("https://api.github.com:444/repos")


class Recorder:
    """One loopback Enterprise host: every request recorded, every answer an empty list."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                recorder.requests.append((self.path, dict(self.headers.items())))
                body = b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._handler = Handler
        self._running = ExitStack()
        self.url = ""

    def __enter__(self) -> Recorder:
        self.url = url_of(self._running.enter_context(serving(self._handler)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._running.close()


def test_without_an_api_url_the_enterprise_servers_own_api_gets_the_token(sandbox_env) -> None:
    """MUX_GITHUB_URL alone: the API is that server's /api/v3 (as gh finds it), never
    api.github.com, which must not see an Enterprise token."""
    with Recorder() as ghe:
        env = {**sandbox_env, "MUX_GITHUB_URL": ghe.url, "MUX_REPO": REPO}
        env["MUX_GITHUB_TOKEN"] = TOKEN
        result = run_in_process(["update", "--check", "--pre"], env)
    assert result.returncode == 1, result.stderr  # an empty release list: nothing to offer
    assert "api.github.com" not in result.stderr
    asked = [(urlsplit(path).path, headers) for path, headers in ghe.requests]
    assert asked and asked[0][0] == f"/api/v3/repos/{REPO}/releases"
    assert all(headers.get("Authorization") == f"Bearer {TOKEN}" for _, headers in asked)


def test_github_com_hosts_never_see_an_enterprise_token() -> None:
    from updater.sources.github import GitHubSource

    ghe = GitHubSource(REPO, web_url="https://ghe.corp.example", token=TOKEN)
    assert ghe.api == "https://ghe.corp.example/api/v3"
    both = GitHubSource(
        REPO,
        web_url="https://ghe.corp.example/",
        api_url="https://ghe.corp.example/api/v3",
        token=TOKEN,
    )
    for source in (ghe, both):
        assert source.policy.may_see_token("https://ghe.corp.example/api/v3/repos/x/y/releases")
        for url in (
            "https://api.github.com/repos/acme/mux/releases",
            "https://github.com/acme/mux/releases/download/v1.0.0/manifest.json",
        ):
            assert not source.policy.may_see_token(url), url
    residency = GitHubSource(REPO, web_url="https://octo.ghe.com", token=TOKEN)
    assert residency.api == "https://api.octo.ghe.com"
    public = GitHubSource(REPO, token=TOKEN)  # github.com: its own hosts, as before
    assert public.api == "https://api.github.com"
    assert public.policy.may_see_token("https://api.github.com/repos/acme/mux/releases")
    assert public.policy.may_see_token("https://github.com/acme/mux/releases/latest")


# -- whose attestation an Enterprise release carries ----------------------------------------------


@pytest.mark.parametrize(
    ("web_url", "expected_url", "expected_repo"),
    [
        # GitHub Enterprise Server cannot attest: its releases are the build's own, mirrored.
        ("https://ghe.corp.example", "https://github.com", REPO),
        # A GHE.com tenant's own attestations name its issuer, which no release build expects.
        ("https://octo.ghe.com", "https://github.com", REPO),
        (None, "https://github.com", "corp/mux-mirror"),
    ],
)
def test_the_attestation_an_enterprise_release_must_carry(
    tmp_path: Path,
    keypair: KeyPair,
    sigstore: FakeSigstore,
    web_url: str | None,
    expected_url: str,
    expected_repo: str,
) -> None:
    """A release of the build's repository (acme/mux on github.com), mirrored with its
    Sigstore bundle into an Enterprise repository of another name, verifies there; on
    github.com, MUX_REPO names the repository that must have attested. Checked with the real
    verifier against the real bundle."""
    import hashlib

    from updater.config.buildinfo import BuildInfo, TrustSettings
    from updater.config.settings import GitHubSettings, Settings
    from updater.errors import VerificationError
    from updater.formats import models
    from updater.sources.feed import FeedSource
    from updater.trust.attestation import verify_attestation
    from updater.trust.trust_policy import TrustPolicy

    release = make_release(
        tmp_path / "feed", "0.2.0", protocol_version=2, keypair=keypair, repo=REPO
    )
    attest(release, keypair, sigstore)
    build = BuildInfo(
        version="0.1.0",
        protocol_version=1,
        target="x",
        repo=REPO,
        development=False,
        trust=TrustSettings(minisign_keys=(keypair.public_key,)),
    )
    settings = Settings(github=GitHubSettings(repo="corp/mux-mirror", web_url=web_url))
    policy = TrustPolicy.for_update(FeedSource(str(tmp_path / "feed")), build, settings)
    assert (policy.github_url, policy.repository) == (expected_url, expected_repo)
    bundle = (release / models.attestation_name("0.2.0")).read_bytes()
    manifest = hashlib.sha256((release / "manifest.json").read_bytes()).hexdigest()
    identity = policy.identity("v0.2.0")
    if expected_url == "https://github.com" and expected_repo == REPO:
        verify_attestation(bundle, manifest, identity, trusted_root=sigstore.trusted_root_path)
    else:  # the bundle names acme/mux on github.com: another identity refuses it
        with pytest.raises(VerificationError):
            verify_attestation(bundle, manifest, identity, trusted_root=sigstore.trusted_root_path)
