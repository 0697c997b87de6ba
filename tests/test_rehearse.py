"""``mux-release rehearse``: the whole release, offline, as the README's quick start runs it."""

from __future__ import annotations

import subprocess
import sys


def test_rehearsal_runs_every_step_and_cleans_up() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "release", "rehearse", "--standin"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "rehearsal passed: 10 steps" in out
    for expected in (
        "install mux 1.0.0 with install.sh",
        "attestation: ok: built by .github/workflows/release.yml@refs/tags/v1.1.0",
        "still running with its old pid",
        "status line: mux 1.1.0, protocol 2",
    ):
        assert expected in out, out
    workdir = out.splitlines()[0].rsplit(" in ", 1)[1]
    import os

    assert not os.path.exists(workdir)
