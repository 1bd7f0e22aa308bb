"""Markdown tables and PNG plots (matplotlib optional)."""

from __future__ import annotations

import builtins
import sys

import pytest
import torch

from bdlkit.runs.figures import (
    ess_bars,
    history_plot,
    markdown_table,
    reliability_diagram,
    rhat_layer_plot,
    trace_plot,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_markdown_table_small():
    rows = [{"method": "sgld", "acc": 0.91234, "n": 3}, {"method": "map", "acc": 0.5}]
    assert markdown_table(rows) == (
        "| method | acc | n |\n| --- | --- | --- |\n| sgld | 0.9123 | 3 |\n| map | 0.5000 |  |\n"
    )
    out = markdown_table(rows, columns=["acc"], floatfmt=".2f")
    assert out == "| acc |\n| --- |\n| 0.91 |\n| 0.50 |\n"
    assert markdown_table([{"a|b": "x|y"}]).splitlines()[2] == "| x\\|y |"


def _probs(seed: int = 0, n: int = 300, k: int = 4):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(n, k, generator=g), -1)
    labels = torch.randint(0, k, (n,), generator=g)
    return probs, labels


def test_reliability_diagram_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    probs, labels = _probs()
    path = reliability_diagram(probs, labels, tmp_path / "sub" / "rel.png", title="test")
    assert path == tmp_path / "sub" / "rel.png"
    assert path.read_bytes().startswith(PNG)
    assert [p.name for p in path.parent.iterdir()] == ["rel.png"]  # no temp files left


def test_history_plot_writes_png_and_skips_missing_keys(tmp_path):
    pytest.importorskip("matplotlib")
    history = [{"step": s, "log_prob": -100.0 / (s + 1)} for s in range(20)]
    history[::5] = [dict(h, **{"eval/accuracy": 0.5 + h["step"] / 100}) for h in history[::5]]
    path = history_plot(history, tmp_path / "hist.png", ["log_prob", "eval/accuracy", "absent"])
    assert path is not None and path.read_bytes().startswith(PNG)
    assert history_plot(history, tmp_path / "none.png", ["absent"]) is None
    assert not (tmp_path / "none.png").exists()


def test_plots_do_not_touch_pyplot(tmp_path):
    pytest.importorskip("matplotlib")
    had_pyplot = "matplotlib.pyplot" in sys.modules
    reliability_diagram(*_probs(1), tmp_path / "a.png")
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot


def test_without_matplotlib_returns_none(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    probs, labels = _probs()
    assert reliability_diagram(probs, labels, tmp_path / "r.png") is None
    assert history_plot([{"step": 0, "loss": 1.0}], tmp_path / "h.png", ["loss"]) is None
    assert rhat_layer_plot(_RHAT, tmp_path / "rh.png") is None
    assert trace_plot(torch.randn(2, 10, 3), tmp_path / "t.png") is None
    assert ess_bars({"sgld": 10.0}, tmp_path / "e.png") is None
    assert list(tmp_path.iterdir()) == []


_RHAT = {
    "fc1.weight": {"mean": 1.02, "std": 0.01, "max": 1.05},
    "fc1.bias": {"mean": torch.tensor(1.2), "std": torch.tensor(0.1)},
    "fc2.weight": {"mean": 1.01},
    "all": {"mean": 1.05, "std": 0.08},
}


def test_rhat_layer_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = rhat_layer_plot(_RHAT, tmp_path / "rhat.png", threshold=1.05)
    assert path == tmp_path / "rhat.png" and path.read_bytes().startswith(PNG)
    assert rhat_layer_plot({"all": {"mean": 1.0}}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_trace_plot_shapes_and_names(tmp_path):
    pytest.importorskip("matplotlib")
    g = torch.Generator().manual_seed(0)
    draws = torch.randn(3, 50, 8, generator=g).cumsum(1)
    path = trace_plot(draws, tmp_path / "trace.png", max_series=4)
    assert path is not None and path.read_bytes().startswith(PNG)
    one_chain = trace_plot(draws[0].numpy(), tmp_path / "one.png", names=list("abcdefgh"))
    assert one_chain is not None and one_chain.read_bytes().startswith(PNG)
    with pytest.raises(ValueError, match="names"):
        trace_plot(draws, tmp_path / "bad.png", names=["a"])
    with pytest.raises(ValueError, match="chains"):
        trace_plot(torch.zeros(10), tmp_path / "bad.png")
    assert trace_plot(torch.zeros(2, 0, 3), tmp_path / "empty.png") is None


def test_ess_bars_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = ess_bars({"sgld": 12.5, "sghmc": 40.0, "l2e": 93.1}, tmp_path / "ess.png", title="ESS")
    assert path is not None and path.read_bytes().startswith(PNG)
    assert ess_bars({}, tmp_path / "none.png") is None


def test_diagnostic_plots_do_not_touch_pyplot(tmp_path):
    pytest.importorskip("matplotlib")
    had_pyplot = "matplotlib.pyplot" in sys.modules
    rhat_layer_plot(_RHAT, tmp_path / "r.png")
    trace_plot(torch.randn(2, 20, 2), tmp_path / "t.png")
    ess_bars({"a": 1.0}, tmp_path / "e.png")
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot
