"""The checkout the release tooling runs from: where its files are, and how it rewrites one.

Release jobs run ``python -m release`` from a checkout (nothing is installed there), so the
tooling reads the repository's own files: ``pyproject.toml``, ``LICENSE``, ``install.sh``,
``THIRD_PARTY_NOTICES.md``, and the data files kept in ``release/`` beside the code
(``pins.toml``, ``licenses/``, ``mux.spec``, ``protocol.lock``, the workflow's shell scripts).
Every module finds them from :data:`REPO_ROOT` and :data:`RELEASE_DIR`, never from its own
place in the package.
"""

from __future__ import annotations

from pathlib import Path

from updater.files import atomic_write

RELEASE_DIR = Path(__file__).resolve().parent
REPO_ROOT = RELEASE_DIR.parent


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8, LF) to ``path`` via a temp file in the same folder + rename."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644  # a committed file, readable by all like the rest of the checkout
    atomic_write(path, text.encode("utf-8"), mode=mode)
