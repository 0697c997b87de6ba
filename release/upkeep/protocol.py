"""``mux-release protocol``: no change to the protocol-bearing code without a version bump.

Protocol-bearing code is what a mux client and a mux server must agree on: the status line and
the control surface, kept in :data:`PROTOCOL_BEARING_FILES`. Its fingerprint is the sha256 of
a normalised AST of those files, so comments, docstrings and formatting do not count, and
neither does the value of ``PROTOCOL_VERSION`` itself (the version is recorded beside it).

``release/protocol.lock`` records ``{protocol_version, fingerprint, files}``. The check fails
when the fingerprint moved while the version did not, and ``--record`` refuses to record such
a state. When a ``v*`` release tag exists, the same comparison runs against the files at that
tag (``git show``), so a hand-edited lock cannot hide a change since the last release.
Protocol bumps are cheap; shipping a changed protocol under an old number is not.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from release.checkout import REPO_ROOT, write_text_atomically
from updater.errors import MuxError

# Every file whose content is protocol: change one and PROTOCOL_VERSION must change.
PROTOCOL_BEARING_FILES: tuple[str, ...] = ("updater/protocol.py",)
# The file defining ``PROTOCOL_VERSION = <int>`` at module level.
VERSION_FILE = "updater/protocol.py"
VERSION_NAME = "PROTOCOL_VERSION"
LOCK_PATH = "release/protocol.lock"
LOCK_SCHEMA = 1
RECORD_COMMAND = "mux-release protocol --record"


class ProtocolError(MuxError):
    """The protocol-bearing code and its recorded version disagree, or cannot be read."""


@dataclass(frozen=True)
class CompatibleChange:
    """A change of the protocol-bearing code recorded under the same version on purpose:
    what old clients and servers still understand (an optional field they ignore), with why."""

    before: str  # the fingerprint it changed from
    after: str  # the fingerprint it changed to
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"from": self.before, "to": self.after, "reason": self.reason}


@dataclass(frozen=True)
class ProtocolState:
    """The protocol version and fingerprints of one tree (the checkout, a tag, the lock)."""

    protocol_version: int
    fingerprint: str
    files: Mapping[str, str]  # path -> fingerprint of that file
    # Only a lock has these: the changes recorded as compatible (--compatible).
    compatible: tuple[CompatibleChange, ...] = ()

    def same_code(self, other: ProtocolState) -> bool:
        return (self.protocol_version, self.fingerprint) == (
            other.protocol_version,
            other.fingerprint,
        )

    def changed_files(self, other: ProtocolState) -> list[str]:
        return sorted(
            path
            for path in set(self.files) | set(other.files)
            if self.files.get(path) != other.files.get(path)
        )

    def to_json(self) -> str:
        doc = {
            "schema": LOCK_SCHEMA,
            "protocol_version": self.protocol_version,
            "fingerprint": self.fingerprint,
            "files": dict(sorted(self.files.items())),
            **({"compatible": [c.to_json() for c in self.compatible]} if self.compatible else {}),
        }
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# --- fingerprinting (pure) --------------------------------------------------------------


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and _is_docstring(body[0]):
                node.body = body[1:] or [ast.Pass()]


def _is_version_assignment(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == VERSION_NAME for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == VERSION_NAME
    return False


def _normal_form(node: Any) -> Any:
    """A JSON-able form of an AST that does not change across Python versions.

    ``ast.dump`` gains fields between releases (``type_params`` in 3.12, ...); dropping empty
    fields keeps the fingerprint of unchanged code stable when the interpreter changes.
    """
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or value == []:
                continue
            fields.append([name, _normal_form(value)])
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_normal_form(item) for item in node]
    if isinstance(node, bytes):
        return ["bytes", node.hex()]
    if isinstance(node, complex | float):
        return [type(node).__name__, repr(node)]
    if node is Ellipsis:
        return ["Ellipsis"]
    return node


def protocol_version_of(source: str, *, path: str = VERSION_FILE) -> int:
    """The integer ``PROTOCOL_VERSION = N`` assigned at module level in ``source``."""
    tree = _parse(source, path)
    for node in tree.body:
        if _is_version_assignment(node):
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, int)
                and not isinstance(value.value, bool)
            ):
                return value.value
            raise ProtocolError(f"{path}: {VERSION_NAME} must be assigned an integer literal")
    raise ProtocolError(f"{path} does not define {VERSION_NAME}")


def _parse(source: str, path: str) -> ast.Module:
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise ProtocolError(f"{path} does not parse: {exc.msg} (line {exc.lineno})") from None


def file_fingerprint(source: str, *, path: str) -> str:
    """sha256 of the normalised AST: no comments, docstrings, layout or version value."""
    tree = _parse(source, path)
    _strip_docstrings(tree)
    for node in tree.body:
        if _is_version_assignment(node) and isinstance(node, ast.Assign | ast.AnnAssign):
            node.value = ast.Name(id=VERSION_NAME)
    encoded = json.dumps(_normal_form(tree), separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(encoded.encode()).hexdigest()


def protocol_state(sources: Mapping[str, str]) -> ProtocolState:
    """The state of a tree, from the text of each protocol-bearing file (path -> source)."""
    missing = [path for path in PROTOCOL_BEARING_FILES if path not in sources]
    if missing:
        raise ProtocolError("protocol-bearing file(s) missing: " + ", ".join(missing))
    files = {path: file_fingerprint(sources[path], path=path) for path in PROTOCOL_BEARING_FILES}
    combined = hashlib.sha256(
        "".join(f"{path}\0{digest}\n" for path, digest in sorted(files.items())).encode()
    ).hexdigest()
    return ProtocolState(
        protocol_version=protocol_version_of(sources[VERSION_FILE], path=VERSION_FILE),
        fingerprint=combined,
        files=files,
    )


def parse_lock(text: str, *, path: str = LOCK_PATH) -> ProtocolState:
    try:
        doc = json.loads(text)
    except ValueError:
        raise ProtocolError(f"{path} is not valid JSON", hint=f"run {RECORD_COMMAND}") from None
    version = doc.get("protocol_version") if isinstance(doc, dict) else None
    fingerprint = doc.get("fingerprint") if isinstance(doc, dict) else None
    files = doc.get("files") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != LOCK_SCHEMA
        or isinstance(version, bool)
        or not isinstance(version, int)
        or not isinstance(fingerprint, str)
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    ):
        raise ProtocolError(f"{path} is malformed", hint=f"run {RECORD_COMMAND}")
    return ProtocolState(
        protocol_version=version,
        fingerprint=fingerprint,
        files=files,
        compatible=_compatible_changes(doc.get("compatible", []), path),
    )


def _compatible_changes(entries: object, path: str) -> tuple[CompatibleChange, ...]:
    keys = ("from", "to", "reason")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and all(isinstance(e.get(k), str) for k in keys) for e in entries
    ):
        raise ProtocolError(f"{path}: compatible is malformed", hint=f"run {RECORD_COMMAND}")
    return tuple(CompatibleChange(e["from"], e["to"], e["reason"]) for e in entries)


# --- comparisons (pure) -----------------------------------------------------------------


def compare(
    current: ProtocolState,
    reference: ProtocolState,
    *,
    what: str,
    compatible: tuple[CompatibleChange, ...] = (),
) -> str | None:
    """Why ``current`` is not an acceptable successor of ``reference`` (None if it is): a
    change under the same version passes only through changes recorded as ``compatible``."""
    if current.protocol_version < reference.protocol_version:
        return (
            f"{VERSION_NAME} went back from {reference.protocol_version} to "
            f"{current.protocol_version} since {what}"
        )
    if (
        current.fingerprint != reference.fingerprint
        and current.protocol_version == reference.protocol_version
        and not _recorded_path(reference.fingerprint, current.fingerprint, compatible)
    ):
        changed = ", ".join(current.changed_files(reference)) or "protocol-bearing code"
        return (
            f"{changed} changed since {what} but {VERSION_NAME} is still "
            f"{current.protocol_version}: bump {VERSION_NAME} and run {RECORD_COMMAND}"
        )
    return None


def _recorded_path(start: str, end: str, changes: tuple[CompatibleChange, ...]) -> bool:
    """``end`` follows from ``start`` through changes recorded as compatible."""
    reached, frontier = {start}, [start]
    while frontier:
        here = frontier.pop()
        for change in changes:
            if change.before == here and change.after not in reached:
                reached.add(change.after)
                frontier.append(change.after)
    return end in reached


# --- I/O --------------------------------------------------------------------------------


GitRunner = Callable[[list[str]], "str | None"]


def _git(root: Path) -> GitRunner:
    def run(args: list[str]) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    return run


def read_sources(root: Path) -> dict[str, str]:
    sources = {}
    for relative in PROTOCOL_BEARING_FILES:
        try:
            sources[relative] = (root / relative).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"cannot read {relative}: {exc}") from None
    return sources


def last_release_state(
    root: Path, git: GitRunner | None = None
) -> tuple[str, ProtocolState] | None:
    """The newest ``v*`` tag and the protocol state at it; None without tags (or git)."""
    git = git or _git(root)
    tag = (git(["describe", "--tags", "--abbrev=0", "--match", "v*"]) or "").strip()
    if not tag:
        return None
    sources = {}
    for relative in PROTOCOL_BEARING_FILES:
        text = git(["show", f"refs/tags/{tag}:{relative}"])
        if text is None:
            return None  # the file did not exist yet at that release: nothing to compare
        sources[relative] = text
    return tag, protocol_state(sources)


@dataclass(frozen=True)
class ProtocolReport:
    current: ProtocolState
    recorded: ProtocolState | None
    release_tag: str | None

    def summary(self) -> str:
        since = f"; unchanged since {self.release_tag}" if self.release_tag else ""
        return (
            f"protocol version {self.current.protocol_version} "
            f"(fingerprint {self.current.fingerprint[:12]}, matches {LOCK_PATH}{since})"
        )


def _read_lock(lock_path: Path) -> ProtocolState | None:
    try:
        text = lock_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"cannot read {lock_path}: {exc}") from None
    return parse_lock(text, path=str(lock_path))


def check_protocol(root: Path = REPO_ROOT, *, git: GitRunner | None = None) -> ProtocolReport:
    """``mux-release protocol``: raise :class:`ProtocolError` on any forgotten bump."""
    current = protocol_state(read_sources(root))
    recorded = _read_lock(root / LOCK_PATH)
    compatible = recorded.compatible if recorded is not None else ()
    release = last_release_state(root, git)
    if release is not None:
        problem = compare(current, release[1], what=f"release {release[0]}", compatible=compatible)
        if problem:
            raise ProtocolError(problem)
    if recorded is None:
        raise ProtocolError(f"{LOCK_PATH} does not exist", hint=f"run {RECORD_COMMAND}")
    problem = compare(current, recorded, what=f"{LOCK_PATH} was recorded")
    if problem:
        raise ProtocolError(problem)
    if not current.same_code(recorded):
        raise ProtocolError(
            f"{VERSION_NAME} is {current.protocol_version} but {LOCK_PATH} records "
            f"{recorded.protocol_version}: run {RECORD_COMMAND}"
        )
    return ProtocolReport(
        current=current, recorded=recorded, release_tag=release[0] if release else None
    )


def record_protocol(
    root: Path = REPO_ROOT, *, git: GitRunner | None = None, compatible: str | None = None
) -> ProtocolState:
    """``--record``: write the lock for the current state, unless that would hide a change.

    ``compatible`` (why): record a change under the same version on purpose, for what old
    clients and servers still understand; the lock keeps it, and the check lets it through."""
    current = protocol_state(read_sources(root))
    lock_path = root / LOCK_PATH
    recorded = _read_lock(lock_path)
    if recorded is not None:
        current = replace(current, compatible=recorded.compatible)
        if compatible is not None and not current.same_code(recorded):
            if current.protocol_version != recorded.protocol_version:
                raise ProtocolError(
                    "refusing to record: --compatible is for a change without a bump"
                )
            change = CompatibleChange(recorded.fingerprint, current.fingerprint, compatible)
            current = replace(current, compatible=(*recorded.compatible, change))
    release = last_release_state(root, git)
    if release is not None:
        problem = compare(
            current, release[1], what=f"release {release[0]}", compatible=current.compatible
        )
        if problem:
            raise ProtocolError(f"refusing to record: {problem}")
    if recorded is not None:
        problem = compare(
            current, recorded, what=f"{LOCK_PATH} was recorded", compatible=current.compatible
        )
        if problem:
            raise ProtocolError(f"refusing to record: {problem}")
    if recorded != current:
        write_text_atomically(lock_path, current.to_json())
    return current
