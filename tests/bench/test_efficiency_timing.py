"""The denormal check of ``bench efficiency``: it finds a step on denormal numbers and leaves
the process's flush setting as it found it."""

import time

import pytest
import torch

from bdlkit.bench import efficiency_timing as timing

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
FLUSH_SUPPORTED = torch.set_flush_denormal(False)  # False where the CPU cannot flush


class _Scale:
    """A row whose step halves a tensor filled with ``value`` (a denormal or a normal)."""

    def __init__(self, value: float, size: int = 20_000) -> None:
        self.x = torch.full((size,), value, dtype=torch.float32)

    def step(self, state, batch):
        return self.x.mul(0.5), {}


class _SlowUnflushed:
    """A row whose step takes 4 ms with denormals not flushed and 1 ms flushed, as a step
    on denormal numbers would on a CPU with a slow path for them (deterministic: how much
    slower real denormal arithmetic is depends on the CPU, e.g. little on AMD EPYC)."""

    def step(self, state, batch):
        time.sleep(0.001 if timing.flushing_denormals() else 0.004)
        return state, {}


def _speedups(rows, rounds=3):
    live = {name: [row, None] for name, row in rows.items()}
    plan = {name: (4, rounds) for name in rows}
    return timing.denormal_speedups(live, plan, None, rounds, lambda: None,
                                    {name: {} for name in rows}, torch.device("cpu"))


@pytest.mark.skipif(not FLUSH_SUPPORTED, reason="torch.set_flush_denormal unsupported here")
@pytest.mark.parametrize("setting", [True, False])
def test_the_denormal_check_restores_the_callers_setting(setting):
    torch.set_flush_denormal(setting)
    try:
        assert timing.flushing_denormals() is setting
        speedups = _speedups({"denormal": _Scale(1e-39)}, rounds=2)
        assert speedups["denormal"] > 0
        assert timing.flushing_denormals() is setting
        with pytest.raises(RuntimeError), timing.denormals_flushed(not setting):
            assert timing.flushing_denormals() is not setting
            raise RuntimeError("a failing step")
        assert timing.flushing_denormals() is setting
    finally:
        torch.set_flush_denormal(False)  # torch's default


@pytest.mark.skipif(not FLUSH_SUPPORTED, reason="torch.set_flush_denormal unsupported here")
def test_a_step_slower_unflushed_gets_its_speedup_and_is_flagged():
    speedups = _speedups({"denormal": _SlowUnflushed(), "normal": _Scale(1.0)})
    assert speedups["denormal"] > timing.DENORMAL_FLAG  # about 4 ms / 1 ms: each way, interleaved
    assert speedups["normal"] > 0
    rows = [{"model": "mlp", "method": "denormal", "denormal_speedup": speedups["denormal"]},
            {"model": "mlp", "method": "normal", "denormal_speedup": 1.0}]
    note = timing.denormal_note(rows)
    assert "**Flagged**" in note and "`mlp:denormal`" in note and "`mlp:normal`" not in note


def test_the_note_names_the_largest_speedup_when_none_is_flagged():
    rows = [{"model": "mlp", "method": "advi", "denormal_speedup": 1.04},
            {"model": "mlp", "method": "sgd", "denormal_speedup": 0.98},
            {"model": "resnet20_frn", "method": "sgd", "denormal_speedup": None}]
    note = timing.denormal_note(rows)
    assert "checked on mlp)" in note and "Flagged" not in note
    assert "largest: `mlp:advi` 1.04" in note
    assert timing.denormal_note([{**rows[2]}]) == ""  # nothing checked: no paragraph


def test_a_row_that_fails_in_the_check_has_no_speedup_and_says_why():
    class Broken:
        def step(self, state, batch):
            raise FloatingPointError("diverged")

    rows = {"broken": {"status": "ok"}}
    live = {"broken": [Broken(), None]}
    speedups = timing.denormal_speedups(live, {"broken": (2, 2)}, None, 2, lambda: None,
                                        rows, torch.device("cpu"))
    assert speedups == {"broken": None} and "broken" not in live
    assert rows["broken"]["status"].startswith("failed: FloatingPointError: diverged")
