"""Layer 3's Sigstore check in a child process of this same mux, started before it is needed.

Why a process and not a thread: importing sigstore and verifying a bundle is about 0.3 s of
Python. In a worker thread it held the interpreter lock that the download and the unpacking
need, so the "parallel" attestation still made ``mux update`` about 0.2 s longer than the same
update without it (measured on the released build, 64 MiB archive). A child has an interpreter
of its own and runs on another core; ``mux update`` starts it as soon as it runs (see
:func:`start`), so sigstore is imported while the parent imports its HTTP stack and fetches the
release's metadata, and the answer is usually in before the archive is.

The child is the running build itself (:func:`updater.config.buildinfo.current_mux_command`
with :data:`updater.trust.attestation_start.WORKER_ARG`, started by
:mod:`updater.trust.attestation_start`): it imports sigstore, reads one request on stdin (the
bundles, the digest the signed ``SHA256SUMS`` gives, who must have built it, which trust root), runs
:func:`updater.trust.attestation.verify_attestation`, writes one JSON answer on stdout and exits. It
decides nothing: the identity, the digest and the trust root all come from the parent's
policy, and it reads no settings of its own. The parent believes only an answer that says it
verified exactly the digest it asked for; a child that exits, crashes, says something else or
takes longer than :data:`WORKER_TIMEOUT` fails the layer (fail closed). A child left alone
(its parent gone) reads end-of-file and exits.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from updater.childio import OutputTooLarge, read_bounded
from updater.errors import VerificationError
from updater.trust.attestation_start import spare_core, spawn, take_prestarted

if TYPE_CHECKING:
    from types import ModuleType

    from updater.trust.attestation import AttestationIdentity, AttestationReport

WORKER_TIMEOUT = 120.0  # seconds from the request to the answer (sigstore's root refresh included)
_MAX_ANSWER = 256 * 1024
_IDENTITY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "repository": str,
    "signer_workflow": str,
    "ref": (str, type(None)),
    "issuer": str,
    "github_url": str,
    "require_github_hosted_runner": bool,
}


class AttestationWorker:
    """The parent's side: one child, asked once (:meth:`verify`), always reaped (:meth:`close`)."""

    def __init__(self, process: subprocess.Popen[bytes] | None, failure: str | None = None):
        self._process = process
        self._failure = failure  # why there is no child (it could not be started)

    def verify(
        self,
        bundles: Sequence[bytes],
        sha256: str,
        identity: AttestationIdentity,
        *,
        trusted_root: Path | None,
        warn: Callable[[str], None],
    ) -> AttestationReport:
        """What :func:`updater.trust.attestation.verify_attestation` answers, from the child.

        Raises :class:`VerificationError` (prefixed ``attestation:``) on every failure,
        the child's own included.
        """

        process = self._process
        if process is None:
            raise VerificationError(f"attestation: cannot start the verifier ({self._failure})")
        self._process = None  # asked once; read_bounded reaps it whatever happens
        request = {
            "bundles": [base64.b64encode(bundle).decode("ascii") for bundle in bundles],
            "sha256": sha256,
            "identity": asdict(identity),
            "trusted_root": None if trusted_root is None else os.fspath(trusted_root),
        }
        # Written by another thread: a child that never reads (stuck in its imports) must not
        # block this one past the deadline, which read_bounded enforces by killing it.
        writer = threading.Thread(
            target=_send, args=(process, json.dumps(request).encode()), daemon=True
        )
        writer.start()
        try:
            out, err = read_bounded(process, _MAX_ANSWER, time.monotonic() + WORKER_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise VerificationError(
                f"attestation: the verifier gave no answer within {WORKER_TIMEOUT:g} s"
            ) from None
        except OutputTooLarge:
            raise VerificationError(
                f"attestation: the verifier answered more than {_MAX_ANSWER} bytes"
            ) from None
        except OSError as exc:
            raise VerificationError(
                f"attestation: cannot talk to the verifier ({exc.strerror or exc})"
            ) from None
        finally:
            writer.join()
        answer = _answer(out)
        if answer is None:
            last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise VerificationError(
                f"attestation: the verifier exited with {_exit_status(process.returncode)} "
                f"without an answer ({last[0][:300]})"
            )
        for message in answer.get("warnings") or ():
            warn(str(message))
        if answer.get("ok") is not True:
            error = answer.get("error")
            raise VerificationError(
                error
                if isinstance(error, str) and error.startswith("attestation: ")
                else "attestation: the verifier refused without saying why"
            )
        try:
            report = _attestation().AttestationReport.from_json(answer["report"])
        except (KeyError, TypeError, ValueError):
            raise VerificationError("attestation: the verifier's answer is malformed") from None
        if answer.get("sha256") != sha256 or sha256 not in {s.sha256 for s in report.subjects}:
            raise VerificationError(
                f"attestation: the verifier answered for another digest than sha256 {sha256}"
            )
        return report

    def close(self) -> None:
        """Stop the child if it was never asked (the update was not needed, or failed first)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> AttestationWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def early(repository: str) -> AttestationWorker | None:
    """The child for an update about to run: the prestarted one
    (:func:`updater.trust.attestation_start.prestart`), else a new one when a spare CPU can
    run it beside the update; None without one (one core, or a container's CPU quota under
    two: the attestation layer then starts its own when it gets there, where it no longer
    slows anything else), or when no ``repository`` is known whose workflow an attestation
    could name."""
    prestarted = take_prestarted()
    if prestarted is not None:
        return AttestationWorker(prestarted)
    return start() if repository and spare_core() else None


def start() -> AttestationWorker:
    """A child importing sigstore from now on, ready for :meth:`AttestationWorker.verify`.

    A child that cannot be started is reported by :meth:`~AttestationWorker.verify`, as
    the attestation layer's failure, only if the layer is reached.
    """
    process = spawn()
    if isinstance(process, str):
        return AttestationWorker(None, process)
    return AttestationWorker(process)


def _send(process: subprocess.Popen[bytes], request: bytes) -> None:
    stdin = process.stdin
    assert stdin is not None
    try:
        stdin.write(request)
    except OSError:
        pass  # the child is gone (its exit status says why) or was killed at the deadline
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _answer(out: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(out)
    except (ValueError, RecursionError):
        return None
    return answer if isinstance(answer, dict) else None


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {-code}"
    return f"status {code}"


# -- the child ----------------------------------------------------------------------------------


def serve() -> int:
    """The child: import sigstore, then answer the one request on stdin (see the module)."""
    # pydantic would look for plugins in every installed distribution's entry points: 2 % of
    # the child's instructions (30 M of 1,497 M, callgrind), and no plugin has a say here.
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    attestation = _attestation()
    attestation.preload()  # the point of starting early: this takes most of the time
    warnings: list[str] = []
    try:
        bundles, sha256, identity, root = _request(sys.stdin.buffer.read(_max_request()))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        answer: dict[str, Any] = {
            "ok": False,
            "error": f"attestation: bad request to the verifier ({exc})",
        }
    else:
        try:
            report = attestation.verify_attestation(
                bundles, sha256, identity, trusted_root=root, warn=warnings.append
            )
            answer = {"ok": True, "sha256": sha256, "report": report.to_json()}
        except VerificationError as exc:
            answer = {"ok": False, "error": exc.message}
        except Exception as exc:  # verify_attestation should not; fail closed with one line
            answer = {"ok": False, "error": f"attestation: {type(exc).__name__}: {exc}"}
    answer["warnings"] = warnings
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    return 0


def _max_request() -> int:
    attestation = _attestation()
    return (attestation.MAX_BUNDLE_BYTES * 4 // 3 + 8) * attestation.MAX_BUNDLES + 64 * 1024


def _request(raw: bytes) -> tuple[list[bytes], str, AttestationIdentity, Path | None]:
    request = json.loads(raw)
    if not isinstance(request, dict):
        raise ValueError("not a JSON object")
    fields = request["identity"]
    if not isinstance(fields, dict) or set(fields) != set(_IDENTITY_FIELDS):
        raise ValueError("identity fields")
    for name, kind in _IDENTITY_FIELDS.items():
        if not isinstance(fields[name], kind):
            raise ValueError(f"identity field {name}")
    sha256, root, bundles = request["sha256"], request["trusted_root"], request["bundles"]
    if not isinstance(sha256, str) or not isinstance(root, str | None):
        raise ValueError("sha256 or trusted_root")
    if not isinstance(bundles, list) or not all(isinstance(b, str) for b in bundles):
        raise ValueError("bundles")
    return (
        [base64.b64decode(b, validate=True) for b in bundles],
        sha256,
        _attestation().AttestationIdentity(**fields),
        None if root is None else Path(root),
    )


def _attestation() -> ModuleType:
    # deferred (+26 ms and sigstore's 0.5-0.7 s, in the child): the parent starts this child
    # before its own imports, and what the attestation layer imports is the child's work
    from updater.trust import attestation

    return attestation
