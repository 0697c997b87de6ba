"""Entry point of ``mux``, with the fast paths that must not pay for typer.

``mux version`` and ``mux update --check`` (what a sidebar calls every few minutes, usually
with ``--max-age``) are answered here without the CLI framework: ``mux version`` and a cached
check with the stdlib alone, an uncached check with the HTTP stack but no typer. Anything else
(help, usage errors, every other command) goes to the typer CLI in :mod:`updater.cli.app`.
"""

from __future__ import annotations

import sys

# The first of mux's modules every process imports, and the only one before the hold (main).
from updater.install.inuse import hold_running_build

# `mux --version` and `mux -V` answer as `mux version` does, on its path (what uv, gh, rustup
# and mise answer to --version, and tmux to -V).
VERSION_FLAGS = (["--version"], ["-V"])
# What a bare `mux update` may carry and still apply a staged release here (updater.cli.staged).
STAGED_FLAGS = frozenset({"--json", "-q", "--quiet", "-v", "--verbose"})


def _fast_path(args: list[str]) -> int | None:
    # Each path imports what it runs, after the hold on this build (main): the fastest paths
    # import none of the others (tests/test_imports.py).
    if args == ["__verify-attestation"]:  # updater.trust.attestation_start.WORKER_ARG: its child
        # deferred (+37 ms, 86 modules): the child's side, for the child only
        from updater.trust.attestation_worker import serve

        return serve()
    if args in (["version"], ["version", "--json"], *VERSION_FLAGS):
        # deferred (+27 ms, 29 modules): render and the build info, for `mux version` only
        from updater.cli.version import print_version

        return print_version(as_json=args[-1] == "--json")
    if args[:1] == ["update"] and "--check" in args:
        # deferred (+76 ms, 51 modules): the cached check's modules, no HTTP stack
        from updater.cli import check

        flags = check.parse_check(args[1:])
        if flags is not None:
            return check.answer_check(flags)
    if args[:1] == ["update"] and set(args[1:]) <= STAGED_FLAGS:
        # deferred (+100-140 ms against 335-395 ms for typer and the update's imports, measured
        # in one run): a staged release applied from a recent signed answer, no HTTP stack
        from updater.cli import staged

        return staged.answer(args[1:])
    return None


def main() -> None:
    # First of all: this process uses its version folder, which no prune may remove until it
    # exits (updater.install.inuse). A build that was removed while this process started stops here.
    removed = hold_running_build()
    if removed is not None:
        print(f"mux: error: {removed}", file=sys.stderr)  # as render.error_line
        sys.exit(1)
    args = sys.argv[1:]
    code = _fast_path(args)
    if code is None:
        if args[:1] == ["update"]:
            # Before the CLI's imports: the attestation's child imports sigstore beside them.
            # deferred (+29 ms, 49 modules): only `mux update` starts the child, first thing
            from updater.trust.attestation_start import prestart

            prestart(args[1:])
        # deferred (+270 ms, 190 modules): typer and the CLI, for every path the above does
        # not take
        from updater.cli.app import run

        code = run(args)
    # The interpreter's last garbage collection walks every object still alive: after
    # `mux update` (httpx, cryptography; sigstore too, then in this process) it took longer
    # than the switch to the new version. Nothing needs it (no finalizer of ours relies on it;
    # atexit handlers and stream flushing still run), so its objects are frozen out of it.
    import gc

    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
