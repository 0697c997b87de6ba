"""``mux-release fetch-artifacts``: a build job downloads only what its target ships."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from release.pins.fetch import fetch_artifacts
from release.rehearsal.serve import serve_directory
from release.upkeep.repin import rewrite_pin
from updater.errors import VerificationError

TARGETS = ("x86_64-unknown-linux-gnu", "aarch64-apple-darwin")
ENTRY = """\
schema = 1

[artifacts.libvt]
repository = "acme/libvt"
asset = "libvt-{target}.tar.gz"
targets = ["x86_64-unknown-linux-gnu", "aarch64-apple-darwin"]
license = "MIT"
license_file = "licenses/libvt.txt"

[artifacts.libvt.attestation]
repository = "acme/libvt"
signer_workflow = ".github/workflows/release.yml"
"""


def payload(target: str) -> bytes:
    return f"libvt for {target}\n".encode() * 1000


def write_pins(folder: Path, base_url: str) -> Path:
    (folder / "licenses").mkdir(parents=True)
    (folder / "licenses" / "libvt.txt").write_text("MIT\n")
    text = rewrite_pin(
        ENTRY,
        "libvt",
        {"tag": "v1.0.0"},
        {
            t: {
                "url": f"{base_url}/libvt-{t}.tar.gz",
                "sha256": hashlib.sha256(payload(t)).hexdigest(),
                "size": len(payload(t)),
            }
            for t in TARGETS
        },
    )
    (folder / "pins.toml").write_text(text)
    return folder / "pins.toml"


def test_only_the_targets_asset_is_downloaded_and_checked(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    for target in TARGETS:
        (served / f"libvt-{target}.tar.gz").write_bytes(payload(target))
    with serve_directory(served) as url:
        pins = write_pins(tmp_path / "release", url)
        out = tmp_path / "artifacts"
        (fetched,) = fetch_artifacts(pins, "aarch64-apple-darwin", out)
        assert fetched.path == out / "libvt-aarch64-apple-darwin.tar.gz"
        assert fetched.path.read_bytes() == payload("aarch64-apple-darwin")
        assert sorted(p.name for p in out.iterdir()) == ["libvt-aarch64-apple-darwin.tar.gz"]
        assert fetch_artifacts(pins, "aarch64-unknown-linux-musl", out) == []  # not declared
        (again,) = fetch_artifacts(pins, "aarch64-apple-darwin", out)
        assert again.reused

        # The served asset changed since it was pinned: refused, nothing left behind.
        (served / "libvt-x86_64-unknown-linux-gnu.tar.gz").write_bytes(
            payload("x86_64-unknown-linux-gnu")[:-1] + b"!"
        )
        with pytest.raises(VerificationError, match="the pin says"):
            fetch_artifacts(pins, "x86_64-unknown-linux-gnu", out)
        assert sorted(p.name for p in out.iterdir()) == ["libvt-aarch64-apple-darwin.tar.gz"]
