"""``release/pins.toml``: the prebuilt artifacts a mux release ships, and their checks.

``pins.toml`` is the single source of truth for every pinned artifact (schema in the file's
own comments). Only ``mux-release repin`` writes an entry's ``tag``, ``url``, ``sha256`` and
``size``, after a verified download; people write the rest (repository, asset, licence,
attestation identity) and the comments, which every rewrite keeps.

An entry pins one release asset that every target ships (``asset = "name"``), or one asset per
target, all from the same release tag: ``asset = "libfoo-{target}.tar.gz"`` (a template, for
the targets in ``targets``, default all of ``updater.config.targets.TARGETS``) or a table
``[artifacts.<name>.assets]`` mapping each target to its asset name. A per-target entry's
digests live in ``[artifacts.<name>.pinned.<target>]`` (``url``, ``sha256``, ``size``).

Reading is pure (:func:`read_pins` on a parsed document); :func:`check_pins` is the offline CI
check behind ``mux-release pins --check``. tomlkit (style-preserving) parses, so the same
document can be edited in place by :mod:`release.upkeep.repin`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.version import InvalidVersion, Version

from release.checkout import RELEASE_DIR, REPO_ROOT
from updater import urls
from updater.config.targets import TARGETS
from updater.errors import MuxError, ParseError, VerificationError
from updater.formats.models import is_safe_asset_name, is_sha256

if TYPE_CHECKING:
    import tomlkit

DEFAULT_PINS_PATH = RELEASE_DIR / "pins.toml"
DEFAULT_NOTICES_PATH = REPO_ROOT / "THIRD_PARTY_NOTICES.md"

SCHEMA = 1
ARTIFACTS_KEY = "artifacts"
# A pinned asset larger than this is refused unless its entry raises ``max_bytes``.
DEFAULT_MAX_BYTES = 512 * 1024 * 1024

# The fields repin writes from a verified download; everything else is written by people.
PINNED_FIELDS = ("tag", "url", "sha256", "size")
# Per-target entries: repin writes ``tag`` and one ``pinned.<target>`` table of these per target.
FILE_FIELDS = ("url", "sha256", "size")
PINNED_KEY = "pinned"
ASSETS_KEY = "assets"
TARGET_PLACEHOLDER = "{target}"
_ENTRY_KEYS = frozenset(
    {
        "repository",
        "asset",
        ASSETS_KEY,
        "targets",
        "license",
        "license_file",
        "license_url",
        "attestation",
        "attestation_asset",
        "max_bytes",
        PINNED_KEY,
        *PINNED_FIELDS,
    }
)
_IDENTITY_KEYS = frozenset({"repository", "signer_workflow"})

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_REPOSITORY_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_WORKFLOW_RE = re.compile(r"\.github/workflows/[A-Za-z0-9._-]+\.ya?ml")
# A tag is an optional digit-free prefix ("libfoo-"), an optional "v", then a version.
_TAG_RE = re.compile(r"(?P<prefix>[^0-9\s]*?)v?(?P<version>[0-9][0-9A-Za-z.+!_-]*)")
# The line the notices carry for each pinned file; ``pins --check`` compares them with the pins.
PIN_MARKER_RE = re.compile(
    r"^<!-- pin: (?P<name>\S+)(?: target=(?P<target>\S+))? tag=(?P<tag>\S+)"
    r" sha256=(?P<sha256>\S+) -->$",
    re.MULTILINE,
)


class PinsError(MuxError):
    """pins.toml is malformed, an entry is unusable, or an entry is not pinned."""


@dataclass(frozen=True)
class PinIdentity:
    """Who must have attested a pinned artifact: the producer and its signing workflow."""

    repository: str
    signer_workflow: str


@dataclass(frozen=True)
class PinnedAsset:
    """One release asset of a pin: what a target ships. ``target`` is None for the single
    asset of an entry that every target ships. The digest fields are None until repinned."""

    target: str | None
    asset: str
    url: str | None = None
    sha256: str | None = None
    size: int | None = None

    @property
    def is_pinned(self) -> bool:
        return self.url is not None and self.sha256 is not None

    def label(self, pin_name: str) -> str:
        return f"{pin_name} ({self.target})" if self.target else pin_name


@dataclass(frozen=True)
class Pin:
    """One ``[artifacts.<name>]`` entry. The pinned fields are None until the first repin.

    ``files`` holds one :class:`PinnedAsset` per declared target (sorted by target), or the one
    target-independent asset. ``asset``, ``url``, ``sha256`` and ``size`` describe that single
    asset; for a per-target entry they are None (``asset`` keeps a ``{target}`` template).
    """

    name: str
    repository: str
    license: str
    license_file: str
    identity: PinIdentity
    files: tuple[PinnedAsset, ...]
    license_url: str | None = None
    attestation_asset: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    tag: str | None = None
    template: str | None = None

    @property
    def per_target(self) -> bool:
        return self.files[0].target is not None

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets that ship this artifact (every published target for a single asset)."""
        if not self.per_target:
            return TARGETS
        return tuple(str(item.target) for item in self.files)

    def file_for(self, target: str) -> PinnedAsset | None:
        """The asset ``target`` ships, or None when this artifact is not shipped there."""
        for item in self.files:
            if item.target in (None, target):
                return item
        return None

    @property
    def asset(self) -> str | None:
        return self.template if self.per_target else self.files[0].asset

    @property
    def url(self) -> str | None:
        return None if self.per_target else self.files[0].url

    @property
    def sha256(self) -> str | None:
        return None if self.per_target else self.files[0].sha256

    @property
    def size(self) -> int | None:
        return None if self.per_target else self.files[0].size

    @property
    def is_pinned(self) -> bool:
        return self.tag is not None and all(item.is_pinned for item in self.files)

    def attestation_asset_for(self, target: str | None) -> str | None:
        if self.attestation_asset is None or target is None:
            return self.attestation_asset
        return self.attestation_asset.replace(TARGET_PLACEHOLDER, target)


def pin_marker(name: str, tag: str, sha256: str, target: str | None = None) -> str:
    where = f" target={target}" if target else ""
    return f"<!-- pin: {name}{where} tag={tag} sha256={sha256} -->"


def parse_tag_version(tag: str) -> tuple[str, Version]:
    """Split a release tag into its prefix and version: ``"libfoo-v1.2.3"`` -> ("libfoo-", 1.2.3).

    Downgrade protection compares these versions, so a pin's tags must carry one.
    """
    match = _TAG_RE.fullmatch(tag) if isinstance(tag, str) and len(tag) <= 128 else None
    if match is None:
        raise ParseError(f"tag {str(tag)[:60]!r} does not end in a version (like v1.2.3)")
    try:
        return match["prefix"], Version(match["version"])
    except InvalidVersion:
        raise ParseError(f"tag {tag[:60]!r} does not end in a valid version") from None


def is_allowed_url(url: object) -> bool:
    """https anywhere; plain http only to loopback (test fixtures, a local mirror)."""
    return isinstance(url, str) and urls.is_allowed_url(url)


def url_asset_name(url: str) -> str:
    return unquote(PurePosixPath(urlsplit(url).path).name)


def load_document(path: Path) -> tomlkit.TOMLDocument:
    # tomlkit is the release extra: imported once a pins file is read, so that without it
    # mux-release still starts and main() says how to get it (tests/test_imports.py).
    import tomlkit
    import tomlkit.exceptions

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PinsError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PinsError(f"cannot read {path}: {exc}") from None
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.TOMLKitError as exc:
        raise PinsError(f"{path} is not valid TOML: {exc}") from None


def _check_license_file(value: object, base_dir: Path | None) -> str | None:
    if not isinstance(value, str) or not value:
        return "license_file is missing (vendor the licence text, e.g. licenses/<name>.txt)"
    relative = PurePosixPath(value)
    if relative.is_absolute() or ".." in relative.parts or "\\" in value:
        return f"license_file {value!r} must be a relative path inside the release folder"
    if base_dir is not None:
        target = base_dir / relative
        if not target.is_file():
            return f"license_file {value!r} does not exist"
        if not target.read_bytes().strip():
            return f"license_file {value!r} is empty"
    return None


_PLAIN_NAME = "a plain file name (letters, digits, '.', '_', '+', '-')"


def declared_assets(entry: Mapping[str, Any]) -> tuple[dict[str, str] | None, list[str]]:
    """``{target: asset}`` of a per-target entry (None: one asset for every target), and the
    problems found in how the entry declares its assets."""
    asset, table, targets = entry.get("asset"), entry.get(ASSETS_KEY), entry.get("targets")
    if table is not None:
        if asset is not None or targets is not None:
            return {}, [f"give either [{ASSETS_KEY}] or asset (and targets), not both"]
        if not isinstance(table, Mapping) or not table:
            return {}, [f"[{ASSETS_KEY}] must map targets to asset names"]
        problems = [
            f"{ASSETS_KEY}: {target!r} is not a published target ({', '.join(TARGETS)})"
            for target in table
            if target not in TARGETS
        ]
        problems += [
            f"{ASSETS_KEY}.{target} must be {_PLAIN_NAME}"
            for target, name in table.items()
            if not is_safe_asset_name(name)
        ]
        return {str(k): str(v) for k, v in table.items()}, problems
    if not isinstance(asset, str) or TARGET_PLACEHOLDER not in asset:
        if targets is not None:
            return {}, [f"targets needs an asset template with {TARGET_PLACEHOLDER}"]
        if not is_safe_asset_name(asset):
            return None, [f"asset must be {_PLAIN_NAME}"]
        return None, []
    if targets is None:
        targets = list(TARGETS)
    if not isinstance(targets, list) or not targets:
        return {}, ["targets must be a non-empty list of targets"]
    problems = [
        f"targets: {target!r} is not a published target ({', '.join(TARGETS)})"
        for target in targets
        if target not in TARGETS
    ]
    if len(set(targets)) != len(targets):
        problems.append("targets names a target twice")
    mapping = {str(target): asset.replace(TARGET_PLACEHOLDER, str(target)) for target in targets}
    if not all(is_safe_asset_name(name) for name in mapping.values()):
        problems.append(f"asset must expand to {_PLAIN_NAME} for every target")
    return mapping, problems


def _entry_problems(name: str, entry: Mapping[str, Any], base_dir: Path | None) -> list[str]:
    """Problems in the human-written part of an entry (everything but the pinned fields)."""
    problems: list[str] = []
    if not _NAME_RE.fullmatch(name):
        problems.append("the name must be lower case letters, digits, '.', '_' or '-'")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        problems.append("unknown field(s) " + ", ".join(unknown))
    repository = entry.get("repository")
    if not isinstance(repository, str) or not _REPOSITORY_RE.fullmatch(repository):
        problems.append("repository must be owner/name")
    problems += declared_assets(entry)[1]
    licence = entry.get("license")
    if not isinstance(licence, str) or not licence.strip():
        problems.append("license (an SPDX expression) is missing")
    else:
        try:
            canonical = canonicalize_license_expression(licence)
        except InvalidLicenseExpression:
            problems.append(f"license {licence!r} is not a valid SPDX expression")
        else:
            if canonical != licence:
                problems.append(f"license {licence!r} should be written {canonical!r}")
    problem = _check_license_file(entry.get("license_file"), base_dir)
    if problem:
        problems.append(problem)
    license_url = entry.get("license_url")
    if license_url is not None and not is_allowed_url(license_url):
        problems.append("license_url must be an https:// URL")
    attestation = entry.get("attestation")
    if not isinstance(attestation, Mapping):
        problems.append("the [attestation] identity (repository, signer_workflow) is missing")
    else:
        unknown = sorted(set(attestation) - _IDENTITY_KEYS)
        if unknown:
            problems.append("unknown attestation field(s) " + ", ".join(unknown))
        att_repo = attestation.get("repository")
        if not isinstance(att_repo, str) or not _REPOSITORY_RE.fullmatch(att_repo):
            problems.append("attestation.repository must be owner/name")
        workflow = attestation.get("signer_workflow")
        if not isinstance(workflow, str) or not _WORKFLOW_RE.fullmatch(workflow):
            problems.append(
                "attestation.signer_workflow must be a workflow path like .github/workflows/x.yml"
            )
    att_asset = entry.get("attestation_asset")
    if att_asset is not None and not (
        isinstance(att_asset, str)
        and is_safe_asset_name(att_asset.replace(TARGET_PLACEHOLDER, "x86_64-unknown-linux-gnu"))
    ):
        problems.append("attestation_asset must be a plain file name")
    max_bytes = entry.get("max_bytes")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
    ):
        problems.append("max_bytes must be a positive integer")
    return problems


def _file_problems(fields: Mapping[str, Any], asset: str, where: str = "") -> list[str]:
    problems: list[str] = []
    url = fields.get("url")
    if not is_allowed_url(url):
        problems.append(f"{where}url must be an https:// URL (plain http only on loopback)")
    elif url_asset_name(str(url)) != asset:
        problems.append(f"{where}url does not end in the asset name {asset!r}")
    if not is_sha256(fields.get("sha256")):
        problems.append(f"{where}sha256 must be 64 lower-case hex digits")
    size = fields.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        problems.append(f"{where}size must be a non-negative integer")
    return problems


def _tag_problems(entry: Mapping[str, Any]) -> list[str]:
    tag = entry.get("tag")
    if not isinstance(tag, str):
        return ["tag is missing"]
    try:
        parse_tag_version(tag)
    except ParseError as exc:
        return [exc.message]
    return []


def _pinned_problems(name: str, entry: Mapping[str, Any]) -> list[str]:
    """Problems in the fields repin writes; all of them absent means 'not pinned yet'.

    Each is one that ``mux-release repin`` repairs (it rewrites every one of these fields), so
    each says so: after a change of the entry's shape (one asset <-> one per target, a target
    removed), the old fields no longer fit, and repin, not a hand edit, replaces them.
    """
    assets, declaration_problems = declared_assets(entry)
    if declaration_problems:
        return []
    repin = f"run mux-release repin {name} --tag <tag> to rewrite them"
    if assets is None:
        if not any(key in entry for key in PINNED_FIELDS):
            return []
        if PINNED_KEY in entry:
            return [f"[{PINNED_KEY}] is for per-target entries, this one pins one asset; {repin}"]
        return _tag_problems(entry) + _file_problems(entry, str(entry.get("asset")))
    stray = [key for key in FILE_FIELDS if key in entry]
    if stray:
        return [
            f"{', '.join(stray)}: a per-target entry pins them in [{PINNED_KEY}.<target>]; {repin}"
        ]
    pinned = entry.get(PINNED_KEY)
    if "tag" not in entry and pinned is None:
        return []
    problems = _tag_problems(entry)
    if not isinstance(pinned, Mapping):
        return [*problems, f"[{PINNED_KEY}] is missing; {repin}"]
    for target, fields in pinned.items():
        if target not in assets:
            problems.append(
                f"{PINNED_KEY}.{target}: the entry does not declare this target; {repin}"
            )
        elif not isinstance(fields, Mapping):
            problems.append(f"{PINNED_KEY}.{target} must be a table")
        else:
            problems += _file_problems(fields, assets[target], f"{PINNED_KEY}.{target}: ")
    return problems


def _valid_pinned_fields(fields: Any, asset: str) -> Mapping[str, Any]:
    """``fields`` when they pin exactly ``asset``, else nothing (a stale pin of another shape)."""
    if isinstance(fields, Mapping) and not _file_problems(fields, asset):
        return fields
    return {}


def _plain(value: Any) -> Any:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _pinned_asset(target: str | None, asset: str, fields: Mapping[str, Any]) -> PinnedAsset:
    size = fields.get("size")
    return PinnedAsset(
        target=target,
        asset=asset,
        url=fields.get("url"),
        sha256=fields.get("sha256"),
        size=size if isinstance(size, int) else None,
    )


def _build_pin(name: str, entry: Mapping[str, Any]) -> Pin:
    """The entry as a :class:`Pin`; pinned fields that do not fit its shape are left out."""
    attestation = entry["attestation"]
    assets, _ = declared_assets(entry)
    if assets is None:
        fields = _valid_pinned_fields(entry, entry["asset"])
        files: tuple[PinnedAsset, ...] = (_pinned_asset(None, entry["asset"], fields),)
    else:
        pinned = entry.get(PINNED_KEY)
        pinned = pinned if isinstance(pinned, Mapping) else {}
        files = tuple(
            _pinned_asset(
                target, assets[target], _valid_pinned_fields(pinned.get(target), assets[target])
            )
            for target in sorted(assets)
        )
    template = entry.get("asset") if assets is not None else None
    return Pin(
        name=name,
        repository=entry["repository"],
        license=entry["license"],
        license_file=entry["license_file"],
        identity=PinIdentity(
            repository=attestation["repository"], signer_workflow=attestation["signer_workflow"]
        ),
        files=files,
        license_url=entry.get("license_url"),
        attestation_asset=entry.get("attestation_asset"),
        max_bytes=entry.get("max_bytes", DEFAULT_MAX_BYTES),
        tag=entry.get("tag") if not _tag_problems(entry) else None,
        template=template,
    )


def read_pins(
    document: Mapping[str, Any], *, base_dir: Path | None = None, repinning: str | None = None
) -> tuple[list[Pin], list[str]]:
    """Every well-formed entry as a :class:`Pin`, and one problem line per defect found.

    ``base_dir`` (the folder of pins.toml) lets the check see that licence files exist.
    Entries with problems are left out of the list. Pins are sorted by name. ``repinning``
    names the entry repin is about to rewrite: the fields repin writes are not held against it
    (it replaces them all), only what people write must be right.
    """
    plain = _plain(document)
    problems: list[str] = []
    schema = plain.get("schema")
    if schema != SCHEMA:
        problems.append(f"schema must be {SCHEMA} (found {schema!r})")
    unknown = sorted(set(plain) - {"schema", ARTIFACTS_KEY})
    if unknown:
        problems.append("unknown top-level field(s) " + ", ".join(unknown))
    artifacts = plain.get(ARTIFACTS_KEY, {})
    if not isinstance(artifacts, dict):
        return [], [*problems, f"[{ARTIFACTS_KEY}] must be a table of entries"]
    pins: list[Pin] = []
    for name in sorted(artifacts):
        entry = artifacts[name]
        if not isinstance(entry, dict):
            problems.append(f"{name}: must be a table")
            continue
        entry_problems = _entry_problems(name, entry, base_dir)
        if name != repinning:
            entry_problems += _pinned_problems(name, entry)
        problems.extend(f"{name}: {problem}" for problem in entry_problems)
        if not entry_problems:
            pins.append(_build_pin(name, entry))
    return pins, problems


def load_pins(path: Path) -> list[Pin]:
    """The pins of ``path``; any problem is a :class:`PinsError` naming the first one."""
    pins, problems = read_pins(load_document(path), base_dir=path.parent)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PinsError(
            f"{path}: {problems[0]}{more}", hint="run mux-release pins --check for the full list"
        )
    return pins


def notices_problems(pins: Iterable[Pin], notices_text: str | None) -> list[str]:
    """The notices must name exactly the current pins (name, target, tag and sha256)."""
    expected = {
        (pin.name, item.target or "", pin.tag, item.sha256)
        for pin in pins
        for item in pin.files
        if pin.tag is not None and item.sha256 is not None
    }
    if notices_text is None:
        return ["THIRD_PARTY_NOTICES.md is missing (run mux-release notices)"] if expected else []
    found = {
        (m["name"], m["target"] or "", m["tag"], m["sha256"])
        for m in PIN_MARKER_RE.finditer(notices_text)
    }

    def who(name: str, target: str) -> str:
        return f"{name} ({target})" if target else name

    problems = [
        f"{who(name, target)}: the notices do not name {tag} ({sha256[:12]});"
        " run mux-release notices"
        for name, target, tag, sha256 in sorted(expected - found)
    ]
    problems += [
        f"{who(name, target)}: the notices name {tag} ({sha256[:12]}), which is not the"
        " current pin; run mux-release notices"
        for name, target, tag, sha256 in sorted(found - expected)
    ]
    return problems


def check_pins(path: Path, *, notices_path: Path | None = None) -> list[str]:
    """``pins --check``: every problem of pins.toml and of the notices' view of it (offline).

    An entry that was never pinned is a problem too: a release cannot ship it.
    """
    try:
        document = load_document(path)
    except PinsError as exc:
        return [exc.message]
    pins, problems = read_pins(document, base_dir=path.parent)
    for pin in pins:
        repin = f"run mux-release repin {pin.name} --tag <tag>"
        if pin.tag is None:
            problems.append(f"{pin.name}: not pinned yet; {repin}")
            continue
        problems += [
            f"{pin.name}: {item.target} is declared but has no pin; {repin}"
            for item in pin.files
            if not item.is_pinned
        ]
    if notices_path is not None:
        try:
            notices_text: str | None = notices_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            notices_text = None
        except (OSError, UnicodeDecodeError) as exc:
            return [*problems, f"cannot read {notices_path}: {exc}"]
        problems += notices_problems(pins, notices_text)
    return problems


def shipped_pins(pins: Sequence[Pin], target: str) -> list[tuple[Pin, PinnedAsset]]:
    """The pinned files a build for ``target`` ships, each with its pin (pure)."""
    shipped = []
    for pin in pins:
        item = pin.file_for(target)
        if item is None:
            continue
        if pin.tag is None or not item.is_pinned:
            raise PinsError(
                f"{item.label(pin.name)} is not pinned yet, so the build cannot ship it",
                hint=f"run mux-release repin {pin.name} --tag <tag>",
            )
        shipped.append((pin, item))
    by_asset: dict[str, str] = {}
    for pin, item in shipped:
        other = by_asset.setdefault(item.asset, pin.name)
        if other != pin.name:
            raise PinsError(f"{other} and {pin.name} both pin an asset named {item.asset}")
    return shipped


def check_file_against_pin(
    pin: Pin, item: PinnedAsset, *, size: int, sha256: str | None, where: object
) -> None:
    """A file meant to be ``item`` of ``pin`` has its size and (when given) sha256, or a
    :class:`~updater.errors.VerificationError` (exit 3) names both: the one check of a file
    against its pin, for the build's artifacts folder and for what fetch-artifacts downloads."""
    who = f"{item.label(pin.name)} {pin.tag}"
    if item.size is not None and size != item.size:
        raise VerificationError(
            f"{who}: {where} is {size} bytes, the pin says {item.size}",
            hint="use the asset the pin names, or repin it",
        )
    if sha256 is not None and sha256 != item.sha256:
        raise VerificationError(
            f"{who}: {where} has sha256 {sha256}, the pin says {item.sha256}",
            hint="the release asset changed since it was pinned, or this is another file: "
            "use the asset the pin names, or repin it",
        )
