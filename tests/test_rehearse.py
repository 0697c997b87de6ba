"""``mux-release rehearse``: the whole release, offline, exactly as the README's quick start
runs it, and a rehearsal whose step fails stops there with that step's error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from release.build import standin as builder
from release.build.steps import write_bill
from release.rehearsal import rehearse as rehearsal
from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.realbuild import RealBuild


@pytest.mark.slow
@pytest.mark.timeout(1500)  # one real PyInstaller build (the reproducibility step's)
def test_the_quick_start_rehearsal_runs_every_step_and_cleans_up(real_build: RealBuild) -> None:
    """The README's first command, with the run's real build as its first build (the one
    build every test that needs one shares): every other step as the quick start runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "release", "rehearse", "--build", str(real_build.folder)],
        capture_output=True,
        text=True,
        timeout=1400,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "rehearsal passed: 17 steps" in out
    for expected in (
        f"a standalone PyInstaller one-folder build (from {real_build.folder})",
        "install mux 1.0.0 with install.sh",
        "mux 1.0.0 → 1.1.0 is available",
        "signature: ok",
        "attestation: ok: built by .github/workflows/release.yml@refs/tags/v1.1.0",
        "smoke-test: ok",
        "still running with its old pid",
        "status line: mux 1.1.0, protocol 2",
    ):
        assert expected in out, out
    for line in out.splitlines():
        if line.startswith("[") and ") (" in line:  # every step says how long it took
            assert line.rstrip().endswith(" s)"), line
    workdir = out.splitlines()[0].rsplit(" in ", 1)[1]
    assert not os.path.exists(workdir)


def test_a_failing_step_stops_the_rehearsal_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attest = FakeSigstore.attest

    def from_another_repository(self: FakeSigstore, subjects, **kwargs):  # type: ignore[no-untyped-def]
        return attest(self, subjects, **{**kwargs, "repository": "someone/else"})

    monkeypatch.setattr(FakeSigstore, "attest", from_another_repository)
    said: list[str] = []
    with pytest.raises(rehearsal.RehearsalError) as caught:
        rehearsal.rehearse(standin=True, say=said.append)
    message = str(caught.value)
    assert message.startswith("step 8 (verify both releases"), message
    assert "verification failed (attestation)" in message
    assert not any(line.startswith("[ 9]") for line in said)  # nothing ran after it
    workdir = Path(said[0].rsplit(" in ", 1)[1])
    assert not workdir.exists()


def test_the_reproducibility_step_fails_when_the_second_build_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_build = builder.build_standin

    def differing_second_build(out_dir, **kwargs):  # type: ignore[no-untyped-def]
        folder = real_build(out_dir, **kwargs)
        if Path(out_dir).name == "again":  # the rehearsal's second build of the same version
            (folder / "lib" / "updater" / "stamp.py").write_text("# built at another time\n")
            write_bill(folder, None)
        return folder

    monkeypatch.setattr(builder, "build_standin", differing_second_build)
    said: list[str] = []
    with pytest.raises(rehearsal.RehearsalError) as caught:
        rehearsal.rehearse(standin=True, say=said.append)
    message = str(caught.value)
    assert message.startswith("step 5 (build mux 1.0.0 again and compare"), message
    assert "the two builds of mux 1.0.0" in message
    assert "lib/updater/stamp.py (only in the second)" in message
    assert not any(line.startswith("[ 6]") for line in said)
    workdir = Path(said[0].rsplit(" in ", 1)[1])
    assert not workdir.exists()


def test_the_rehearsal_withdraws_the_new_release_and_moves_the_machine_back() -> None:
    """With stand-in builds (every step but the real build's): the withdrawal end to end,
    read by builds that trust the rehearsal's TUF root."""

    said: list[str] = []
    rehearsal.rehearse(standin=True, say=said.append)
    out = "\n".join(said)
    assert "rehearsal passed: 17 steps" in out, out
    for expected in (
        "withdraw mux 1.1.0 (mux-release withdraw: the index and TUF)",
        "changed: v1.1.0: withdrawn",  # the lifecycle verbs' report, a line per fact
        "/feed/releases.json with minisign key",
        "signed: the TUF repository: release-workflow v",
        "mux 1.1.0 was withdrawn by its publisher",
        "moved back to the kept mux 1.0.0",
        "moved back to 1.0.0 in",
        "without a download; the server kept pid",
    ):
        assert expected in out, out
