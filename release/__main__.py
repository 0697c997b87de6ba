"""``python -m release`` and the ``mux-release`` command.

``mux-release tuf-client`` (the conformance suite's client-under-test, started a few hundred
times per run of the suite) goes straight to :mod:`release.rehearsal.tuf_client`, without typer
and the release modules ``release.cli`` imports: 0.5 s of CPU a start instead of 0.9 s, measured
with ``time`` here. Every other command goes through :mod:`release.cli`.
"""

import sys


def main() -> None:
    if sys.argv[1:2] == ["tuf-client"]:
        # deferred: python-tuf and httpx, without the CLI's modules (the docstring)
        from release.rehearsal.tuf_client import main as tuf_client

        raise SystemExit(tuf_client(sys.argv[2:]))
    # deferred: the CLI, only when it is the command
    from release.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
