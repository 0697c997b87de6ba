"""What to say when a directory mux must change cannot be written (pure, no I/O).

Who owns it decides the advice: a directory another user owns is theirs to update (run the
update as them, or reinstall into one of your own); one you own whose mode lets nobody write
it (``chmod 555``) is yours to fix with ``chmod u+w``, and blaming its owner (you) confuses.
"""

from __future__ import annotations

import stat

from updater.core.nextstep import quote


def unwritable(path: str, *, owner: str, yours: bool, mode: int) -> tuple[str, str]:
    """The message and the hint for ``path`` that cannot be written (``mode``: its
    ``st_mode``; ``yours``: it belongs to the user running mux)."""
    bits = f"{stat.S_IMODE(mode):04o}"
    if yours and not mode & stat.S_IWUSR:
        return (
            f"cannot write {path}: you own it, but its mode {bits} lets no one write it",
            f"make it writable (chmod u+w {quote(path)}), or set MUX_HOME / MUX_INSTALL_DIR "
            "to a directory you can write",
        )
    if yours:
        return (
            f"cannot write {path}, although you own it and its mode {bits} allows it",
            "check its attributes (lsattr, ACLs) and how its file system is mounted",
        )
    return (
        f"cannot write {path} (owned by {owner})",
        f"run the update as {owner}, or reinstall into a directory you own "
        "(MUX_HOME / MUX_INSTALL_DIR) with install.sh",
    )
