"""What a person reads (issue 38, polish): a successful update in about three lines (what
changed, what was kept, what to restart), the layers with ``-v``, nothing with ``-q``; a first
install says "installed"; one size format; ``mux: error:`` / ``mux: warning:``; colour on a
terminal only. In-process, through the renderer and the CLI's entry point."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.feeds import trusting, write_feed, write_release
from tests.support.inprocess import run_in_process
from updater.cli import app as cli_app
from updater.cli.check import parse_check
from updater.cli.render import (
    DEFAULT,
    QUIET,
    VERBOSE,
    ConsoleEvents,
    error_line,
    human_size,
    painted,
    update_text,
    warning_line,
)
from updater.cli.server import server_app
from updater.commands.update import UpdateAction, UpdateResult
from updater.core.transfer import Transfer
from updater.core.update_flags import refusal
from updater.core.verdicts import ServerReport, server_verdicts
from updater.install.layout import Layout
from updater.protocol import StatusLine
from updater.trust.layers import LayerResult

LAYERS = tuple(
    LayerResult(layer, "ok", f"{layer} checked")
    for layer in ("signature", "manifest", "digest", "attestation", "archive", "smoke-test")
)


def _server(version: str, protocol: int) -> ServerReport:
    status = StatusLine("mux", protocol, version, 42, "2026-01-01T00:00:00Z", f"/v/{version}/mux")
    return ServerReport("/run/mux/a.sock", "live", status, "ok", executable=f"/v/{version}/mux")


def _updated(*, from_version: str | None = "1.0.0", server_protocol: int = 1) -> UpdateResult:
    servers = server_verdicts(
        [_server("1.0.0", server_protocol)], running_protocol=2, current_version="1.1.0"
    )
    return UpdateResult(
        action=UpdateAction.UPDATED,
        layout=Layout("/h", "/b"),
        from_version=from_version,
        to_version="1.1.0",
        target="x86_64-unknown-linux-gnu",
        protocol_version=2,
        verification=LAYERS,
        servers=servers,
        removed_versions=("0.8.0", "0.9.0"),
        transfer=Transfer("delta", 300 * 1024, 12 * 1024 * 1024, delta_from="1.0.0"),
    )


def test_a_successful_update_says_what_changed_was_kept_and_to_restart() -> None:
    lines = update_text(_updated()).splitlines()
    assert lines == [
        "updated mux 1.0.0 → 1.1.0",
        "  previous version 1.0.0 kept: mux update --rollback",
        "  removed 0.8.0, 0.9.0 (no running mux found using them)",
        "server /run/mux/a.sock (pid 42, mux 1.0.0) speaks protocol 1; mux 1.1.0 speaks 2. It "
        "keeps running; restart it when convenient (this ends the programs in it):",
        "  mux server restart --socket /run/mux/a.sock",
    ]


def test_verbose_adds_every_layer_the_download_and_the_link() -> None:
    text = update_text(_updated(), verbosity=VERBOSE)
    assert "  target: x86_64-unknown-linux-gnu\n" in text
    for layer in LAYERS:
        assert f"  {layer.layer}: ok: {layer.detail}\n" in text
    assert "  download: a delta from 1.0.0, 300.0 KiB (2.4% of the 12.0 MiB archive)\n" in text
    assert "  /b/mux → /h/versions/1.1.0\n" in text
    assert "  removed 0.8.0: no running mux found using it, and it is not needed\n" in text
    default = update_text(_updated(), verbosity=DEFAULT)
    assert "signature" not in default and "download" not in default
    assert set(default.splitlines()) <= set(text.splitlines()) | {
        "  removed 0.8.0, 0.9.0 (no running mux found using them)"
    }


def test_quiet_prints_nothing() -> None:
    assert update_text(_updated(), verbosity=QUIET) == ""


def test_a_server_with_nothing_to_do_is_said_with_v_only() -> None:
    servers = server_verdicts([_server("1.1.0", 2)], running_protocol=2, current_version="1.1.0")
    result = UpdateResult(
        action=UpdateAction.UP_TO_DATE,
        layout=Layout("/h", "/b"),
        from_version="1.1.0",
        to_version="1.1.0",
        target="t",
        protocol_version=2,
        servers=servers,
    )
    assert update_text(result) == "mux 1.1.0 is already installed in /h"
    assert "nothing to do, it keeps running" in update_text(result, verbosity=VERBOSE)


def test_a_first_install_says_installed() -> None:
    first = update_text(_updated(from_version=None, server_protocol=2)).splitlines()
    assert first[0] == "installed mux 1.1.0"
    assert not any("(none)" in line or "previous version" in line for line in first)


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (12 * 1024 * 1024, "12.0 MiB"),
        (3 * 1024**3 // 2, "1.5 GiB"),
        (5 * 1024**4, "5120.0 GiB"),
    ],
)
def test_one_size_format(size: int, shown: str) -> None:
    assert human_size(size) == shown


# -- prefixes and colour ---------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_errors_and_warnings_say_so_and_are_coloured_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert error_line("bad\x1b[2J", io.StringIO()) == "mux: error: bad\\x1b[2J"
    assert warning_line("odd", io.StringIO()) == "mux: warning: odd"
    assert error_line("bad", Terminal()) == "mux: \x1b[1;31merror:\x1b[0m bad"
    assert warning_line("odd", Terminal()) == "mux: \x1b[33mwarning:\x1b[0m odd"
    monkeypatch.setenv("TERM", "dumb")
    assert painted("error:", "1;31", Terminal()) == "error:"
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", "1")
    assert painted("error:", "1;31", Terminal()) == "error:"


def test_a_warning_while_updating_is_one_prefixed_line(capsys: pytest.CaptureFixture[str]) -> None:
    ConsoleEvents(progress_bar=False).warning("the delta was not used")
    assert capsys.readouterr() == ("", "mux: warning: the delta was not used\n")
    quiet = ConsoleEvents(progress_bar=False, quiet=True)
    progress = quiet.progress("mux-x.tar.gz")
    progress.start(1024)
    progress.finish()
    assert capsys.readouterr() == ("", "")  # -q: no progress lines


# -- -q and -v on the command line -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["", "--check", "--dry-run", "--rollback", "--prune", "--unhold"])
@pytest.mark.parametrize("form", ["--quiet", "--verbose"])
def test_q_and_v_go_with_every_mode(mode: str, form: str) -> None:
    assert refusal([flag for flag in (mode, form) if flag]) is None


def test_the_check_s_fast_path_reads_q_and_v() -> None:
    assert parse_check(["--check", "-q"]) == parse_check(["--check", "--quiet"])
    flags = parse_check(["-v", "--check"])
    assert flags is not None and flags.verbose and not flags.quiet


def test_q_still_says_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_app.run(["update", "--check", "-q", "--source", "/nonexistent/feed"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("mux: error: release feed /nonexistent/feed is not a directory")
    code = cli_app.run(["update", "--check", "-q", "--json", "--source", "/nonexistent/feed"])
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"


def test_server_verbs_take_q(tmp_path: Path) -> None:
    socket = str(tmp_path / "nobody.sock")
    said = CliRunner().invoke(server_app, ["stop", "--socket", socket])
    assert (said.exit_code, said.stdout) == (0, f"no mux server runs on {socket}\n")
    quiet = CliRunner().invoke(server_app, ["stop", "-q", "--socket", socket])
    assert (quiet.exit_code, quiet.stdout) == (0, "")


def test_q_answers_a_check_by_its_exit_code_alone(
    tmp_path: Path, sandbox_env: dict[str, str]
) -> None:
    root = tmp_path / "feed"
    for version in ("1.0.0", "9.0.0"):
        write_release(root, version)
    write_feed(root, [("v1.0.0", False), ("v9.0.0", False)])
    args = ["update", "--check", "--source", str(root), *trusting()]
    said = run_in_process(args, sandbox_env)
    assert said.returncode == 10 and "9.0.0" in said.stdout, said.stderr
    quiet = run_in_process([*args, "-q"], sandbox_env)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (10, "", "")
    verbose = run_in_process([*args, "--verbose"], sandbox_env)
    assert (verbose.returncode, verbose.stdout) == (10, said.stdout)
