"""Which Sigstore instance an attestation must chain to: the trusted root, and the verifier.

A private instance's root from a file (``MUX_SIGSTORE_TRUSTED_ROOT``, a trusted root or a
client trust config), else Sigstore's production root: refreshed online within a bound, or,
offline or when that fails (with a warning), the copy cached by or shipped with sigstore.
sigstore is imported only here and only when a bundle is verified.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from updater.errors import VerificationError
from updater.trust.attestation_text import one_line

if TYPE_CHECKING:
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

_CLIENT_TRUST_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"


def quiet_sigstore_logs() -> None:
    # sigstore and tuf log warnings (e.g. "TUF repository is loaded in offline mode") that, with
    # no logging configured, Python's last-resort handler would print as stray stderr lines.
    # mux says what matters through warn(); an application that configures logging still gets
    # the records through propagation.
    for name in ("sigstore", "tuf"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def load_verifier(
    trusted_root: Path | None,
    offline: bool,
    refresh_timeout: float,
    warn: Callable[[str], None],
) -> tuple[Verifier, str]:
    quiet_sigstore_logs()
    try:
        # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
        from sigstore.verify import Verifier
    except ImportError as exc:  # a broken install must not turn into "verified"
        raise VerificationError(f"attestation: sigstore is not available ({exc})") from None

    if trusted_root is not None:
        root = _trusted_root_from_file(trusted_root)
        description = f"file:{trusted_root}"
    else:
        root, description = _production_trusted_root(offline, refresh_timeout, warn)
    try:
        return Verifier(trusted_root=root), description
    except Exception as exc:  # sigstore raises its own errors and ValueErrors on bad roots
        raise VerificationError(
            f"attestation: trusted root ({description}) is unusable ({one_line(exc)})"
        ) from None


def _trusted_root_from_file(path: Path) -> TrustedRoot:
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from sigstore.models import ClientTrustConfig, TrustedRoot

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VerificationError(
            f"attestation: cannot read trusted root {path} ({one_line(exc)})"
        ) from None
    try:
        document = json.loads(text)
        # A client trust config (sigstore --trust-config) wraps a trusted root; accept both.
        if (
            isinstance(document, dict)
            and document.get("mediaType") == _CLIENT_TRUST_CONFIG_MEDIA_TYPE
        ):
            return ClientTrustConfig.from_json(text).trusted_root
        return TrustedRoot.from_file(str(path))
    except Exception as exc:  # pydantic, JSON and sigstore errors alike
        raise VerificationError(
            f"attestation: trusted root {path} is not a Sigstore trusted root ({one_line(exc)})"
        ) from None


def _production_trusted_root(
    offline: bool, refresh_timeout: float, warn: Callable[[str], None]
) -> tuple[TrustedRoot, str]:
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from sigstore.models import ClientTrustConfig

    if not offline:
        outcome: dict[str, Any] = {}

        def refresh() -> None:
            try:
                outcome["root"] = ClientTrustConfig.production(offline=False).trusted_root
            except BaseException as exc:  # reported below; a thread must not die noisily
                outcome["error"] = exc

        # python-tuf's own timeouts are per request (30 s); a daemon thread bounds the whole
        # refresh. A refresh that is still running is abandoned: tuf writes its cache files
        # atomically, so it cannot corrupt what the offline fallback reads.
        worker = threading.Thread(target=refresh, name="mux-sigstore-trust-refresh", daemon=True)
        worker.start()
        worker.join(refresh_timeout)
        if "root" in outcome:
            return outcome["root"], "sigstore production (refreshed online)"
        reason = (
            f"{one_line(outcome['error'])}"
            if "error" in outcome
            else f"no answer within {refresh_timeout:g} s"
        )
        warn(
            f"attestation: could not refresh Sigstore's trust root online ({reason}); "
            "using the last cached copy or the one that ships with sigstore"
        )
    try:
        root = ClientTrustConfig.production(offline=True).trusted_root
    except Exception as exc:
        raise VerificationError(
            f"attestation: cannot load Sigstore's trust root ({one_line(exc)})"
        ) from None
    return root, "sigstore production (offline copy)"
