"""``mux update``: source -> plan -> download -> verify -> install -> report.

:func:`run_update` is the library entry point the CLI calls. Nothing touches the installed
mux until every verification layer has passed; a failure at any point leaves it as it was
and removes what this run created. Servers are only ever asked for their status line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import buildinfo, models
from .buildinfo import BuildInfo
from .errors import EXIT_OK, EXIT_RESTART_NEEDED, InstallError, NetworkError, UsageError
from .layout import (
    Layout,
    ensure_writable,
    read_record,
    resolve_layout,
    running_version,
    verify_files,
)
from .urls import is_loopback_host
from .verify import LAYER_ARCHIVE, LAYER_SMOKE_TEST, TrustPolicy, VerificationLog


@dataclass(frozen=True)
class UpdateOptions:
    source: str | None = None
    include_pre: bool = False
    version: str | None = None
    dry_run: bool = False
    rollback: bool = False
    home: Path | None = None
    trust_keys: tuple[str, ...] = ()
    allow_downgrade: bool = False
    skip_attestation: bool = False
    as_json: bool = False


@dataclass
class UpdateResult:
    action: str  # "updated" | "up-to-date" | "rolled-back" | "dry-run"
    layout: Layout
    from_version: str | None
    to_version: str | None
    target: str
    verification: VerificationLog = field(default_factory=VerificationLog)
    servers: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    removed_versions: list[str] = field(default_factory=list)
    new_protocol: int | None = None

    @property
    def restart_needed(self) -> bool:
        return any(s.get("restart_needed") for s in self.servers)

    @property
    def exit_code(self) -> int:
        return EXIT_RESTART_NEEDED if self.restart_needed else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "action": self.action,
            "exit_code": self.exit_code,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "protocol_version": self.new_protocol,
            "target": self.target,
            "home": str(self.layout.home),
            "link": str(self.layout.link),
            "verification": self.verification.to_json(),
            "servers": self.servers,
            "restart_needed": self.restart_needed,
            "removed_versions": self.removed_versions,
            "plan": self.plan,
        }


def _say(options: UpdateOptions, line: str) -> None:
    print(line, file=sys.stderr)


def _target(build: BuildInfo, layout: Layout) -> str:
    from ._targets import detect_target

    if os.environ.get("MUX_TARGET"):
        return detect_target()
    if not build.development and build.target:
        return build.target
    recorded = read_record(layout).get("target")
    return recorded if isinstance(recorded, str) and recorded else detect_target()


def trust_policy(build: BuildInfo, options: UpdateOptions, source_kind: str) -> TrustPolicy:
    from .sources import GITHUB_WEB

    keys = tuple(dict.fromkeys((*build.trust.minisign_keys, *options.trust_keys)))
    from urllib.parse import urlsplit

    web = os.environ.get("MUX_GITHUB_URL", "")
    try:
        enterprise = bool(web) and not is_loopback_host(urlsplit(web).hostname)
    except ValueError:
        raise UsageError(f"MUX_GITHUB_URL is not a URL: {web[:200]!r}") from None
    github_url = web.rstrip("/") if enterprise else GITHUB_WEB
    return TrustPolicy(
        minisign_keys=keys,
        require_signature=source_kind == "feed" or bool(build.trust.minisign_keys),
        repository=buildinfo.effective_repo(build),
        signer_workflow=build.trust.signer_workflow,
        oidc_issuer=build.trust.oidc_issuer,
        require_attestation=source_kind == "github",
        skip_attestation=options.skip_attestation,
        github_url=github_url,
    )


def _optional(fetch: Any, *args: Any) -> bytes | None:
    try:
        return fetch(*args)
    except NetworkError:
        return None


def _server_verdicts(new_protocol: int | None) -> list[dict[str, Any]]:
    from .servers import query_all, restart_command

    verdicts = []
    for report in query_all():
        doc = report.to_json()
        status = report.status
        needed = bool(
            status and new_protocol is not None and status.protocol_version != new_protocol
        )
        doc["restart_needed"] = needed
        doc["restart_command"] = restart_command(report) if needed else None
        verdicts.append(doc)
    return verdicts


def run_update(options: UpdateOptions, build: BuildInfo | None = None) -> UpdateResult:
    build = build or buildinfo.current()
    layout = resolve_layout(options.home, development=build.development)
    result = rollback(layout, options) if options.rollback else _update(layout, build, options)
    _print_result(result, options)
    return result


def _update(layout: Layout, build: BuildInfo, options: UpdateOptions) -> UpdateResult:
    from packaging.version import Version

    from .sources import open_source
    from .verify import verify_manifest, verify_sums

    target = _target(build, layout)
    installed = layout.active_version()
    source = open_source(options.source, repo=buildinfo.effective_repo(build))
    try:
        policy = trust_policy(build, options, source.kind)
        if options.version:
            tag = models.tag_for(str(models.parse_version(options.version)))
        else:
            tag = source.latest_tag(include_pre=options.include_pre)
        log = VerificationLog()
        sums = verify_sums(
            source.fetch(tag, models.SUMS_NAME),
            _optional(source.fetch, tag, models.SUMS_SIGNATURE_NAME),
            policy,
            log,
        )
        manifest = verify_manifest(source.fetch(tag, models.MANIFEST_NAME), sums, tag, log)
        result = UpdateResult(
            action="up-to-date",
            layout=layout,
            from_version=installed,
            to_version=manifest.version,
            target=target,
            verification=log,
            new_protocol=manifest.protocol_version,
        )
        if installed is not None and Version(installed) == Version(manifest.version):
            if not options.dry_run:
                _tidy(layout)
            result.servers = _server_verdicts(manifest.protocol_version)
            return result
        downgrade = installed is not None and Version(manifest.version) < Version(installed)
        if downgrade and not (options.version and options.allow_downgrade):
            raise InstallError(
                f"{manifest.version} is older than the installed {installed}; not downgrading",
                hint=f"to downgrade on purpose: mux update --version {manifest.version} --allow-downgrade",
            )
        asset = manifest.asset_for(target)
        if asset is None:
            raise InstallError(
                f"release {tag} has no build for {target}",
                hint="it has: " + (", ".join(manifest.targets) or "no builds"),
            )
        result.plan = {
            "tag": tag,
            "release_url": source.release_page(tag),
            "asset": asset.name,
            "asset_url": source.file_url(tag, asset.name),
            "size": asset.size,
            "sha256": asset.sha256,
            "checks": [
                "signature" if policy.minisign_keys else "signature (no trusted key)",
                "digest",
                "attestation" if not policy.skip_attestation else "attestation SKIPPED",
                LAYER_ARCHIVE,
                LAYER_SMOKE_TEST,
            ],
            "version_dir": str(layout.version_dir(manifest.version)),
            "link": str(layout.link),
        }
        if options.dry_run:
            result.action = "dry-run"
            return result
        if options.skip_attestation:
            _say(
                options, "WARNING: --insecure-skip-attestation: not checking who built this release"
            )
        for directory in (layout.home, layout.versions, layout.bin_dir):
            ensure_writable(directory)
        _install(layout, source, _Verified(tag, sums, manifest, asset, policy), result)
    finally:
        source.close()
    result.servers = _server_verdicts(manifest.protocol_version)
    return result


@dataclass(frozen=True)
class _Verified:
    """What layers 1 and 2 established before the download."""

    tag: str
    sums: dict[str, str]
    manifest: models.Manifest
    asset: models.ManifestAsset
    policy: TrustPolicy


def _install(layout: Layout, source: Any, verified: _Verified, result: UpdateResult) -> None:
    from .download import download
    from .install import (
        Expected,
        files_sha256,
        install_lock,
        place_version,
        remove_leftovers,
        stage_version,
        switch_link,
    )
    from .layout import write_record
    from .verify import verify_download, verify_release_attestation

    tag, manifest, asset = verified.tag, verified.manifest, verified.asset
    log = result.verification
    with install_lock(layout):
        remove_leftovers(layout)
        try:
            _settle(layout)  # "active" in the record must name the version being replaced
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
        if layout.active_version() == manifest.version:
            result.action = "up-to-date"  # a concurrent update got here first
            return
        api_digests: dict[str, str] = {}
        if source.kind == "github":
            try:
                api_digests = source.asset_digests(tag)
            except NetworkError as exc:
                log.skipped("api-digest", f"GitHub's asset digest unavailable: {exc.message}")
        fetched = download(
            source.file_url(tag, asset.name),
            layout.home,
            expected_size=asset.size,
            client=getattr(source, "client", None),
        )
        try:
            verify_download(
                asset.name,
                fetched.sha256,
                fetched.size,
                sums=verified.sums,
                manifest=manifest,
                api_digest=api_digests.get(asset.name),
                log=log,
            )
            verify_release_attestation(
                tag,
                fetched.sha256,
                verified.policy,
                log,
                release_bundle=lambda: _optional(
                    source.fetch, tag, models.attestation_name(manifest.version)
                ),
                api_bundles=lambda: source.attestation_bundles(fetched.sha256),
                source_kind=source.kind,
            )
            try:
                staging = stage_version(
                    layout,
                    fetched.path,
                    top=f"mux-{asset.target}",
                    expected=Expected(manifest.version, manifest.protocol_version, result.target),
                )
            except OSError as exc:
                raise _write_error(layout.versions, exc) from None
        finally:
            fetched.path.unlink(missing_ok=True)
        log.ok(LAYER_ARCHIVE, "members confined to the version folder; mux executable present")
        log.ok(
            LAYER_SMOKE_TEST, f"`mux version --json` reports {manifest.version} for {result.target}"
        )
        try:
            final = place_version(layout, staging, manifest.version)
            record = read_record(layout)
            versions = record.setdefault("versions", {})
            versions[manifest.version] = {
                "archive_sha256": fetched.sha256,
                "files_sha256": files_sha256(final),
                "target": result.target,
                "source": source.location,
                "installed_by": "mux update",
            }
            record.update(
                {
                    "schema": 1,
                    "bin_dir": str(layout.bin_dir),
                    "target": result.target,
                    "source": source.location,
                }
            )
            # Recorded before the link moves: a kill -9 after the switch still leaves the new
            # version's file list on record for --rollback, and "active" still names the old
            # version, which _settle() turns into "previous" whenever the switch was cut short.
            write_record(layout, record)
            switch_link(layout, manifest.version)
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
        result.action = "updated"
        try:
            result.removed_versions = _settle(layout)
        except OSError as exc:
            raise InstallError(
                f"mux {manifest.version} is installed and active, but tidying {layout.home} "
                f"failed: {exc.strerror or exc}",
                hint="run mux update again to finish",
            ) from None


def _settle(layout: Layout) -> list[str]:
    """Make install.json agree with the link, and keep two versions (lock held).

    After a switch, or after one that a kill cut short between moving the link and
    recording it: the recorded "active" that the link no longer names is the previous one.
    """
    from .install import prune_versions
    from .layout import write_record

    installed = layout.active_version()
    if installed is None:
        return []
    record = read_record(layout)
    recorded, previous = record.get("active"), record.get("previous")
    if isinstance(recorded, str) and recorded != installed:
        previous = recorded
    if not (isinstance(previous, str) and previous != installed):
        previous = None
    if previous and not layout.version_dir(previous).is_dir():
        previous = None
    keep = [installed, *([previous] if previous else [])]
    running = running_version(layout)  # never delete the files this process runs from
    removed = prune_versions(layout, [*keep, *([running] if running else [])])
    versions = record.get("versions") if isinstance(record.get("versions"), dict) else {}
    settled = {
        **record,
        "active": installed,
        "previous": previous,
        "versions": {v: d for v, d in (versions or {}).items() if v in keep},
    }
    if settled != record:
        write_record(layout, settled)
    return removed


def _write_error(directory: Path, exc: OSError) -> InstallError:
    return InstallError(
        f"cannot write {directory}: {exc.strerror or exc}; the installed mux is unchanged",
        hint="free some disk space or fix the permissions, then retry",
    )


def _tidy(layout: Layout) -> None:
    """Remove what killed runs left, when nothing else is running (best effort)."""
    from .install import install_lock, remove_leftovers

    if not layout.home.is_dir():
        return
    try:
        with install_lock(layout, wait=0):
            remove_leftovers(layout)
            _settle(layout)
    except (InstallError, OSError):
        pass  # another update holds the lock (it tidies), or the home is not writable


def rollback(layout: Layout, options: UpdateOptions) -> UpdateResult:
    """Switch back to the previous version after checking its files against the record."""
    from .install import (
        Expected,
        check_build,
        install_lock,
        remove_leftovers,
        reported_build,
        switch_link,
    )
    from .layout import write_record

    ensure_writable(layout.home)
    ensure_writable(layout.bin_dir)
    with install_lock(layout):
        remove_leftovers(layout)
        try:
            _settle(layout)
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
        record = read_record(layout)
        active = layout.active_version()
        previous = record.get("previous")
        if not isinstance(previous, str) or previous == active:
            others = [v for v in layout.installed_versions() if v != active]
            previous = others[-1] if len(others) == 1 else None
        if previous is None or not layout.version_dir(previous).is_dir():
            raise InstallError(
                f"no previous version to roll back to in {layout.home}",
                hint="install a specific one with: mux update --version X.Y.Z --allow-downgrade",
            )
        entry = record.get("versions", {}).get(previous, {})
        expected_list = entry.get("files_sha256") if isinstance(entry, dict) else None
        if not models.is_sha256(expected_list):
            from .errors import VerificationError

            raise VerificationError(
                f"verification failed (rollback): {previous} has no file list on record "
                f"in {layout.record_path}",
                hint=f"reinstall it with: mux update --version {previous} --allow-downgrade",
            )
        problem = verify_files(layout.version_dir(previous), expected_list)
        if problem:
            from .errors import VerificationError

            raise VerificationError(
                f"verification failed (rollback): {problem}",
                hint=f"reinstall it with: mux update --version {previous} --allow-downgrade",
            )
        target = entry.get("target") if isinstance(entry, dict) else None
        # The kept build runs once: its protocol comes from the same answer that is checked.
        reported = reported_build(layout.version_dir(previous))
        protocol = reported.protocol_version
        check_build(reported, Expected(previous, protocol, target or str(record.get("target", ""))))
        try:
            switch_link(layout, previous)
        except OSError as exc:
            raise _write_error(layout.bin_dir, exc) from None
        record.update({"active": previous, "previous": active})
        try:
            write_record(layout, record)
        except OSError as exc:
            raise InstallError(
                f"rolled back to mux {previous}, but recording it in {layout.record_path} "
                f"failed: {exc.strerror or exc}",
                hint="run mux update --rollback again once the disk is writable",
            ) from None
    result = UpdateResult(
        action="rolled-back",
        layout=layout,
        from_version=active,
        to_version=previous,
        target=str(target or record.get("target", "")),
        new_protocol=protocol,
    )
    result.verification.ok("files", f"every file of {previous} matches its recorded sha256")
    result.servers = _server_verdicts(protocol)
    return result


# -- the report ------------------------------------------------------------------------------


def _print_result(result: UpdateResult, options: UpdateOptions) -> None:
    if options.as_json:
        import json

        print(json.dumps(result.to_json(), sort_keys=True))
        return
    print(render_update(result))


def render_update(result: UpdateResult) -> str:
    lines = []
    if result.action == "dry-run":
        plan = result.plan
        lines += [
            f"would update mux {result.from_version or '(not installed)'} → {result.to_version} "
            f"({result.target})",
            f"  release: {plan['release_url']}",
            f"  asset:   {plan['asset_url']} ({plan['size']} bytes, sha256 {plan['sha256']})",
            f"  checks:  {', '.join(plan['checks'])}",
            f"  into:    {plan['version_dir']}",
            f"  link:    {plan['link']}",
            "nothing was changed (--dry-run)",
        ]
        return "\n".join(lines)
    if result.action == "up-to-date":
        lines.append(f"mux {result.to_version} is already installed in {result.layout.home}")
    elif result.action == "rolled-back":
        lines.append(f"rolled back mux {result.from_version} → {result.to_version}")
    else:
        lines.append(
            f"updated mux {result.from_version or '(none)'} → {result.to_version} ({result.target})"
        )
    for layer in result.verification.layers:
        mark = "ok" if layer.status == "ok" else "SKIPPED"
        lines.append(f"  {layer.layer}: {mark}: {layer.detail}")
    if result.action in ("updated", "rolled-back"):
        lines.append(
            f"  {result.layout.link} → {result.layout.version_dir(str(result.to_version))}"
        )
        if result.action == "updated" and result.from_version:
            lines.append(f"  previous version {result.from_version} kept: mux update --rollback")
    live = [s for s in result.servers if s.get("state") == "live"]
    needing = [s for s in live if s.get("restart_needed")]
    for server in needing:
        status = server.get("status") or {}
        lines.append(
            f"server {server['address']} (pid {status.get('pid')}, mux {status.get('version')}) "
            f"speaks protocol {status.get('protocol_version')}; mux {result.to_version} speaks "
            f"{result.new_protocol}. It keeps running; restart it when convenient "
            "(this ends the programs in it):"
        )
        lines.append(f"  {server['restart_command']}")
    for server in live:
        if not server.get("restart_needed"):
            lines.append(
                f"server {server['address']} speaks protocol {result.new_protocol}: "
                "nothing to do, it keeps running"
            )
    return "\n".join(lines)
