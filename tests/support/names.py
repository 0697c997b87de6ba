"""Names the documentation and the docstrings mention that must exist: every dotted name of
mux's own code (``updater.core.offer.decide_offer``, ``release.cli``), every ``*.py`` path
(``updater/files.py``, ``sources/base.py``), and in the pages every name in backticks that
starts with one of mux's subpackages (`` `core.request.ReleaseRequest` ``).

A dotted name resolves when its longest importable prefix is a module and the rest are
attributes of it; a short one when it does so below some package of ``updater`` or
``release`` (a page names a module by its last parts where its section says where it is) or
is another project's (`` `tuf.ngclient` ``); a path when a file of the repository ends with
it. What is made at build or run time and never sits in the checkout is named in
:data:`MADE_ELSEWHERE`.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("updater", "release")
PAGES = ("README.md", "CONTRIBUTING.md", "docs")

# `updater.files.read_small_file`, `release.cli`: not inside a path or a longer word
# (`.github/workflows/release.yml`, `mux-release.toml`) and not a file name.
DOTTED = re.compile(r"(?<![\w./-])((?:updater|release)(?:\.[A-Za-z_]\w*)+)")
FILE_SUFFIXES = frozenset({"py", "md", "yml", "yaml", "json", "toml", "lock", "txt", "sh", "spec"})
# `servers.status.retention_reports` in a page: a name in backticks, its first part the last
# part of a subpackage.
SHORT = re.compile(r"`([a-z_]\w*(?:\.[A-Za-z_]\w*)+)`")
PY_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")
# Named in the docs, never in the checkout: files mux's builds write, the placeholders of
# examples (a file list's entry, "tests/test_x.py -k name") and another project (github3.py).
MADE_ELSEWHERE = frozenset({"mux_entry.py", "test_x.py", "new.py", "github3.py"})
# Folders of the checkout that hold no file of its own (at its top), and caches anywhere.
SKIPPED_TOP = frozenset({".venv", ".git", "node_modules", "build", "dist"})


def texts(root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(where, text) for each page of the documentation and each docstring of mux's code."""
    for name in PAGES:
        path = root / name
        pages = sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.is_file() else []
        for page in pages:
            yield str(page.relative_to(root)), page.read_text(encoding="utf-8")
    for package in PACKAGES:
        for source in sorted((root / package).rglob("*.py")):
            tree = ast.parse(source.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node, clean=False)
                    if doc:
                        line = getattr(node, "lineno", 1)
                        yield f"{source.relative_to(root)}:{line}", doc


def modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Each module's and package's last name, with the packages it is in (``folder``:
    ``updater.sources`` and ``release``), for the short names of the pages."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if len(parts) > 1:
                found.setdefault(parts[-1], []).append(".".join(parts[:-1]))
    return found


def subpackages(root: Path = ROOT) -> set[str]:
    """The last names of the subpackages: a short name of a page is checked when it starts
    with one. Not a module's: the pages' JSON fields (`` `lifecycle.withdrawn` ``,
    `` `source.set_by` ``) share names with modules."""
    return {
        path.parent.name
        for package in PACKAGES
        for path in (root / package).rglob("__init__.py")
        if path.parent != root / package
    }


def short_resolves(short: str, within: dict[str, list[str]]) -> bool:
    """Whether ``short`` (`` `folder.ReleaseFolderSource` ``) names something below one of
    the packages its first part is in, or another project's (`` `tuf.ngclient` ``)."""
    if any(resolves(f"{package}.{short}") for package in within[short.split(".")[0]]):
        return True
    return resolves(short) and not short.startswith(PACKAGES)


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of this checkout or an attribute of one."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:length]))
        except ImportError:
            continue
        for attribute in parts[length:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def python_files(root: Path = ROOT) -> set[str]:
    """Every ``*.py`` path of the checkout, relative to its root."""
    return {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.relative_to(root).parts[0] not in SKIPPED_TOP
        and "__pycache__" not in path.relative_to(root).parts
    }


def exists(mentioned: str, files: set[str]) -> bool:
    """Whether a file of the checkout is ``mentioned`` or ends with it (``sources/base.py``)."""
    return mentioned in files or any(f.endswith(f"/{mentioned}") for f in files)


def stale_names(root: Path = ROOT) -> list[str]:
    """Each mention of a module, attribute or ``*.py`` file that does not exist, with where."""
    files = python_files(root)
    # The checkout's own modules: the names are imported from it.
    within, checked = modules(), subpackages()
    found: list[str] = []
    for where, text in texts(root):
        if where.endswith(".md"):
            for short in sorted(set(SHORT.findall(text))):
                last = short.rsplit(".", 1)[-1]
                if short.split(".")[0] not in checked or last in FILE_SUFFIXES:
                    continue
                if not short_resolves(short, within):
                    found.append(f"{where}: {short} does not exist")
        for dotted in sorted(set(DOTTED.findall(text))):
            dotted = dotted.rstrip(".")
            if dotted.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            if not resolves(dotted):
                found.append(f"{where}: {dotted} does not exist")
        for mentioned in sorted(set(PY_PATH.findall(text))):
            if Path(mentioned).name in MADE_ELSEWHERE or exists(mentioned, files):
                continue
            found.append(f"{where}: {mentioned} does not exist")
    return found
