"""What a verified attestation establishes, for ``mux update``'s report (layer 3).

:class:`AttestationReport` crosses a process boundary: the attestation child
(:mod:`updater.trust.attestation_worker`) writes it with :meth:`~AttestationReport.to_json`,
the parent reads it back with :meth:`~AttestationReport.from_json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AttestedSubject:
    name: str
    sha256: str


@dataclass(frozen=True)
class AttestationReport:
    """What the verified attestation establishes, for ``mux update``'s report."""

    repository: str
    source_repository_uri: str
    signer_identity: str
    signer_workflow: str
    signer_ref: str
    source_ref: str | None
    source_commit: str | None
    issuer: str
    runner_environment: str | None
    predicate_type: str
    subjects: tuple[AttestedSubject, ...]
    log_index: int | None
    integrated_time: datetime | None
    trust_root: str

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "source_repository_uri": self.source_repository_uri,
            "signer_identity": self.signer_identity,
            "signer_workflow": self.signer_workflow,
            "signer_ref": self.signer_ref,
            "source_ref": self.source_ref,
            "source_commit": self.source_commit,
            "issuer": self.issuer,
            "runner_environment": self.runner_environment,
            "predicate_type": self.predicate_type,
            "subjects": [{"name": s.name, "sha256": s.sha256} for s in self.subjects],
            "log_index": self.log_index,
            "integrated_time": (
                self.integrated_time.isoformat().replace("+00:00", "Z")
                if self.integrated_time
                else None
            ),
            "trust_root": self.trust_root,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AttestationReport:
        """The report :meth:`to_json` wrote (from :mod:`updater.trust.attestation_worker`'s child);
        raises ``ValueError``, ``TypeError`` or ``KeyError`` on anything else."""
        texts = {
            name: document[name]
            for name in (
                "repository",
                "source_repository_uri",
                "signer_identity",
                "signer_workflow",
                "signer_ref",
                "issuer",
                "predicate_type",
                "trust_root",
            )
        }
        optional = {
            name: document[name] for name in ("source_ref", "source_commit", "runner_environment")
        }
        if not all(isinstance(v, str) for v in texts.values()) or not all(
            isinstance(v, str | None) for v in optional.values()
        ):
            raise TypeError("report fields")
        log_index, integrated = document["log_index"], document["integrated_time"]
        if not isinstance(log_index, int | None) or isinstance(log_index, bool):
            raise TypeError("log_index")
        subjects = tuple(
            AttestedSubject(str(s["name"]), str(s["sha256"])) for s in document["subjects"]
        )
        return cls(
            **texts,
            **optional,
            subjects=subjects,
            log_index=log_index,
            integrated_time=None if integrated is None else datetime.fromisoformat(integrated),
        )
