"""The pieces suites share: a cell is computed once per key and kept in ``cells/``."""

from bdlkit.bench import common
from bdlkit.bench.common import cached_cell


def test_a_cell_is_reused_for_its_key_and_recomputed_for_another(tmp_path):
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return {"nll": value, "bad": float("nan")}
        return run

    first = cached_cell(tmp_path, "a-mlp-500", {"seed": 0, "grid": (1, 2)}, compute(1.0), False)
    assert first == {"nll": 1.0, "bad": None}  # what is returned is what is stored
    assert cached_cell(tmp_path, "a-mlp-500", {"seed": 0, "grid": (1, 2)}, compute(2.0),
                       False) == first and calls == [1.0]
    assert cached_cell(tmp_path, "a-mlp-500", {"seed": 1, "grid": (1, 2)}, compute(3.0),
                       False)["nll"] == 3.0 and calls == [1.0, 3.0]
    (tmp_path / "cells" / "a-mlp-500.json").write_text("{not json")  # e.g. edited by hand
    assert cached_cell(tmp_path, "a-mlp-500", {"seed": 1}, compute(4.0), False)["nll"] == 4.0


def test_a_cell_computed_by_other_code_is_recomputed(tmp_path, monkeypatch):
    cached_cell(tmp_path, "c", {"seed": 0}, lambda: 1, False)
    monkeypatch.setattr(common, "source_digest", lambda: "edited")
    assert cached_cell(tmp_path, "c", {"seed": 0}, lambda: 2, False) == 2
