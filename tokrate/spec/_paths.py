"""Paths inside a config made absolute from the config file's folder (the current
directory for a command-line value): hardware files, the simulator's tiers file and
tokenizers. Stored absolute
because run.json keeps them and workers and ``tokrate report`` read them again."""

from __future__ import annotations

import dataclasses as _dc
from collections.abc import Iterable as _Iterable
from collections.abc import Iterator as _Iterator
from pathlib import Path as _Path

from tokrate.spec._convert import _Ctx
from tokrate.spec.types import TIKTOKEN_PREFIX, ModelSpec, OutputSpec, SimulatorSpec

__all__ = ["resolve_hardware_files", "resolve_tokenizers"]


def resolve_tokenizers(models: _Iterable[ModelSpec], ctx: _Ctx) -> _Iterator[ModelSpec]:
    """Each model with a relative ``tokenizer`` path made absolute from the config
    file's folder (the current directory for a command-line value); workers load the
    file by that path. Whether it loads is checked before the load, by
    :func:`tokrate.inputs.tokencount.check_tokenizers` (the spec loads no tokenizer
    library)."""
    for i, model in enumerate(models):
        value = model.tokenizer
        if value is None or value.startswith(TIKTOKEN_PREFIX) or _Path(value).is_absolute():
            yield model
            continue
        base = _base(ctx, f"model[{i}].tokenizer")
        yield _dc.replace(model, tokenizer=str(base / _Path(value).expanduser()))


def resolve_hardware_files(sections: dict[str, object], ctx: _Ctx) -> None:
    """Make a relative ``hardware = "gpu.toml"`` and ``[simulator] tiers_file``
    absolute: from the config file's folder (like prompt paths), or the current
    directory for a command-line value. Stored
    absolute because run.json keeps the string and ``tokrate report`` re-reads it later,
    from wherever it is run."""
    from tokrate.hardware import is_hardware_file

    for name in ("output", "simulator"):
        section = sections[name]
        if not isinstance(section, OutputSpec | SimulatorSpec):
            continue
        value = section.hardware
        if not is_hardware_file(value) or _Path(value).is_absolute():
            continue
        sections[name] = _dc.replace(section, hardware=str(_base(ctx, f"{name}.hardware") / value))
    simulator = sections["simulator"]
    if isinstance(simulator, SimulatorSpec) and simulator.tiers_file is not None:
        tiers = _Path(simulator.tiers_file).expanduser()
        if not tiers.is_absolute():
            tiers = _base(ctx, "simulator.tiers_file") / tiers
            sections["simulator"] = _dc.replace(simulator, tiers_file=str(tiers))


def _base(ctx: _Ctx, key: str) -> _Path:
    """The folder a relative path under ``key`` is taken from."""
    from_file = ctx.source is not None and ctx.where(key) == ctx.source
    return _Path(str(ctx.source)).resolve().parent if from_file else _Path.cwd()
