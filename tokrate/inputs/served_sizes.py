"""Model sizes a server reports, applied to the targets after the pre-flight.

A llama-server says what it serves (``GET /v1/models`` ``meta.n_params``, ``meta.size``,
``meta.ftype``; :class:`~tokrate.runfolder.served_model.ServedModel`): that is the model's
size and weight width as loaded, better than any guess from its name. So, per target:

- a size or bytes per parameter the user gave (``[[model]] params_b``,
  ``bytes_per_param``) always stands; where the server reports one more than
  :data:`MISMATCH` apart, the run warns, naming both (``params_b = 8.0`` on a 23 M
  model placed it at 8B without a word);
- otherwise the server's figures replace the name's inference (or fill an unknown):
  ``params_b`` = n_params / 1e9, ``bytes_per_param`` = weight bytes / n_params (F16:
  2.0; a Q4_K_M file about 0.6, its scales included), ``size_source`` /
  ``bytes_source`` = "server", and the run says so in one line per target. A name
  that reads as mixture-of-experts keeps its active share of the server's total
  (n_params counts every expert).

The simulator's tiers keep their own sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

from tokrate.inputs.targets import Target, sort_targets
from tokrate.runfolder.served_model import ServedModel

__all__ = ["MISMATCH", "with_served_sizes"]

#: A configured figure more than this factor from the server's gets a warning.
MISMATCH: Final = 1.25


def _apart(a: float, b: float) -> bool:
    return max(a, b) > MISMATCH * min(a, b)


def _one(target: Target, served: ServedModel) -> tuple[Target, list[str], list[str]]:
    """The target with the server's sizes where the user gave none; (target, notes,
    warnings)."""
    m = target.model
    notes: list[str] = []
    warnings: list[str] = []
    changes: dict[str, float | None] = {}
    size_source, bytes_source = target.size_source, target.bytes_source
    params_b, bpp = served.params_b, served.bytes_per_param
    what = f"the server reports {served.describe()} ({served.source})"
    if params_b is not None:
        if target.size_source == "config":
            if m.params_b is not None and _apart(m.params_b, params_b):
                warnings.append(
                    f"target {target.label}: params_b = {m.params_b:g} in the config, but"
                    f" {what}: charts place it at {m.params_b:g}B as configured; check"
                    " the config"
                )
        else:
            share = 1.0
            if m.params_b and m.active_params_b and m.active_params_b < m.params_b:
                share = m.active_params_b / m.params_b  # a mixture-of-experts name
            changes["params_b"] = params_b
            changes["active_params_b"] = params_b * share
            size_source = "server"
    if bpp is not None:
        if target.bytes_source == "config":
            if m.bytes_per_param is not None and _apart(m.bytes_per_param, bpp):
                warnings.append(
                    f"target {target.label}: bytes_per_param = {m.bytes_per_param:g} in the"
                    f" config, but {what}: the bound uses {m.bytes_per_param:g} as configured"
                )
        else:
            changes["bytes_per_param"] = round(bpp, 3)
            bytes_source = "server"
    if changes:
        notes.append(f"size of {target.label}: {what}; used for its size and bound")
    model = dataclasses.replace(m, **changes)  # type: ignore[arg-type]
    sized = dataclasses.replace(
        target, model=model, served=served, size_source=size_source, bytes_source=bytes_source
    )
    return sized, notes, warnings


def with_served_sizes(
    targets: Sequence[Target], served: Mapping[str, ServedModel]
) -> tuple[tuple[Target, ...], list[str], list[str]]:
    """``targets`` with what their servers reported (module doc), sorted again; plus one note per target sized by its server and one warning per configured figure
    its server contradicts. ``served`` is by target label."""
    out: list[Target] = []
    notes: list[str] = []
    warnings: list[str] = []
    for t in targets:
        facts = served.get(t.label)
        if facts is None or t.simulated:
            out.append(t if facts is None else dataclasses.replace(t, served=facts))
            continue
        sized, n, w = _one(t, facts)
        out.append(sized)
        notes += n
        warnings += w
    # Sizes may have changed: the order is by size (tokrate.inputs.targets).
    endpoints = list(dict.fromkeys(t.endpoint.name for t in targets))
    return sort_targets(out, endpoints), notes, warnings
