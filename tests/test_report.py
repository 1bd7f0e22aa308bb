"""Markdown tables and PNG plots (matplotlib optional)."""

from __future__ import annotations

import builtins
import sys

import pytest
import torch

from bdlkit.report import history_plot, markdown_table, reliability_diagram

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
    assert list(tmp_path.iterdir()) == []
