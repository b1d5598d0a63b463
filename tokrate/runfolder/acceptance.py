"""accepted.json: a run whose level the user accepted as the new normal of its benchmark
(``tokrate accept RUN``), as one frozen type with one reader.

A nightly check judges a night against the benchmark's recent good nights, and a night
that regressed is no reference: so a real, lasting change stays flagged night after
night until someone says it is intended. Accepting a run does that: from then on the
reference of a later night starts at the accepted run (older nights are left out), and
the nights from the accepted one up to the moment of acceptance count as good whatever
their own checks said (tokrate.analysis.reference). Written into the accepted run's
folder by :func:`tokrate.runfolder.store.write_acceptance`, read by
:func:`tokrate.runfolder.store.read_acceptance`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from tokrate.errors import RunFolderError
from tokrate.runfolder.jsondoc import from_json

__all__ = ["ACCEPTANCE_FILE", "ACCEPTANCE_KIND", "Acceptance", "acceptance_from_json"]

#: The file, inside the accepted run's folder.
ACCEPTANCE_FILE: Final = "accepted.json"
ACCEPTANCE_KIND: Final = "tokrate-acceptance"


@dataclass(frozen=True, slots=True)
class Acceptance:
    """When the run was accepted (``accepted_at``, ISO-8601 UTC) and why (``note``)."""

    kind: str = field(default=ACCEPTANCE_KIND, kw_only=True)
    accepted_at: str
    note: str | None = None

    @property
    def accepted_datetime(self) -> datetime:
        parsed = datetime.fromisoformat(self.accepted_at.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def acceptance_from_json(data: Any, where: str) -> Acceptance:
    """accepted.json's document. Raises RunFolderError (one line naming ``where``) for
    anything else."""
    if not isinstance(data, Mapping) or data.get("kind") != ACCEPTANCE_KIND:
        raise RunFolderError(f"{where}: not a tokrate acceptance")
    out = from_json(Acceptance, data, where)
    try:
        out.accepted_datetime  # noqa: B018 - validates the time
    except ValueError:
        raise RunFolderError(f"{where}: accepted_at {out.accepted_at!r} is no ISO time") from None
    return out
