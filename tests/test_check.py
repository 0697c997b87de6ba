"""``mux update --check`` end to end against loopback servers (a fake GitHub, feeds, live mux
servers), run in this process (tests/support/inprocess.py): the HTTP rules, the cache and the
report are the point here, not the process. One test runs the real process too (the fast
path's parsing, the exit code and the one line)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from release.publish.formats import format_sha256sums
from release.rehearsal.serve import serving, url_of
from tests.support.feeds import trusting, write_feed, write_release
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.inprocess import run_in_process
from tests.support.processes import run_mux
from tests.support.releases import serve_directory
from updater.config.buildinfo import current
from updater.protocol import PROTOCOL_VERSION

HERE_VERSION = current().version
TARGET = current().target


@pytest.fixture
def github(tmp_path: Path):
    root = tmp_path / "releases"
    root.mkdir()
    with serve_github(FakeGitHub(root=root)) as fake:
        yield fake


def check(env: dict[str, str], *extra: str):
    result = run_in_process(["update", "--check", "--json", *extra], env)
    doc = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else None
    return result, doc


def test_update_available_without_touching_the_api(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "0.1.0")
    write_release(github.root, "9.0.0", protocol=PROTOCOL_VERSION + 1)
    env = {**sandbox_env, **github_env(github)}
    result, doc = check(env)
    assert result.returncode == 10, result.stderr
    assert doc["status"] == "update-available"
    assert doc["latest"]["version"] == "9.0.0"
    assert doc["latest"]["protocol_version"] == PROTOCOL_VERSION + 1
    assert doc["latest"]["release_url"] == f"{github.web_url}/acme/mux/releases/tag/v9.0.0"
    assert doc["current"]["version"] == HERE_VERSION
    # The 60-an-hour API was never asked: only the redirect and the download host.
    api_paths = [r.path for r in github.requests_to("api")]
    assert api_paths and all(p.startswith("/_dl/") for p in api_paths)

    text = run_in_process(["update", "--check"], env)
    assert text.returncode == 10
    assert f"mux {HERE_VERSION}" in text.stdout and "→ 9.0.0 is available" in text.stdout
    assert "released 2026-11-20T12:00:00Z" in text.stdout


def test_up_to_date(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, HERE_VERSION)
    result, doc = check({**sandbox_env, **github_env(github)})
    assert result.returncode == 0, result.stderr
    assert doc["status"] == "up-to-date"
    assert doc["update_available"] is False


def test_pre_releases_only_with_pre_and_api_uses_etags(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    write_release(github.root, "10.0.0rc1")
    write_release(github.root, "11.0.0")
    github.prereleases.add("v10.0.0rc1")
    github.drafts.add("v11.0.0")
    env = {**sandbox_env, **github_env(github)}
    assert check(env)[1]["latest"]["version"] == "9.0.0"
    first, doc = check(env, "--pre")
    assert first.returncode == 10 and doc["latest"]["version"] == "10.0.0rc1"  # never the draft
    second, doc = check(env, "--pre")
    assert second.returncode == 10 and doc["latest"]["version"] == "10.0.0rc1"
    listing = [
        r for r in github.requests_to("api") if "/releases" in r.path and "_dl" not in r.path
    ]
    assert "If-None-Match" not in listing[0].headers
    assert listing[-1].headers.get("If-None-Match")


def test_pre_reads_every_page_of_the_release_list(github: FakeGitHub, sandbox_env) -> None:
    """Backports made after 9.0.0 fill the first page; the newest version is on the next."""
    for version in ("0.1.0", "0.1.1", "0.1.2", "9.0.0"):
        write_release(github.root, version)
    github.listing_order = ["v0.1.2", "v0.1.1", "v9.0.0", "v0.1.0"]
    github.page_size = 2
    env = {**sandbox_env, **github_env(github)}
    result, doc = check(env, "--pre")
    assert result.returncode == 10, result.stderr
    assert doc is not None and doc["latest"]["version"] == "9.0.0"
    pages = [r.path for r in github.requests_to("api") if "releases" in r.path]
    assert pages == [
        f"/repos/{github.repo}/releases?per_page=100",
        "/repositories/1/releases?page=2",
    ]


def test_pre_reads_at_most_ten_pages(github: FakeGitHub, sandbox_env) -> None:
    versions = [f"0.2.{n}" for n in range(12)]
    for version in versions:
        write_release(github.root, version)
    github.listing_order = [f"v{v}" for v in versions]  # the newest is on page 12
    github.page_size = 1
    result, doc = check({**sandbox_env, **github_env(github)}, "--pre")
    assert result.returncode == 10, result.stderr
    assert doc is not None and doc["latest"]["version"] == "0.2.9"  # the best of ten pages
    assert len([r for r in github.requests_to("api") if "releases" in r.path]) == 10


def test_explicit_version(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    write_release(github.root, "8.0.0")
    result, doc = check({**sandbox_env, **github_env(github)}, "--version", "8.0.0")
    assert result.returncode == 10
    assert doc["latest"]["version"] == "8.0.0" and doc["latest"]["requested"] is True


def test_an_older_requested_version_says_how_to_install_it(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "0.0.5")  # older than this mux
    env = {**sandbox_env, **github_env(github)}
    result, doc = check(env, "--version", "0.0.5")
    assert result.returncode == 10, result.stderr
    assert doc["latest"]["version"] == "0.0.5" and doc["latest"]["requested"] is True
    # A checkout updates an install only when told which (MUX_HOME); without one, it is told
    # no mux update (issue 38: it was told one, which it then refused).
    assert doc["install_command"] is None
    home = {**env, "MUX_HOME": str(Path(sandbox_env["HOME"]) / "mux-home")}
    text = run_in_process(["update", "--check", "--version", "0.0.5"], home)
    assert "install it with: mux update --version 0.0.5 --allow-downgrade" in text.stdout


def test_rate_limit_is_one_line_with_reset_and_token_hint(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    github.rate_limited = True
    result, _ = check({**sandbox_env, **github_env(github)}, "--pre")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "rate limit" in lines[0] and "resets at" in lines[0] and "MUX_GITHUB_TOKEN" in lines[0]


def test_stale_token_is_retried_without_it(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    github.reject_token = "stale"
    env = {**sandbox_env, **github_env(github), "GITHUB_TOKEN": "stale"}
    result, _ = check(env)
    assert result.returncode == 10, result.stderr
    sent = [r.headers.get("Authorization") for r in github.requests_to("web")]
    assert "Bearer stale" in sent and None in sent


def test_token_goes_to_github_hosts_only(github: FakeGitHub, sandbox_env, tmp_path) -> None:
    write_release(github.root, "9.0.0")
    env = {**sandbox_env, **github_env(github), "MUX_GITHUB_TOKEN": "secret"}
    assert check(env)[0].returncode == 10
    assert all(r.headers.get("Authorization") == "Bearer secret" for r in github.requests)
    # A feed is not GitHub: the same token must never reach it.
    feed = FakeGitHub(root=github.root)
    with serve_github(feed):
        write_feed(github.root, [("v9.0.0", False)])
        result, _ = check(env, "--source", f"{feed.api_url}/_dl", *trusting())
        assert result.returncode == 10, result.stderr
        assert feed.requests and not any("Authorization" in r.headers for r in feed.requests)


def test_feed_directory_and_url(tmp_path: Path, sandbox_env) -> None:
    write_release(tmp_path, "9.0.0")
    write_release(tmp_path, "9.1.0rc1")
    write_feed(tmp_path, [("v9.1.0rc1", True), ("v9.0.0", False)])
    result, doc = check(sandbox_env, "--source", str(tmp_path), *trusting())
    assert result.returncode == 10, result.stderr
    assert doc["latest"]["version"] == "9.0.0"
    assert doc["source"] == {
        "kind": "feed",
        "location": str(tmp_path.resolve()),
        "set_by": "--source",
    }
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(tmp_path)}
    assert check(env, "--pre", *trusting())[1]["latest"]["version"] == "9.1.0rc1"


def test_plain_http_outside_loopback_is_refused(sandbox_env) -> None:
    result, _ = check(sandbox_env, "--source", "http://mirror.example.com/mux")
    assert result.returncode == 1
    assert "only https://" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_foreign_redirect_is_refused(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    foreign = FakeGitHub(root=github.root)
    with serve_github(foreign):
        github.foreign_download_url = foreign.api_url.replace("127.0.0.1", "localhost") + "/_dl"
        result, _ = check({**sandbox_env, **github_env(github)})
    assert result.returncode == 1
    assert "not an allowed release host" in result.stderr
    assert foreign.requests == []


def test_server_errors_are_retried_then_reported(github: FakeGitHub, sandbox_env) -> None:
    write_release(github.root, "9.0.0")
    env = {**sandbox_env, **github_env(github)}
    github.fail_5xx = 2
    assert check(env)[0].returncode == 10
    github.fail_5xx = 100
    result, _ = check(env)
    assert result.returncode == 1
    assert "HTTP 503" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_repo_without_releases(github: FakeGitHub, sandbox_env) -> None:
    result, _ = check({**sandbox_env, **github_env(github)})
    assert result.returncode == 1
    assert "has no published release" in result.stderr


def test_offline_names_the_url(sandbox_env) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**sandbox_env, "MUX_GITHUB_URL": f"http://127.0.0.1:{port}", "MUX_REPO": "acme/mux"}
    result, doc = check(env)
    assert result.returncode == 1
    assert f"http://127.0.0.1:{port}/acme/mux/releases/latest" in result.stderr
    error = doc["error"]
    assert doc == {"schema": 2, "error": error, "hint": error["hint"], "exit_code": 1}
    assert (error["kind"], error["layer"]) == ("network", None)
    assert f"http://127.0.0.1:{port}/acme/mux/releases/latest" in error["message"]
    assert "Traceback" not in result.stderr


def _replace_manifest(folder: Path, raw: bytes) -> None:
    """Publish ``raw`` as the manifest, with a SHA256SUMS that lists it (a build that trusts
    no key checks no signature on GitHub: layer 2 still holds)."""
    (folder / "manifest.json").write_bytes(raw)
    sums = format_sha256sums({"manifest.json": hashlib.sha256(raw).hexdigest()})
    (folder / "SHA256SUMS").write_bytes(sums)


def test_garbage_manifest(github: FakeGitHub, sandbox_env) -> None:
    folder = write_release(github.root, "9.0.0")
    _replace_manifest(folder, b"<html>oops</html>")
    result, _ = check({**sandbox_env, **github_env(github)})
    assert result.returncode == 3, result.stderr
    assert "verification failed (manifest): manifest.json is not valid JSON" in result.stderr


def test_manifest_for_another_version_is_refused(github: FakeGitHub, sandbox_env) -> None:
    folder = write_release(github.root, "9.0.0")
    doc = json.loads((folder / "manifest.json").read_text())
    doc["version"] = "9.9.9"
    _replace_manifest(folder, json.dumps(doc).encode())
    result, _ = check({**sandbox_env, **github_env(github)})
    assert result.returncode == 3, result.stderr
    assert "says version 9.9.9, expected 9.0.0" in result.stderr


def test_a_manifest_sha256sums_does_not_vouch_for_is_never_reported(
    github: FakeGitHub, sandbox_env
) -> None:
    """Layer 2 on the small documents before "available": a manifest changed after
    SHA256SUMS was made, or a release with no SHA256SUMS at all, is no release."""
    folder = write_release(github.root, "9.0.0")
    raw = (folder / "manifest.json").read_bytes()
    changed = raw.replace(b'"released_at": "2026-', b'"released_at": "2027-')
    assert changed != raw
    (folder / "manifest.json").write_bytes(changed)
    env = {**sandbox_env, **github_env(github)}
    result, doc = check(env)
    assert result.returncode == 3, result.stderr
    assert "verification failed (manifest): manifest.json has sha256" in result.stderr
    assert doc is not None and "9.0.0" not in json.dumps(doc.get("latest"))
    (folder / "SHA256SUMS").unlink()
    result, doc = check(env)
    assert result.returncode == 1, result.stderr
    assert "/v9.0.0/SHA256SUMS was not found (HTTP 404)" in result.stderr
    assert set(doc or {}) == {"schema", "error", "hint", "exit_code"}


def test_max_age_answers_from_cache_without_network(tmp_path: Path, sandbox_env) -> None:
    feed = tmp_path / "feed"
    write_release(feed, "9.0.0")
    write_feed(feed, [("v9.0.0", False)])
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    first, doc = check(env, "--max-age", "1h", *trusting())
    assert first.returncode == 10 and doc["cached"] is False
    (feed / "releases.json").unlink()  # the source is gone: only the cache can answer
    second, doc = check(env, "--max-age", "1h", *trusting())
    assert second.returncode == 10, second.stderr
    assert doc["cached"] is True and doc["latest"]["version"] == "9.0.0"
    # Too old for the caller: back to the source, which now fails, and the failure is cached.
    third, _ = check(env, "--max-age", "0s", *trusting())
    assert third.returncode == 1
    write_feed(feed, [("v9.0.0", False)])
    fourth, _ = check(env, "--max-age", "1h", *trusting())
    assert fourth.returncode == 1 and "cached result" in fourth.stderr


def test_corrupt_cache_is_ignored(tmp_path: Path, sandbox_env) -> None:
    feed = tmp_path / "feed"
    write_release(feed, "9.0.0")
    write_feed(feed, [("v9.0.0", False)])
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    cache_file = Path(sandbox_env["XDG_CACHE_HOME"]) / "mux" / "check.json"
    cache_file.parent.mkdir(parents=True)
    cache_file.write_bytes(b"\x00garbage{")
    result, doc = check(env, "--max-age", "1h", *trusting())
    assert result.returncode == 10 and doc["cached"] is False
    assert json.loads(cache_file.read_text())["answer"]["latest"]["version"] == "9.0.0"


def test_max_age_usage_error(sandbox_env) -> None:
    # A real process: the fast path's own parsing (updater.__main__), its exit code and its
    # one line; the same flags in process go through the CLI.
    for run in (run_mux, run_in_process):
        result = run(["update", "--check", "--max-age", "soon"], sandbox_env)
        assert result.returncode == 2 and "--max-age" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_live_servers_and_their_protocols(tmp_path: Path, sandbox_env) -> None:
    from tests.support.servers import make_stale_socket, start_fake_server, start_mux_server

    feed = tmp_path / "feed"
    write_release(feed, HERE_VERSION)
    write_feed(feed, [(f"v{HERE_VERSION}", False)])
    runtime = Path(sandbox_env["XDG_RUNTIME_DIR"]) / "mux"
    runtime.mkdir(mode=0o700)
    _, same = start_mux_server(runtime, "same")
    _, older = start_mux_server(runtime, "older", protocol_version=PROTOCOL_VERSION - 1 or 99)
    start_fake_server("hung", runtime / "hung.sock")
    start_fake_server("garbage", runtime / "garbage.sock")
    make_stale_socket(runtime / "stale.sock")
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}

    result, doc = check(env, *trusting())
    assert result.returncode == 20, result.stderr  # up to date, one server needs a restart
    by_address = {s["address"]: s for s in doc["servers"]}
    assert by_address[str(same)]["restart_needed"] is False
    assert by_address[str(older)]["restart_needed"] is True
    assert by_address[str(older)]["restart_command"] == f"mux server restart --socket {older}"
    states = {Path(a).name: s["state"] for a, s in by_address.items()}
    assert states == {
        "same.sock": "live",
        "older.sock": "live",
        "hung.sock": "hung",
        "garbage.sock": "garbage",
        "stale.sock": "stale",
    }
    text = run_in_process(["update", "--check", *trusting()], env)
    assert text.returncode == 20
    assert f"restart it with: mux server restart --socket {older}" in text.stdout
    assert "skipped:" in text.stdout and "stale" in text.stdout


def _self_signed_tls(directory: Path) -> Any:
    """The TLS context of a server on 127.0.0.1 with a certificate nobody trusts (written
    to ``directory/cert.pem``)."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


def test_tls_failure_names_ssl_cert_file_and_trusting_the_ca_works(
    tmp_path: Path, sandbox_env
) -> None:
    feed = tmp_path / "feed"
    write_release(feed, "9.0.0")
    write_feed(feed, [("v9.0.0", False)])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(feed))
    with serving(handler, tls=_self_signed_tls(feed)) as server:
        url = url_of(server)
        assert url.startswith("https://127.0.0.1:")
        result, _ = check(sandbox_env, "--source", url, *trusting())
        assert result.returncode == 1
        assert "TLS failure" in result.stderr and "SSL_CERT_FILE" in result.stderr
        trusted = {**sandbox_env, "SSL_CERT_FILE": str(feed / "cert.pem")}
        result, doc = check(trusted, "--source", url, *trusting())
        assert result.returncode == 10, result.stderr
        assert doc["latest"]["version"] == "9.0.0"


def test_proxy_from_the_environment(github: FakeGitHub, sandbox_env) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    write_release(github.root, "9.0.0")
    env = {
        **sandbox_env,
        **github_env(github),
        "ALL_PROXY": f"http://127.0.0.1:{dead}",
        "HTTP_PROXY": f"http://127.0.0.1:{dead}",
        "NO_PROXY": "",
    }
    result, _ = check(env)
    assert result.returncode == 1
    assert "proxy" in result.stderr.lower() and "HTTPS_PROXY" in result.stderr


def test_an_index_rewritten_within_the_second_it_was_read_is_read_again(
    tmp_path: Path, sandbox_env
) -> None:
    """A static server's Last-Modified has one-second steps: an index rewritten (and re-signed)
    within the second a check read it is answered 304 for ever. The stored body then fails
    the new signature; mux reads the index whole once more and judges that instead."""
    root = tmp_path / "feed"
    write_release(root, "8.0.0")
    write_feed(root, [("v8.0.0", False)])
    index = root / "releases.json"
    with serve_directory(root) as url:
        first, doc = check(sandbox_env, "--source", url, *trusting())
        assert first.returncode == 10 and doc["latest"]["version"] == "8.0.0", first.stderr
        mtime = index.stat().st_mtime
        write_release(root, "9.0.0")
        write_feed(root, [("v8.0.0", False), ("v9.0.0", False)])
        os.utime(index, (mtime, mtime))  # the same second as the index the check read
        again, doc = check(sandbox_env, "--source", url, *trusting())
    assert again.returncode == 10, again.stderr
    assert doc["latest"]["version"] == "9.0.0"
