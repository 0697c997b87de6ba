"""release.build ships each pinned artifact after checking it against its pin (pins.toml).

The pins are written the way ``mux-release repin`` writes them: a human-written entry, then
its tag, url, sha256 and size set by :func:`release.upkeep.repin.rewrite_pin` (tomlkit).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import release.build.standin
from release.bill.third_party_notices import generate_notices
from release.build.standalone import build_standalone
from release.build.standin import build_standin
from release.build.steps import (
    BuildError,
    PinnedFile,
    check_pinned_artifacts,
    vendor_pinned_artifacts,
)
from release.pins.pinfile import PinsError, check_pins
from release.publish.package import package_release
from release.upkeep.repin import rewrite_pin
from tests.support.releases import KeyPair, make_keypair
from updater.config.targets import detect_target
from updater.errors import EXIT_ERROR, EXIT_USAGE, EXIT_VERIFICATION, UsageError, VerificationError

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = detect_target()
NAME = "libfoo"
ASSET = "libfoo-x86_64.tar.gz"
TAG = "v1.2.0"
# Bigger than the copy chunk (1 MiB), so hashing and copying span several reads.
PAYLOAD = b"libfoo prebuilt library " * 60_000

ENTRY = f"""\
# Prebuilt artifacts (test copy).
schema = 1

# libfoo: the terminal library the server links.
[artifacts.{NAME}]
repository = "acme/libfoo"
asset = "{ASSET}"
license = "MIT"
license_file = "licenses/{NAME}.txt"

[artifacts.{NAME}.attestation]
repository = "acme/libfoo"
signer_workflow = ".github/workflows/release.yml"
"""


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


@dataclass
class Setup:
    pins_path: Path
    artifacts: Path
    out: Path
    sha256: str
    keypair: KeyPair

    @property
    def artifact(self) -> Path:
        return self.artifacts / ASSET

    def build(
        self, builder: Callable[..., Path] = build_standin, out: Path | None = None, **options: Any
    ) -> Path:
        settings: dict[str, Any] = {
            "version": "0.3.0",
            "protocol_version": 2,
            "repo": "owner/mux",
            "minisign_keys": [self.keypair.public_key],
            "target": HOST,
            "pins_path": self.pins_path,
            "artifacts_dir": self.artifacts,
        }
        return builder(out or self.out, **{**settings, **options})


def write_pins(folder: Path, *, pinned: bytes | None = PAYLOAD) -> Path:
    """pins.toml with libfoo's human part, pinned (as repin does) to ``pinned``'s digest."""
    (folder / "licenses").mkdir(parents=True)
    (folder / "licenses" / f"{NAME}.txt").write_text("libfoo MIT licence\n")
    text = ENTRY
    if pinned is not None:
        text = rewrite_pin(
            text,
            NAME,
            {
                "tag": TAG,
                "url": f"https://github.com/acme/libfoo/releases/download/{TAG}/{ASSET}",
                "sha256": hashlib.sha256(pinned).hexdigest(),
                "size": len(pinned),
            },
        )
    path = folder / "pins.toml"
    path.write_text(text)
    return path


@pytest.fixture
def setup(tmp_path: Path, keypair: KeyPair) -> Setup:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / ASSET).write_bytes(PAYLOAD)
    return Setup(
        pins_path=write_pins(tmp_path / "release"),
        artifacts=artifacts,
        out=tmp_path / "dist",
        sha256=hashlib.sha256(PAYLOAD).hexdigest(),
        keypair=keypair,
    )


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


# --- the happy path -----------------------------------------------------------------------


def test_a_matching_artifact_ships_in_the_build_and_its_archive(
    setup: Setup, tmp_path: Path
) -> None:
    folder = setup.build()
    shipped = folder / "vendor" / NAME / ASSET
    assert shipped.read_bytes() == PAYLOAD
    assert shipped.stat().st_mode & 0o777 == 0o644

    package_release([folder], tmp_path / "rel", released_at="2024-01-01T00:00:00Z")
    with tarfile.open(tmp_path / "rel" / f"mux-{HOST}.tar.gz") as tar:
        member = tar.getmember(f"mux-{HOST}/vendor/{NAME}/{ASSET}")
        stream = tar.extractfile(member)
        assert stream is not None
        assert hashlib.sha256(stream.read()).hexdigest() == setup.sha256
        assert member.mode == 0o644

    # The notices generated from the same pins.toml name exactly this artifact.
    notices = tmp_path / "THIRD_PARTY_NOTICES.md"
    notices.write_text(generate_notices(setup.pins_path, distributions=[], components=[]))
    assert f"<!-- pin: {NAME} tag={TAG} sha256={setup.sha256} -->" in notices.read_text()
    assert check_pins(setup.pins_path, notices_path=notices) == []


def test_without_pins_nothing_is_vendored(setup: Setup, tmp_path: Path) -> None:
    empty = tmp_path / "empty" / "pins.toml"
    empty.parent.mkdir()
    empty.write_text("schema = 1\n")
    # Zero pins need no artifacts folder at all; no pins.toml (the default) neither.
    folder = setup.build(pins_path=empty, artifacts_dir=None)
    assert not (folder / "vendor").exists()
    other = setup.build(out=tmp_path / "other", pins_path=None, artifacts_dir=None)
    assert not (other / "vendor").exists()


# --- refusals: one error line, nothing written ----------------------------------------------


def test_a_tampered_artifact_is_refused_and_nothing_is_written(setup: Setup) -> None:
    flip_last_byte(setup.artifact)
    actual = hashlib.sha256(setup.artifact.read_bytes()).hexdigest()
    with pytest.raises(VerificationError) as caught:
        setup.build()
    message = caught.value.message
    assert message.startswith(f"{NAME} {TAG}: ")
    assert f"sha256 {actual}" in message and f"the pin says {setup.sha256}" in message
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == EXIT_VERIFICATION
    assert not setup.out.exists()


def test_an_artifact_of_the_wrong_size_is_refused(setup: Setup) -> None:
    setup.artifact.write_bytes(PAYLOAD[:-10])  # a truncated download
    with pytest.raises(
        VerificationError,
        match=rf"{ASSET} is {len(PAYLOAD) - 10} bytes, the pin says {len(PAYLOAD)}",
    ):
        setup.build()
    assert not setup.out.exists()


def test_a_missing_artifact_is_an_error_naming_it(setup: Setup) -> None:
    setup.artifact.unlink()
    with pytest.raises(BuildError) as caught:
        setup.build()
    assert caught.value.message.startswith(f"{NAME} {TAG}: {setup.artifact} is missing")
    assert setup.sha256 in caught.value.message
    assert caught.value.exit_code == EXIT_ERROR
    assert not setup.out.exists()


def test_pins_without_an_artifacts_folder_are_a_usage_error(setup: Setup) -> None:
    with pytest.raises(UsageError, match=rf"pins {NAME}; give the folder holding {ASSET}"):
        setup.build(artifacts_dir=None)
    with pytest.raises(UsageError, match="does not exist"):
        setup.build(artifacts_dir=setup.artifacts / "nope")
    assert not setup.out.exists()


def test_an_entry_never_pinned_fails_the_build(setup: Setup, tmp_path: Path) -> None:
    unpinned = write_pins(tmp_path / "unpinned", pinned=None)
    with pytest.raises(PinsError, match=rf"{NAME} is not pinned yet"):
        setup.build(pins_path=unpinned)
    assert not setup.out.exists()


def test_the_standalone_build_checks_pins_before_running_pyinstaller(setup: Setup) -> None:
    flip_last_byte(setup.artifact)
    with pytest.raises(VerificationError, match=f"the pin says {setup.sha256}"):
        setup.build(build_standalone)
    assert not setup.out.exists()


def test_an_artifact_changed_after_its_check_is_refused_while_copying(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_check = release.build.standin.check_pinned_artifacts

    def check_then_swap(*args: Any) -> list[PinnedFile]:
        checked = real_check(*args)
        flip_last_byte(setup.artifact)  # replaced between the check and the copy
        return checked

    monkeypatch.setattr(release.build.standin, "check_pinned_artifacts", check_then_swap)
    with pytest.raises(VerificationError, match=f"the pin says {setup.sha256}"):
        setup.build()
    assert list(setup.out.iterdir()) == []  # the half-made build folder was removed


def test_vendoring_hashes_what_it_copies(setup: Setup, tmp_path: Path) -> None:
    checked = check_pinned_artifacts(setup.pins_path, setup.artifacts)
    assert [item.destination.as_posix() for item in checked] == [f"vendor/{NAME}/{ASSET}"]
    setup.artifact.write_bytes(b"x" * len(PAYLOAD))
    target = tmp_path / "folder"
    with pytest.raises(VerificationError):
        vendor_pinned_artifacts(checked, target)


# --- the command ------------------------------------------------------------------------------


def run_build(setup: Setup, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from release.cli import main; main()",
            "build",
            "--standin",
            "--out",
            str(setup.out),
            "--public-key",
            setup.keypair.public_key,
            "--pins",
            str(setup.pins_path),
            *extra,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_build_command_checks_and_ships_pins(setup: Setup) -> None:
    flip_last_byte(setup.artifact)
    tampered = run_build(setup, "--artifacts", str(setup.artifacts))
    assert tampered.returncode == EXIT_VERIFICATION
    (line,) = tampered.stderr.splitlines()
    assert line.startswith(f"mux-release: error: {NAME} {TAG}: ") and setup.sha256 in line
    assert not setup.out.exists()

    missing_folder = run_build(setup)
    assert missing_folder.returncode == EXIT_USAGE
    assert "--artifacts" in missing_folder.stderr

    setup.artifact.write_bytes(PAYLOAD)
    built = run_build(setup, "--artifacts", str(setup.artifacts))
    assert built.returncode == 0, built.stderr
    folder = Path(built.stdout.strip())
    assert (folder / "vendor" / NAME / ASSET).read_bytes() == PAYLOAD
