"""``mux-release tuf …``, ``mux-release feed --tuf-online-private-key`` and ``mux-release verify
--tuf-root``: the release side of the TUF repository, run as the release engineer runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata

from tests.support.installs import republish
from tests.support.processes import mux_release
from tests.support.releases import make_feed, serve_directory
from tests.support.tuf import make_tuf_feed

DAY = 24 * 3600


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = mux_release(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_repository_made_signed_and_rotated_by_keyholders(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    names = ["root-1", "root-2", "root-3", "targets-1", "targets-2", "targets-3"]
    ok("tuf", "keygen", *names, "release", "online", "--out", str(keys))
    assert (keys / "root-1.pem").stat().st_mode & 0o077 == 0
    feed = make_feed(tmp_path, ["0.1.0"])
    pub = {n: str(keys / f"{n}.pub.json") for n in [*names, "release", "online"]}
    sign = {n: f"file2:{keys / f'{n}.pem'}" for n in [*names, "release", "online"]}

    # One keyholder alone: root v1 waits for a second signature, nothing is published.
    args = [
        *("tuf", "init", str(feed.path)),
        *[x for n in names[:3] for x in ("--root-public-key", pub[n])],
        *[x for n in names[3:] for x in ("--targets-public-key", pub[n])],
        *("--online-public-key", pub["online"], "--release-public-key", pub["release"]),
        *("--private-key", sign["root-1"], "--private-key", sign["targets-1"]),
        *("--private-key", sign["release"], "--private-key", sign["online"]),
    ]
    assert "root v1 staged" in ok(*args)
    assert not (feed.path / "metadata" / "1.root.json").exists()
    assert "root v1 published" in ok(
        "tuf", "sign", str(feed.path), "root", "--private-key", sign["root-2"]
    )
    assert "targets v1 published" in ok(
        "tuf", "sign", str(feed.path), "targets", "--private-key", sign["targets-2"]
    )
    ok("tuf", "sign", str(feed.path), "release-workflow", "--private-key", sign["release"])

    # The feed command lists the release and re-signs the timestamp (keys from the environment).
    env = {
        **os.environ,
        "TUF_RELEASE_KEY": (keys / "release.pem").read_text(),
        "TUF_ONLINE_KEY": (keys / "online.pem").read_text(),
        "MINISIGN_PASSWORD": "correct horse battery staple",
    }
    out = ok(
        *("feed", str(feed.path), "--private-key-file", str(feed.keypair.secret_key_path)),
        *(
            "--tuf-release-private-key",
            "env:TUF_RELEASE_KEY",
            "--tuf-online-private-key",
            "env:TUF_ONLINE_KEY",
        ),
        env=env,
    )
    assert "v0.1.0 listed" in out and "timestamp v" in out
    listed = json.loads(max((feed.path / "metadata").glob("*.release-workflow.json")).read_text())[
        "signed"
    ]["targets"]
    assert "v0.1.0/manifest.json" in listed and "v0.1.0/SHA256SUMS.minisig" in listed

    # The timestamp's schedule; more than a day is refused.
    refused = mux_release(
        "tuf",
        "timestamp",
        str(feed.path),
        "--online-private-key",
        sign["online"],
        "--expires-in",
        "25h",
    )
    assert refused.returncode != 0 and "24 hours" in refused.stderr
    assert "timestamp v" in ok(
        "tuf", "timestamp", str(feed.path), "--online-private-key", sign["online"]
    )

    # Revoking root-3 needs two keyholders; one stages it, the second publishes it.
    revoked = json.loads(Path(pub["root-3"]).read_text())["keyid"]
    staged = ok(
        *("tuf", "rotate", str(feed.path), "--role", "root", "--remove-key-id", revoked[:12]),
        *("--private-key", sign["root-1"]),
    )
    assert "root v2 staged" in staged
    assert "root v2 published" in ok(
        "tuf", "sign", str(feed.path), "root", "--private-key", sign["root-2"]
    )
    v2 = Metadata.from_bytes((feed.path / "metadata" / "2.root.json").read_bytes()).signed
    assert revoked not in v2.roles["root"].keyids and len(v2.roles["root"].keyids) == 2


def test_verify_reads_a_release_through_its_tuf_repository(tmp_path: Path) -> None:
    feed = make_tuf_feed(tmp_path, ["0.1.0", "0.2.0"])
    root = tmp_path / "root.json"
    root.write_bytes(feed.root_v1)
    release = feed.releases["0.2.0"]
    args = [
        "verify",
        str(release),
        "--public-key",
        feed.keypair.public_key,
        "--tuf-root",
        str(root),
    ]
    out = ok(*args, "--insecure-skip-attestation")
    assert "tuf: ok: v0.2.0 listed by the TUF repository" in out
    # A release re-signed with the minisign key alone (another archive) is refused.
    archive = next(release.glob("*.tar.gz"))
    republish(release, feed.keypair.secret_key(), archive=archive.read_bytes() + b"\0" * 64)
    refused = mux_release(*args, "--insecure-skip-attestation")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "verification failed (tuf)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) <= 2  # the line and its hint


@pytest.mark.parametrize("flag", ["--tuf-root"])
def test_a_build_refuses_a_root_that_is_not_signed_to_its_threshold(
    tmp_path: Path, flag: str
) -> None:
    feed = make_tuf_feed(tmp_path, [], publish=False)
    md = Metadata.from_bytes(feed.root_v1)
    md.signatures.popitem()
    md.signatures.popitem()  # one of the 2 signatures it needs is left
    root = tmp_path / "root.json"
    root.write_bytes(md.to_bytes())
    result = mux_release(
        *(
            "build",
            "--standin",
            "--out",
            str(tmp_path / "out"),
            "--public-key",
            feed.keypair.public_key,
        ),
        *(flag, str(root), "--tuf-metadata-url", "https://mux.example/metadata"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "not signed to its own threshold" in result.stderr


def test_the_conformance_client_speaks_the_suite_s_protocol(tmp_path: Path) -> None:
    """``mux-release tuf-client`` as tuf-conformance runs it (CLIENT-CLI.md), through the real
    entry point: init, refresh, download (by the specification's hash-prefixed names), exit 0
    or 1."""
    feed = make_tuf_feed(tmp_path, ["0.1.0"])
    root = tmp_path / "root.json"
    root.write_bytes(feed.root_v1)
    target = "v0.1.0/manifest.json"
    data = (feed.path / target).read_bytes()
    prefixed = feed.path / "v0.1.0" / f"{hashlib.sha256(data).hexdigest()}.manifest.json"
    prefixed.write_bytes(data)
    client = [str(Path(sys.executable).parent / "mux-release"), "tuf-client"]
    md = str(tmp_path / "md")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*client, "--metadata-dir", md, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert run("init", str(root)).returncode == 0
    with serve_directory(feed.path) as url:
        assert run("--metadata-url", f"{url}/metadata", "refresh").returncode == 0
        out = tmp_path / "targets"
        out.mkdir()
        got = run(
            *("--metadata-url", f"{url}/metadata", "--target-name", target),
            *("--target-base-url", url, "--target-dir", str(out), "download"),
        )
        assert got.returncode == 0, got.stderr
        assert [p.read_bytes() for p in out.iterdir()] == [data]
        prefixed.write_bytes(data + b" ")  # a target that is not what was signed
        (out / next(out.iterdir()).name).unlink()
        bad = run(
            *("--metadata-url", f"{url}/metadata", "--target-name", target),
            *("--target-base-url", url, "--target-dir", str(out), "download"),
        )
        assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert run("bogus").returncode == 1
