"""Which flags of ``mux update`` go together: one validation of the request (pure, no I/O).

``mux update`` does one thing per call: a check (``--check``), a plan (``--dry-run``), a
rollback, a prune, a change of the user's state (``--skip``, ``--unskip``, ``--hold``,
``--unhold``), or else an update. Each takes the flags in :data:`TAKES` (those of
:data:`EVERY_MODE`, ``--json``, ``--quiet`` and ``--verbose``, go with every one); anything else on the line would be ignored, so it is refused instead, with one
line naming both flags (exit 2), before anything is read or changed. Both entry points (the
check's fast path and the typer command) call :func:`refusal`.

Stdlib only: the cached check's fast path calls it.
"""

from __future__ import annotations

from updater.errors import UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

# What `mux update` does instead of an update, in the order they are named in an error.
MODES = (
    "--check",
    "--dry-run",
    "--rollback",
    "--prune",
    "--skip",
    "--unskip",
    "--hold",
    "--unhold",
    "--stage",
    "--unstage",
)
_RELEASE = frozenset(
    {
        "--source",
        "--pre",
        "--version",
        "--home",
        "--trust-key",
        "--allow-expired-feed",
        "--allow-downgrade",
        "--allow-withdrawn",
        "--insecure-skip-attestation",
    }
)
# What each mode takes besides itself and --json ("": a plain update).
TAKES: dict[str, frozenset[str]] = {
    "": _RELEASE | {"--no-delta", "--exit-code"},
    "--check": _RELEASE | {"--max-age"},
    "--dry-run": _RELEASE | {"--no-delta"},
    "--rollback": frozenset({"--home", "--exit-code"}),
    "--prune": frozenset({"--home"}),
    "--skip": frozenset(),
    "--unskip": frozenset(),
    "--hold": frozenset(),
    "--unhold": frozenset(),
    "--stage": _RELEASE | {"--no-delta"},
    "--unstage": frozenset({"--home"}),
}
# What goes with every mode: the form of the answer.
EVERY_MODE = frozenset({"--json", "--quiet", "--verbose"})
# A flag that means something only beside another.
NEEDS = {"--allow-downgrade": "--version", "--allow-withdrawn": "--version"}
# Two flags a mode takes that contradict each other.
EXCLUSIVE = (("--pre", "--version"),)
_WHAT = {
    "": "mux update installs the newest release (or --version X)",
    "--check": "--check only says whether an update is available (and exits with its codes)",
    "--dry-run": "--dry-run prints the plan of an update",
    "--rollback": "--rollback switches back to the version active before the current one",
    "--prune": "--prune removes the installed versions nothing needs",
    "--skip": "--skip X goes alone",
    "--unskip": "--unskip X goes alone",
    "--hold": "--hold DURATION goes alone",
    "--unhold": "--unhold goes alone",
    "--stage": "--stage downloads and verifies a release for a later mux update to apply",
    "--unstage": "--unstage removes the staged release",
}
_WHY_NEEDED = {
    "--allow-downgrade": "it lets --version X install an older release",
    "--allow-withdrawn": "a withdrawn release is installed only when asked for by version",
}


def refusal(given: Collection[str]) -> UsageError | None:
    """The error for a combination of flags ``mux update`` will not honour (each flag once,
    by its long name, :data:`EVERY_MODE`'s aside); None when it honours every one of them."""
    modes = [mode for mode in MODES if mode in given]
    if len(modes) > 1:
        first, second = modes[:2]
        return UsageError(f"{first} and {second} do not go together", hint=_WHAT[first])
    mode = modes[0] if modes else ""
    takes = TAKES[mode]
    for flag in sorted(set(given) - {mode, *EVERY_MODE}):
        if flag not in takes:
            return UsageError(
                f"{flag} does not go with {mode}" if mode else f"{flag} goes with --check",
                hint=_WHAT[mode],
            )
    for flag, needed in NEEDS.items():
        if flag in given and needed not in given:
            return UsageError(f"{flag} goes with {needed} X", hint=_WHY_NEEDED[flag])
    for one, other in EXCLUSIVE:
        if one in given and other in given:
            return UsageError(
                f"{one} and {other} do not go together",
                hint=f"{other} X names the release exactly (a pre-release too)",
            )
    return None


def given_flags(values: Mapping[str, object]) -> list[str]:
    """The flags given, from their values as parsed (None, False or empty: not given)."""
    return [
        flag
        for flag, value in values.items()
        if value is not None and value is not False and value != []
    ]
