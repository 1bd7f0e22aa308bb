"""``bdlkit.load`` opens both layouts bdlkit writes and says which it found."""

import json

import pytest
import torch

import bdlkit
from bdlkit.cli import main
from bdlkit.runs import loading

QUICK = ["--steps", "40", "--log-every", "20", "--no-progress", "--seed", "3"]


@pytest.fixture(scope="module")
def sghmc_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("load") / "R"
    assert main(["fit", "--method", "sghmc", "--data", "digits", "--out", str(out),
                 "--burnin", "20", "--thin", "5", *QUICK]) == 0
    return out


def test_a_fit_run_directory_loads_and_predicts(sghmc_run):
    result = bdlkit.load(sghmc_run)
    assert result.source == loading.RUN_DIRECTORY
    assert result.method == "sghmc" and result.kind == "sampler" and result.num_kept == 4
    x = bdlkit.data.load("digits").x_test
    probs = result.predict(x)
    assert probs.shape == (len(x), 10)
    assert torch.allclose(probs.sum(-1), torch.ones(len(x)), atol=1e-5)
    # the same predictive `bdlkit fit` evaluated: its accuracy is in metrics.json
    accuracy = (probs.argmax(-1) == bdlkit.data.load("digits").y_test).float().mean()
    saved = json.loads((sghmc_run / "metrics.json").read_text())["accuracy"]
    assert float(accuracy) == pytest.approx(saved, abs=1e-6)


def test_a_saved_result_loads_as_a_result_folder(tmp_path):
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)
    bdlkit.infer(target, "sgld", steps=30).save(tmp_path)
    back = bdlkit.load(tmp_path, problem=target)
    assert back.source == loading.RESULT_FOLDER and back.num_kept > 0


def test_a_run_directory_refuses_a_problem_and_unknown_folders_are_named(sghmc_run, tmp_path):
    with pytest.raises(ValueError, match="rebuilds its data"):
        bdlkit.load(sghmc_run, problem=bdlkit.Target(lambda t: -t.sum(-1), dim=1))
    (tmp_path / "notes.txt").write_text("not a run")
    with pytest.raises(FileNotFoundError, match="neither result.json"):
        bdlkit.load(tmp_path)
