"""``bdlkit fit --compile`` end to end on the embedded digits data set."""

from __future__ import annotations

import json
import warnings

import pytest

from bdlkit.cli import main
from bdlkit.runs.yaml_files import load_yaml

ACCEPTANCE = ["fit", "--method", "sgld", "--model", "mlp", "--data", "digits", "--steps", "60",
              "--seed", "0", "--out", "{out}", "--no-progress"]


def test_fit_compile_gives_the_eager_metrics_and_is_recorded(tmp_path, capsys):
    """``--compile`` (the element-wise update of each network step compiled, no fallback to
    eager): the metrics of the acceptance run to float32 rounding (on a network a step's
    noise is one draw either way), and the choice is kept in config.yaml, so a resume
    compiles too."""
    out = tmp_path / "compiled"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*cannot run as compiled")
        assert main([a.format(out=out) for a in ACCEPTANCE] + ["--compile"]) == 0
    assert load_yaml(out / "config.yaml")["compile"] is True
    assert main([a.format(out=tmp_path / "eager") for a in ACCEPTANCE]) == 0
    compiled = json.loads((out / "metrics.json").read_text())
    eager = json.loads((tmp_path / "eager" / "metrics.json").read_text())
    for key in ("accuracy", "nll", "ece"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-5, abs=1e-6)
    assert main(["fit", "--resume", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):  # a flag, not a value
        main(["fit", "--method", "sgld", "--out", str(tmp_path / "x"), "--compile", "yes"])
    assert "unrecognized option yes" in capsys.readouterr().err
