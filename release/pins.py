"""``release/pins.toml``: the prebuilt artifacts a mux release ships, and their checks.

``pins.toml`` is the single source of truth for every pinned artifact (schema in the file's
own comments). Only ``mux-release repin`` writes an entry's ``tag``, ``url``, ``sha256`` and
``size``, after a verified download; people write the rest (repository, asset, licence,
attestation identity) and the comments, which every rewrite keeps.

Reading is pure (:func:`read_pins` on a parsed document); :func:`check_pins` is the offline CI
check behind ``mux-release pins --check``. tomlkit (style-preserving) parses, so the same
document can be edited in place by :mod:`release.repin`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

import tomlkit
import tomlkit.exceptions
from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.version import InvalidVersion, Version

from updater import urls
from updater.errors import MuxError, ParseError
from updater.models import is_safe_asset_name, is_sha256

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PINS_PATH = REPO_ROOT / "release" / "pins.toml"
DEFAULT_NOTICES_PATH = REPO_ROOT / "THIRD_PARTY_NOTICES.md"

SCHEMA = 1
ARTIFACTS_KEY = "artifacts"
# A pinned asset larger than this is refused unless its entry raises ``max_bytes``.
DEFAULT_MAX_BYTES = 512 * 1024 * 1024

# The fields repin writes from a verified download; everything else is written by people.
PINNED_FIELDS = ("tag", "url", "sha256", "size")
_ENTRY_KEYS = frozenset(
    {
        "repository",
        "asset",
        "license",
        "license_file",
        "license_url",
        "attestation",
        "attestation_asset",
        "max_bytes",
        *PINNED_FIELDS,
    }
)
_IDENTITY_KEYS = frozenset({"repository", "signer_workflow"})

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_REPOSITORY_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_WORKFLOW_RE = re.compile(r"\.github/workflows/[A-Za-z0-9._-]+\.ya?ml")
# A tag is an optional digit-free prefix ("libfoo-"), an optional "v", then a version.
_TAG_RE = re.compile(r"(?P<prefix>[^0-9\s]*?)v?(?P<version>[0-9][0-9A-Za-z.+!_-]*)")
# The line the notices carry for each pin; ``pins --check`` compares them with the pins.
PIN_MARKER_RE = re.compile(
    r"^<!-- pin: (?P<name>\S+) tag=(?P<tag>\S+) sha256=(?P<sha256>\S+) -->$", re.MULTILINE
)


class PinsError(MuxError):
    """pins.toml is malformed, an entry is unusable, or an entry is not pinned."""


@dataclass(frozen=True)
class PinIdentity:
    """Who must have attested a pinned artifact: the producer and its signing workflow."""

    repository: str
    signer_workflow: str


@dataclass(frozen=True)
class Pin:
    """One ``[artifacts.<name>]`` entry. The pinned fields are None until the first repin."""

    name: str
    repository: str
    asset: str
    license: str
    license_file: str
    identity: PinIdentity
    license_url: str | None = None
    attestation_asset: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    tag: str | None = None
    url: str | None = None
    sha256: str | None = None
    size: int | None = None

    @property
    def is_pinned(self) -> bool:
        return self.tag is not None and self.url is not None and self.sha256 is not None


def pin_marker(name: str, tag: str, sha256: str) -> str:
    return f"<!-- pin: {name} tag={tag} sha256={sha256} -->"


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
    if not is_safe_asset_name(entry.get("asset")):
        problems.append("asset must be a plain file name (letters, digits, '.', '_', '+', '-')")
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
    if att_asset is not None and not is_safe_asset_name(att_asset):
        problems.append("attestation_asset must be a plain file name")
    max_bytes = entry.get("max_bytes")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
    ):
        problems.append("max_bytes must be a positive integer")
    return problems


def _pinned_problems(entry: Mapping[str, Any]) -> list[str]:
    """Problems in the fields repin writes; all four absent means 'not pinned yet'."""
    present = [key for key in PINNED_FIELDS if key in entry]
    if not present:
        return []
    problems: list[str] = []
    tag = entry.get("tag")
    if not isinstance(tag, str):
        problems.append("tag is missing")
    else:
        try:
            parse_tag_version(tag)
        except ParseError as exc:
            problems.append(exc.message)
    url = entry.get("url")
    if not is_allowed_url(url):
        problems.append("url must be an https:// URL (plain http only on loopback)")
    elif url_asset_name(str(url)) != entry.get("asset"):
        problems.append(f"url does not end in the asset name {entry.get('asset')!r}")
    if not is_sha256(entry.get("sha256")):
        problems.append("sha256 must be 64 lower-case hex digits")
    size = entry.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        problems.append("size must be a non-negative integer")
    return problems


def _plain(value: Any) -> Any:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _build_pin(name: str, entry: Mapping[str, Any]) -> Pin:
    attestation = entry["attestation"]
    size = entry.get("size")
    return Pin(
        name=name,
        repository=entry["repository"],
        asset=entry["asset"],
        license=entry["license"],
        license_file=entry["license_file"],
        identity=PinIdentity(
            repository=attestation["repository"], signer_workflow=attestation["signer_workflow"]
        ),
        license_url=entry.get("license_url"),
        attestation_asset=entry.get("attestation_asset"),
        max_bytes=entry.get("max_bytes", DEFAULT_MAX_BYTES),
        tag=entry.get("tag"),
        url=entry.get("url"),
        sha256=entry.get("sha256"),
        size=size if isinstance(size, int) else None,
    )


def read_pins(
    document: Mapping[str, Any], *, base_dir: Path | None = None
) -> tuple[list[Pin], list[str]]:
    """Every well-formed entry as a :class:`Pin`, and one problem line per defect found.

    ``base_dir`` (the folder of pins.toml) lets the check see that licence files exist.
    Entries with problems are left out of the list. Pins are sorted by name.
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
        entry_problems = _entry_problems(name, entry, base_dir) + _pinned_problems(entry)
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
    """The notices must name exactly the current pins (name, tag and sha256)."""
    expected = {
        (pin.name, pin.tag, pin.sha256)
        for pin in pins
        if pin.tag is not None and pin.sha256 is not None
    }
    if notices_text is None:
        return ["THIRD_PARTY_NOTICES.md is missing (run mux-release notices)"] if expected else []
    found = {(m["name"], m["tag"], m["sha256"]) for m in PIN_MARKER_RE.finditer(notices_text)}
    problems = [
        f"{name}: the notices do not name {tag} ({sha256[:12]}); run mux-release notices"
        for name, tag, sha256 in sorted(expected - found)
    ]
    problems += [
        f"{name}: the notices name {tag} ({sha256[:12]}), which is not the current pin;"
        " run mux-release notices"
        for name, tag, sha256 in sorted(found - expected)
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
    problems += [
        f"{pin.name}: not pinned yet; run mux-release repin {pin.name} --tag <tag>"
        for pin in pins
        if not pin.is_pinned
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
