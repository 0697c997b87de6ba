"""``mux`` run inside the test's own process: :func:`run_in_process` takes the arguments and
the environment a real process would get and answers as :func:`tests.support.processes.run_mux`
does (exit code, stdout, stderr), through :func:`updater.cli.app.run`, which returns the exit
code and turns every failure into its one line.

A process costs about 0.3 s of CPU (most of it imports); here a command costs what it does.
Use it wherever the process is not what is tested: the exit codes, one-line errors, locks,
signals and sockets of a real process keep their real-process tests (``run_mux``).

The environment is the process's whole environment for the duration of the call (then put
back), standard input is empty, and stdout and stderr are captured as text.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping

from updater.cli.app import run


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside, what it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_in_process(args: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``mux ARGS`` in this process, with ``env`` as its environment."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environment(env),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        _empty_stdin(),
    ):
        code = run(list(args))
    return subprocess.CompletedProcess(["mux", *args], code, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved
