"""Whether a server's background check stages or installs a release on its own (pure).

``auto_install`` (the user's config.toml, or the machine policy, which may fix it):

* ``"off"`` (the default): never; the check tells watchers (``update-available``) and that
  is all;
* ``"download"``: stage it (``mux update --stage``'s verified copy beside the active
  version) and install nothing: the next ``mux update`` applies it without a download;
* ``"compatible"``: a release whose protocol equals that of every live server, so that no
  server needs a restart for it (servers keep running their own build in any case);
* ``"all"``: any update; every server that speaks another protocol is told the restart it
  needs (``restart-needed``), and none is ever restarted behind the user's back.

Never under the machine policy's ``check-only`` or ``disabled``, never for a mux a packager
manages, never for a version the user skipped, held or that failed to start here
(:func:`updater.core.userstate.withheld`) or whose staging failed here, never on a
connection the system reports as metered unless ``download_on_metered`` allows it (unknown
counts as not metered), and never when the ``CI`` environment variable is set (as rustup
does since 1.28: a CI job's runner is not the place for work nobody asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

OFF, DOWNLOAD, COMPATIBLE, ALL = "off", "download", "compatible", "all"
BACKGROUND_MODES = (DOWNLOAD, COMPATIBLE, ALL)  # the modes that do work in the background
REASON_OFF = "auto_install is off"  # the one reason that says the user did not opt in
REASON_CI = "the CI environment variable is set: nothing runs in the background"


class LiveServer(NamedTuple):
    address: str
    protocol_version: int


class AutoInstall(NamedTuple):
    """The decision, and why (one sentence)."""

    install: bool
    reason: str
    version: str | None = None
    protocol_version: int | None = None
    # the servers that will need a restart once it is installed ("all" only)
    restart_needed: tuple[str, ...] = ()
    stage_only: bool = False  # "download": the release is staged, not installed

    def to_json(self) -> dict[str, object]:
        return {
            "install": self.install,
            "reason": self.reason,
            "version": self.version,
            "protocol_version": self.protocol_version,
            "restart_needed": list(self.restart_needed),
            "stage_only": self.stage_only,
        }

    @classmethod
    def from_json(cls, doc: object) -> AutoInstall | None:
        if not isinstance(doc, dict) or not isinstance(doc.get("install"), bool):
            return None
        version, protocol = doc.get("version"), doc.get("protocol_version")
        restarts = doc.get("restart_needed")
        return cls(
            install=doc["install"],
            reason=str(doc.get("reason") or ""),
            version=version if isinstance(version, str) else None,
            protocol_version=protocol if isinstance(protocol, int) else None,
            restart_needed=tuple(str(a) for a in restarts) if isinstance(restarts, list) else (),
            stage_only=doc.get("stage_only") is True,
        )


def decide_auto_install(
    *,
    mode: str,
    updates: str,
    managed_by: str | None,
    version: str,
    protocol_version: int,
    is_update: bool,
    withheld: str | None,
    servers: Sequence[LiveServer],
    ci: bool = False,
) -> AutoInstall:
    """Everything but the network's cost (:func:`allowed_on`, asked last: it runs a program).

    ``managed_by``: who else installs this mux (a packager), if anyone; ``is_update``: the
    release is newer than the installed one; ``withheld``: why the user's state holds it
    back (or why its staging is not tried again), if it does; ``servers``: every live
    server, with the protocol it speaks; ``ci``: the ``CI`` environment variable is set."""

    def no(reason: str) -> AutoInstall:
        return AutoInstall(False, reason, version, protocol_version, stage_only=mode == DOWNLOAD)

    if mode not in BACKGROUND_MODES:
        return no(REASON_OFF)
    if ci:
        return no(REASON_CI)
    if updates != "enabled":
        return no(f'the machine policy sets updates = "{updates}"')
    if managed_by is not None:
        return no(f"{managed_by} installs updates of this mux")
    if not is_update:
        return no(f"mux {version} is not newer than the installed mux")
    if withheld is not None:
        return no(withheld)
    if mode == DOWNLOAD:  # nothing switches: no server is judged against it yet
        return AutoInstall(True, f'auto_install = "{mode}"', version, protocol_version, (), True)
    others = tuple(s.address for s in servers if s.protocol_version != protocol_version)
    if mode == COMPATIBLE and others:
        first = next(s for s in servers if s.protocol_version != protocol_version)
        return no(
            f"mux {version} speaks protocol {protocol_version} and the server on "
            f"{first.address} speaks {first.protocol_version}: it would need a restart "
            '(auto_install = "compatible")'
        )
    return AutoInstall(
        True,
        f'auto_install = "{mode}"',
        version,
        protocol_version,
        restart_needed=others,
    )


def allowed_on(metered: bool | None, *, download_on_metered: bool) -> str | None:
    """Why a background download may not run on this connection now; None when it may.
    ``metered`` is what the system says (None: it does not say, which counts as not)."""
    if metered and not download_on_metered:
        return "the connection is metered (download_on_metered = true allows it)"
    return None
