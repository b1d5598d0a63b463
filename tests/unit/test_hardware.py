"""The hardware table and the decode bound of docs/definitions.md."""

from __future__ import annotations

import pytest

from tokrate.errors import ConfigError
from tokrate.hardware import (
    HARDWARE_PROFILES,
    TENSOR_PARALLEL_EFFICIENCY,
    get_hardware,
)
from tokrate.physics import decode_bound_tps


def test_design_example_7b_and_34b_fp16_at_2_tb_per_s() -> None:
    assert decode_bound_tps(2.0e12, 7, 2) == pytest.approx(142.857, rel=1e-4)
    assert decode_bound_tps(2.0e12, 34, 2) == pytest.approx(29.41, rel=1e-3)


def test_int4_raises_speed_four_times_but_keeps_the_ratio() -> None:
    fp16 = [decode_bound_tps(2e12, p, 2) for p in (7, 34)]
    int4 = [decode_bound_tps(2e12, p, 0.5) for p in (7, 34)]
    assert int4[0] / fp16[0] == pytest.approx(4)
    assert int4[0] / int4[1] == pytest.approx(fp16[0] / fp16[1])


def test_required_profiles_exist() -> None:
    assert {"a100-80g", "h100-sxm", "h200", "l4", "rtx-4090"} <= set(HARDWARE_PROFILES)


def test_tensor_parallel_adds_up_with_efficiency() -> None:
    one = get_hardware("a100-80g")
    two = one.scaled(2)
    assert two.memory_bytes == 2 * one.memory_bytes
    expected = 2 * one.bandwidth_bytes_per_s * TENSOR_PARALLEL_EFFICIENCY
    assert two.bandwidth_bytes_per_s == pytest.approx(expected)
    assert one.scaled(1) is one


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown hardware profile 'tpu'.*a100-80g"):
        get_hardware("tpu")
