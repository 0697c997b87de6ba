"""Entry point of ``mux``, with the fast paths that must not pay for typer.

``mux version`` and ``mux update --check`` (what a sidebar calls every few minutes, usually
with ``--max-age``) are answered here without the CLI framework: ``mux version`` and a cached
check with the stdlib alone, an uncached check with the HTTP stack but no typer. Anything else
(help, usage errors, every other command) goes to the typer CLI in :mod:`updater.cli.app`.
"""

from __future__ import annotations

import sys

_CHECK_VALUE_FLAGS = {"--max-age", "--source", "--version"}
_CHECK_LIST_FLAGS = {"--trust-key"}  # may be given more than once
_CHECK_BARE_FLAGS = {"--check", "--json", "--pre", "--allow-expired-feed"}


def _parse_check(args: list[str]) -> dict[str, object] | None:
    """The flags of an ``update --check`` call, or None if it is anything else."""
    flags: dict[str, object] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        name, eq, value = arg.partition("=")
        if name in _CHECK_VALUE_FLAGS or name in _CHECK_LIST_FLAGS:
            if not eq:
                position += 1
                if position >= len(args):
                    return None
                value = args[position]
            if name in _CHECK_LIST_FLAGS:
                listed = flags.setdefault(name, [])
                assert isinstance(listed, list)
                listed.append(value)
            else:
                flags[name] = value
        elif arg in _CHECK_BARE_FLAGS and not eq:
            flags[arg] = True
        else:
            return None
        position += 1
    if "--check" not in flags:
        return None
    return flags


def _fast_path(args: list[str]) -> int | None:
    if args == ["__verify-attestation"]:  # updater.trust.attestation_worker.WORKER_ARG: its child
        from updater.trust.attestation_worker import serve

        return serve()
    if args in (["version"], ["version", "--json"]):
        from updater.cli.fast import print_version

        return print_version(as_json=len(args) == 2)
    if args[:1] == ["update"]:
        flags = _parse_check(args[1:])
        if flags is not None:
            from updater.cli.fast import answer_check

            return answer_check(flags)
    return None


def main() -> None:
    # First of all: this process uses its version folder, which no prune may remove until it
    # exits (updater.install.inuse). A build that was removed while this process started stops here.
    from updater.install.inuse import hold_running_build

    removed = hold_running_build()
    if removed is not None:
        print(f"mux: {removed}", file=sys.stderr)
        sys.exit(1)
    args = sys.argv[1:]
    code = _fast_path(args)
    if code is None:
        if args[:1] == ["update"]:
            # Before the CLI's imports: the attestation's child imports sigstore beside them.
            from updater.trust.attestation_worker import prestart

            prestart(args[1:])
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
