"""THIRD_PARTY_NOTICES.md: what a mux release ships from others, with every licence text.

A release ships

* the Python distributions in the runtime dependency closure of mux (the checkout's
  ``pyproject.toml`` dependencies, then each installed distribution's ``Requires-Dist``, walked
  with markers evaluated for this, the build, environment; mux's own extras are not
  followed), and
* every pinned artifact of ``release/pins.toml``, and
* what the standalone (PyInstaller) build carries besides Python distributions: the CPython
  interpreter and standard library (licence text: ``LICENSE.txt`` in the running
  interpreter's standard library folder) and PyInstaller's bootloader, the ``mux``
  executable itself (licence text: ``COPYING.txt`` of the installed PyInstaller
  distribution). The build is made with the interpreter that runs ``mux-release``, so that
  is the one described. PyInstaller is a development dependency: without it the notices
  cannot be generated (an error naming it, never a release without the bootloader's
  licence); run ``uv sync``. Stand-in builds are never published, so they need no notices
  of their own.

Each distribution must carry a licence file (``License-File`` metadata, or licence-named files
in its RECORD, which also finds vendored code's licences). One without is an error naming it;
the only way past it is a reviewed entry in ``release/licenses/overrides.toml`` whose text is
pinned by sha256, and an override that is no longer needed is an error too.

The output is deterministic (see the notes' determinism checklist): entries sorted by code
point of the normalised name, each distinct licence text printed once under an identifier
derived from its sha256 and referenced from every user, LF endings, no timestamps or paths of
this machine. :func:`render_notices` is pure; the collection functions do the I/O.
"""

from __future__ import annotations

import hashlib
import platform
import re
import sysconfig
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.bill.components import Component, ComponentKind, LicenceText, normalise_text
from release.checkout import REPO_ROOT
from release.pins.pinfile import Pin, PinnedAsset, load_pins, pin_marker
from release.textdiff import capped_unified_diff
from updater.errors import MuxError

ROOT_DISTRIBUTION = "mux"
PYPROJECT = REPO_ROOT / "pyproject.toml"
OVERRIDES_NAME = "overrides.toml"
MAX_DIFF_LINES = 200

# The standalone build's runtime components (see the module docstring).
CPYTHON_LICENCE = "PSF-2.0"
CPYTHON_LICENCE_FILE = "LICENSE.txt"
PYINSTALLER_DISTRIBUTION = "pyinstaller"
BOOTLOADER_LICENCE = "GPL-2.0-or-later WITH Bootloader-exception"
BOOTLOADER_LICENCE_FILE = "COPYING.txt"

# Files a distribution carries that hold licence terms (LICENSE, LICENSE.txt, LICENSE-MIT,
# LICENCE.md, COPYING, NOTICE, ...). Source files that merely have such a name are not texts.
_LICENCE_NAME_RE = re.compile(r"(?:LICEN[CS]E|COPYING|NOTICE)(?:[._-][A-Za-z0-9._-]*)?", re.I)
_NOT_TEXT_SUFFIXES = frozenset({".py", ".pyc", ".pyi", ".pyd", ".so", ".dll", ".dylib", ".json"})
_BACKTICK_RUN_RE = re.compile(r"`+")


class NoticesError(MuxError):
    """The notices cannot be generated honestly (a missing licence, a stale override, ...)."""


class StaleNoticesError(MuxError):
    """THIRD_PARTY_NOTICES.md differs from what the current inputs generate."""


@dataclass(frozen=True)
class Distribution:
    """A shipped Python distribution; ``name`` is the normalised (PEP 503) name."""

    name: str
    version: str
    licence: str
    licence_files: tuple[LicenceText, ...] = field(default=())


@dataclass(frozen=True)
class PinnedArtifact:
    """A pinned artifact with its vendored licence text; ``files``: the pinned files to name
    (default: all of the pin's, e.g. only the one a build for a target ships)."""

    pin: Pin
    licence_text: LicenceText
    files: tuple[PinnedAsset, ...] | None = None


@dataclass(frozen=True)
class RuntimeComponent:
    """Something the standalone build ships that is no Python distribution (the interpreter,
    the bootloader); ``role`` says in one line what it is in the build."""

    name: str
    version: str
    licence: str
    role: str
    licence_text: LicenceText


def _normalise_name(name: str) -> str:

    return str(canonicalize_name(name))


# --- collection (I/O) -------------------------------------------------------------------


def _declared_licence(meta: Any) -> str:
    expression = meta.get("License-Expression")
    if expression and expression.strip():
        return " ".join(expression.split())
    licence = meta.get("License")
    short = (licence or "").strip()
    if short and "\n" not in short and len(short) <= 80 and short.upper() != "UNKNOWN":
        return short
    classifiers = sorted(
        c.removeprefix("License :: ").removeprefix("OSI Approved :: ")
        for c in meta.get_all("Classifier") or []
        if c.startswith("License :: ")
    )
    if classifiers:
        return "; ".join(classifiers) + " (classifier)"
    return "not declared (see the licence text)"


def _is_licence_file(path: PurePosixPath) -> bool:
    return (
        _LICENCE_NAME_RE.fullmatch(path.name) is not None
        and path.suffix.lower() not in _NOT_TEXT_SUFFIXES
    )


def distribution_licence_files(dist: metadata.Distribution) -> tuple[LicenceText, ...]:
    """Every licence file ``dist`` carries, labelled by its path inside site-packages."""
    files = list(dist.files or [])
    dist_info = next(
        (f.parts[0] for f in files if len(f.parts) == 2 and f.name == "METADATA"), None
    )
    found: dict[str, bytes] = {}
    for entry in dist.metadata.get_all("License-File") or []:
        # Metadata 2.4 puts them under .dist-info/licenses/; older wheels at the top.
        for relative in (f"licenses/{entry}", entry):
            path = PurePosixPath(relative)
            if path.is_absolute() or ".." in path.parts:
                break
            located = Path(str(dist.locate_file(f"{dist_info}/{relative}"))) if dist_info else None
            if located is not None and located.is_file():
                found[f"{dist_info}/{relative}"] = located.read_bytes()
                break
    for package_path in files:
        posix = PurePosixPath(package_path.as_posix())
        if ".." in posix.parts or posix.is_absolute() or not _is_licence_file(posix):
            continue
        label = posix.as_posix()
        if label in found:
            continue
        located = Path(str(package_path.locate()))
        if located.is_file():
            found[label] = located.read_bytes()
    texts = (LicenceText(label, normalise_text(raw)) for label, raw in found.items())
    return tuple(sorted((t for t in texts if t.text.strip()), key=lambda t: t.label))


def project_dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    """mux's runtime requirements, as the checkout's ``pyproject.toml`` declares them.

    Release jobs run the tooling from the source tree without installing the project (nothing
    is built there, docs/release.md), so mux's own distribution metadata is not installed.
    """

    try:
        doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        dependencies = doc["project"]["dependencies"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise NoticesError(f"cannot read mux's dependencies from {pyproject}: {exc}") from None
    return [str(line) for line in dependencies]


def _root_requirements(root: str) -> list[str]:
    if _normalise_name(root) == ROOT_DISTRIBUTION:
        return project_dependencies()
    try:
        return list(metadata.distribution(root).requires or [])
    except metadata.PackageNotFoundError:
        raise NoticesError(f"{root} is not installed, so its licence is unknown") from None


def _requirement_closure(root: str) -> list[metadata.Distribution]:
    """The installed runtime closure of ``root`` (itself excluded), markers evaluated here."""

    seen: dict[str, metadata.Distribution] = {}
    followed: set[tuple[str, str]] = set()
    pending: list[tuple[str, str, str]] = []  # (name, extra, required by)

    def follow(lines: Iterable[str], extra: str, parent: str) -> None:
        for line in lines:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                raise NoticesError(
                    f"{parent} declares an unreadable requirement {line!r}"
                ) from None
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
                continue
            for wanted in ("", *sorted(requirement.extras)):
                pending.append((requirement.name, wanted, parent))

    root_key = _normalise_name(root)
    follow(_root_requirements(root), "", root_key)
    while pending:
        name, extra, parent = pending.pop()
        key = _normalise_name(name)
        if (key, extra) in followed or key == root_key:
            continue
        followed.add((key, extra))
        try:
            dist = seen.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise NoticesError(
                f"{name} (required by {parent}) is not installed, so its licence is unknown",
                hint="run uv sync, then mux-release notices",
            ) from None
        seen[key] = dist
        follow(dist.requires or [], extra, key)
    return [seen[key] for key in sorted(seen)]


@dataclass(frozen=True)
class Override:
    """A reviewed licence text for a distribution that ships none."""

    name: str
    file: Path
    sha256: str
    reason: str


def load_overrides(path: Path) -> dict[str, Override]:
    """``overrides.toml``: ``[distributions.<name>]`` with ``file``, ``sha256`` and ``reason``."""

    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise NoticesError(f"cannot read {path}: {exc}") from None
    overrides: dict[str, Override] = {}
    for name, entry in (doc.get("distributions") or {}).items():
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(key), str) and entry.get(key)
            for key in ("file", "sha256", "reason")
        ):
            raise NoticesError(f"{path}: [distributions.{name}] needs file, sha256 and reason")
        relative = PurePosixPath(entry["file"])
        if relative.is_absolute() or ".." in relative.parts:
            raise NoticesError(f"{path}: [distributions.{name}] file must stay in {path.parent}")
        overrides[_normalise_name(name)] = Override(
            name=_normalise_name(name),
            file=path.parent / relative,
            sha256=entry["sha256"],
            reason=entry["reason"],
        )
    return overrides


def _override_text(override: Override, label_root: str) -> LicenceText:
    try:
        raw = override.file.read_bytes()
    except OSError as exc:
        raise NoticesError(
            f"the reviewed licence text for {override.name} ({override.file}) cannot be read: "
            f"{exc.strerror}"
        ) from None
    actual = hashlib.sha256(raw).hexdigest()
    if actual != override.sha256:
        raise NoticesError(
            f"the reviewed licence text for {override.name} changed (sha256 {actual[:12]}, "
            f"reviewed {override.sha256[:12]})",
            hint="review the new text, then update its sha256 in overrides.toml",
        )
    return LicenceText(f"{label_root}/{override.file.name}", normalise_text(raw))


def shipped_distributions(
    root: str = ROOT_DISTRIBUTION, *, overrides: Mapping[str, Override] | None = None
) -> list[Distribution]:
    """Every distribution a release of ``root`` ships, each with its licence files."""
    overrides = dict(overrides or {})
    result: list[Distribution] = []
    for dist in _requirement_closure(root):
        name = _normalise_name(dist.metadata["Name"])
        files = distribution_licence_files(dist)
        override = overrides.pop(name, None)
        if files and override is not None:
            raise NoticesError(
                f"{name} {dist.version} now ships its own licence file, so its override is stale",
                hint=f"remove [distributions.{name}] from overrides.toml",
            )
        if not files:
            if override is None:
                raise NoticesError(
                    f"{name} {dist.version} ships no licence file",
                    hint="add a reviewed text under release/licenses/ and an entry for it in "
                    "release/licenses/overrides.toml",
                )
            files = (_override_text(override, "release/licenses"),)
        result.append(
            Distribution(
                name=name,
                version=dist.version,
                licence=_declared_licence(dist.metadata),
                licence_files=files,
            )
        )
    if overrides:
        raise NoticesError(
            "overrides.toml names " + ", ".join(sorted(overrides)) + ", which no release ships",
            hint="remove the stale override",
        )
    return result


def pinned_artifacts(pins: Iterable[Pin], pins_dir: Path) -> list[PinnedArtifact]:
    """The pinned artifacts with their vendored licence texts (paths relative to pins.toml)."""
    artifacts = []
    for pin in pins:
        path = pins_dir / pin.license_file
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise NoticesError(
                f"{pin.name}: its licence text {path} cannot be read: {exc.strerror}"
            ) from None
        label = f"{pins_dir.name}/{PurePosixPath(pin.license_file).as_posix()}"
        artifacts.append(
            PinnedArtifact(pin=pin, licence_text=LicenceText(label, normalise_text(raw)))
        )
    return artifacts


def cpython_component(stdlib_dir: Path | None = None) -> RuntimeComponent:
    """The interpreter the standalone build freezes: this one, with its ``LICENSE.txt``.

    The version is ``major.minor``: the patch level is not locked by the project, and the
    licence text, which is, is compared byte for byte by ``notices --check`` anyway.
    """
    if platform.python_implementation() != "CPython":
        raise NoticesError(
            f"the standalone build needs CPython, not {platform.python_implementation()}"
        )
    folder = Path(stdlib_dir) if stdlib_dir is not None else Path(sysconfig.get_path("stdlib"))
    path = folder / CPYTHON_LICENCE_FILE
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise NoticesError(
            f"CPython's licence text {path} cannot be read: {exc.strerror}",
            hint="run mux-release with a Python whose standard library carries LICENSE.txt "
            "(python.org, uv and pyenv builds do)",
        ) from None
    text = LicenceText(f"{folder.name}/{CPYTHON_LICENCE_FILE}", normalise_text(raw))
    if not text.text.strip():
        raise NoticesError(f"CPython's licence text {path} is empty")
    major, minor = platform.python_version_tuple()[:2]
    return RuntimeComponent(
        name="CPython",
        version=f"{major}.{minor}",
        licence=CPYTHON_LICENCE,
        role="the Python interpreter and standard library, frozen into the build",
        licence_text=text,
    )


def pyinstaller_bootloader_component(
    distribution: str = PYINSTALLER_DISTRIBUTION,
) -> RuntimeComponent:
    """PyInstaller's bootloader (the build's ``mux`` executable), with PyInstaller's COPYING.txt."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise NoticesError(
            f"PyInstaller ({distribution}) is not installed, so the licence of the standalone "
            "build's bootloader is unknown",
            hint="it is a development dependency: run uv sync, then mux-release notices",
        ) from None
    name = _normalise_name(dist.metadata["Name"])
    text = next(
        (
            found
            for found in distribution_licence_files(dist)
            if PurePosixPath(found.label).name == BOOTLOADER_LICENCE_FILE
        ),
        None,
    )
    if text is None:
        raise NoticesError(
            f"{name} {dist.version} carries no {BOOTLOADER_LICENCE_FILE} (the licence text of "
            "its bootloader)"
        )
    return RuntimeComponent(
        name="PyInstaller bootloader",
        version=dist.version,
        licence=BOOTLOADER_LICENCE,
        role="the build's mux executable, which loads the interpreter and starts mux",
        licence_text=text,
    )


def standalone_components() -> list[RuntimeComponent]:
    """What the standalone build ships besides Python distributions, from this environment."""
    return [cpython_component(), pyinstaller_bootloader_component()]


# --- rendering (pure) -------------------------------------------------------------------


def _fence(text: str) -> str:
    longest = max((len(run) for run in _BACKTICK_RUN_RE.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def _text_link(text: LicenceText) -> str:
    return f"[licence {text.text_id}](#licence-{text.text_id})"


def _inline_code(value: str) -> str:
    fence = "``" if "`" in value else "`"
    return f"{fence}{value}{fence}" if fence == "`" else f"{fence} {value} {fence}"


@dataclass(frozen=True)
class _Entry:
    """One ``###`` entry of the notices: its heading, its lines, the texts it refers to."""

    heading: str
    lines: tuple[str, ...]
    texts: tuple[tuple[LicenceText, str], ...]  # (text, label shown next to its link)


def _pin_entries(artifacts: Iterable[PinnedArtifact]) -> list[_Entry]:
    entries = []
    for artifact in sorted(artifacts, key=lambda a: a.pin.name):
        pin, text = artifact.pin, artifact.licence_text
        source = f", from <{pin.license_url}>" if pin.license_url else ""
        files = artifact.files if artifact.files is not None else pin.files
        lines = [f"- Repository: <https://github.com/{pin.repository}>"]
        if len(files) == 1 and files[0].target is None:
            item = files[0]
            lines = [
                pin_marker(pin.name, str(pin.tag), str(item.sha256)),
                "",
                *lines,
                f"- Asset: {_inline_code(item.asset)} (<{item.url}>)",
                f"- SHA-256: `{item.sha256}`",
            ]
        else:
            markers = [
                pin_marker(pin.name, str(pin.tag), str(item.sha256), item.target)
                for item in files
                if item.sha256 is not None
            ]
            lines = [*markers, "", *lines, "- Assets:"]
            lines += [
                f"  - {item.target}: {_inline_code(item.asset)} (<{item.url}>), "
                f"SHA-256 `{item.sha256}`"
                for item in files
                if item.sha256 is not None
            ]
        lines += [
            f"- Licence: {pin.license}",
            f"- Licence text: {{link}} ({_inline_code(text.label)}{source})",
        ]
        entries.append(_Entry(f"{pin.name} {pin.tag}", tuple(lines), ((text, ""),)))
    return entries


def _runtime_entries(components: Iterable[RuntimeComponent]) -> list[_Entry]:
    return [
        _Entry(
            f"{c.name} {c.version}",
            (
                f"- Part: {c.role}",
                f"- Licence: {c.licence}",
                f"- Licence text: {{link}} ({_inline_code(c.licence_text.label)})",
            ),
            ((c.licence_text, ""),),
        )
        for c in sorted(components, key=lambda c: (c.name, c.version))
    ]


def _distribution_entries(distributions: Iterable[Distribution]) -> list[_Entry]:
    entries = []
    for dist in sorted(distributions, key=lambda d: (d.name, d.version)):
        texts = tuple(
            (text, _inline_code(text.label))
            for text in sorted(dist.licence_files, key=lambda t: t.label)
        )
        entries.append(
            _Entry(
                f"{dist.name} {dist.version}",
                (f"- Licence: {dist.licence}", "- Licence files:"),
                texts,
            )
        )
    return entries


def _render(
    intro: Sequence[str], sections: Sequence[tuple[str, Sequence[str], Sequence[_Entry]]]
) -> str:
    """The notices: ``intro``, then each (title, preamble, entries) section, then every
    distinct licence text once, referenced by its identifier from every entry using it."""
    users: dict[str, list[str]] = {}
    texts: dict[str, LicenceText] = {}

    def register(text: LicenceText, user: str) -> str:
        known = texts.setdefault(text.text_id, text)
        if known.text != text.text:
            raise NoticesError(
                f"two different licence texts share the identifier {text.text_id}"
                f" ({known.label}, {text.label})"
            )
        users.setdefault(text.text_id, []).append(user)
        return _text_link(text)

    out = list(intro)
    for title, preamble, entries in sections:
        out += [f"## {title}", "", *preamble]
        if not entries:
            out += ["None.", ""]
        for entry in entries:
            out += [f"### {entry.heading}", ""]
            links = [register(text, entry.heading) for text, _ in entry.texts]
            for line in entry.lines:
                out.append(line.replace("{link}", links[0]) if "{link}" in line else line)
            out += [
                f"  - {label}: {link}"
                for (_, label), link in zip(entry.texts, links, strict=True)
                if label
            ]
            out.append("")
    out += ["## Licence texts", ""]
    for text_id in sorted(texts):
        text = texts[text_id]
        fence = _fence(text.text)
        used_by = ", ".join(sorted(set(users[text_id])))
        out += [
            f"### Licence {text_id}",
            "",
            f"Used by: {used_by}.",
            "",
            f"{fence}text",
            text.text.rstrip("\n"),
            fence,
            "",
        ]
    return "\n".join(out).rstrip("\n") + "\n"


_INTRO_SHARED = (
    "A mux release includes the third-party software listed below. Each distinct licence "
    'text is printed once, under "Licence texts", and referenced by its identifier.'
)


def render_notices(
    distributions: Iterable[Distribution],
    pins: Iterable[PinnedArtifact],
    components: Iterable[RuntimeComponent] = (),
) -> str:
    """THIRD_PARTY_NOTICES.md for these inputs; the same inputs in any order give the same bytes."""
    intro = [
        "# Third-party notices",
        "",
        "<!-- Generated by `mux-release notices` from release/pins.toml, the runtime "
        "dependencies of the mux distribution and the runtime of its standalone build. Do not "
        "edit: `mux-release notices --check` fails when this file is stale. -->",
        "",
        _INTRO_SHARED,
        "",
    ]
    return _render(
        intro,
        [
            ("Pinned artifacts", [], _pin_entries(pins)),
            (
                "Standalone build runtime",
                ["Besides the Python distributions below, the standalone build carries:", ""],
                _runtime_entries(components),
            ),
            ("Python distributions", [], _distribution_entries(distributions)),
        ],
    )


def _component_entry(component: Component) -> _Entry:
    """An entry for a :class:`release.bill.components.Component` (what a build folder ships)."""
    lines = [f"- Part: {component.role}", f"- Licence: {component.licence}"]
    if component.source:
        lines.insert(1, f"- From: {component.source}")
    texts = tuple(
        (text, _inline_code(text.label))
        for text in sorted(component.licence_texts, key=lambda t: t.label)
    )
    return _Entry(f"{component.name} {component.version}", (*lines, "- Licence texts:"), texts)


BUILD_SECTIONS = (
    (ComponentKind.PINNED, "Pinned artifacts"),
    (ComponentKind.RUNTIME, "Standalone build runtime"),
    (ComponentKind.LIBRARY, "Shared libraries"),
    (ComponentKind.DISTRIBUTION, "Python distributions"),
    (ComponentKind.APPLICATION, "mux itself"),
)


def render_build_notices(components: Iterable[Component], *, version: str, target: str) -> str:
    """The THIRD_PARTY_NOTICES.md a build folder ships, from its inventory's components."""
    ordered = sorted(components, key=lambda c: (c.name, c.version, c.key))
    intro = [
        f"# Third-party notices: mux {version} ({target})",
        "",
        "<!-- Generated by `mux-release build` from what this folder ships; "
        "`mux-release notices --check-build` maps every file of it to an entry below. -->",
        "",
        _INTRO_SHARED,
        "",
    ]
    sections: list[tuple[str, Sequence[str], Sequence[_Entry]]] = [
        (title, [], [_component_entry(c) for c in ordered if c.kind == kind])
        for kind, title in BUILD_SECTIONS
    ]
    return _render(intro, sections)


# --- files (I/O) ------------------------------------------------------------------------


def generate_notices(
    pins_path: Path,
    *,
    distributions: Sequence[Distribution] | None = None,
    pins: Sequence[Pin] | None = None,
    components: Sequence[RuntimeComponent] | None = None,
) -> str:
    """Render the notices for ``pins_path`` (or ``pins``, e.g. a repin's new pins).

    Entries not pinned yet are left out: a release cannot ship them (``pins --check`` fails).
    ``distributions`` and ``components`` default to what this environment's standalone build
    ships (:func:`shipped_distributions`, :func:`standalone_components`).
    """
    if pins is None:
        pins = load_pins(pins_path)
    pins = [pin for pin in pins if pin.is_pinned]
    if distributions is None:
        overrides = load_overrides(pins_path.parent / "licenses" / OVERRIDES_NAME)
        distributions = shipped_distributions(overrides=overrides)
    if components is None:
        components = standalone_components()
    return render_notices(distributions, pinned_artifacts(pins, pins_path.parent), components)


def notices_diff(current: str | None, expected: str, *, name: str) -> str:
    """A unified diff from ``current`` to ``expected``, capped at :data:`MAX_DIFF_LINES`."""
    return capped_unified_diff(
        current or "",
        expected,
        fromfile=f"{name} (committed)",
        tofile=f"{name} (generated)",
        max_lines=MAX_DIFF_LINES,
    )


def check_notices(path: Path, expected: str) -> str | None:
    """None when ``path`` holds exactly ``expected``, else the diff that would fix it."""
    try:
        current: str | None = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        current = None
    except (OSError, UnicodeDecodeError) as exc:
        raise NoticesError(f"cannot read {path}: {exc}") from None
    if current == expected:
        return None
    return notices_diff(current, expected, name=path.name)
