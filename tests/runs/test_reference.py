"""``bdlkit reference``: chains, cached reuse, convergence summary, and evaluate --reference."""

import json
import shutil

import pytest
import torch

from bdlkit.cli import main
from bdlkit.runs import reference
from bdlkit.runs.config import RunConfig

TINY = {"model": "mlp", "data": "digits", "model_kwargs": {"hidden": [4]}, "steps": 12,
        "burnin": 4, "hyper": {"num_leapfrog": 3, "step_size": 0.002, "adapt_steps": 0}}


def tiny_reference(out, chains=2, overwrite=False, **changes):
    cfg = RunConfig(method="hmc", **{**TINY, **changes})
    return reference.build(cfg, out, chains=chains, workers=1, overwrite=overwrite)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny 2-chain reference shared by the tests that only read or copy it."""
    out = tmp_path_factory.mktemp("reference") / "ref"
    return out, tiny_reference(out)


def copy_of(built, tmp_path):
    out = tmp_path / "ref"
    shutil.copytree(built[0], out)
    return out


def test_build_writes_probs_manifest_and_report(built, tmp_path):
    ref = built[1]
    tmp_path = built[0].parent
    m = ref.manifest
    assert ref.probs.shape == (540, 10) and ref.chain_probs.shape == (2, 540, 10)
    torch.testing.assert_close(ref.probs.sum(-1), torch.ones(540, dtype=ref.probs.dtype))
    torch.testing.assert_close(ref.probs, ref.chain_probs.mean(0))
    assert m["chains"] == 2 and m["draws_per_chain"] == 8 and m["num_test"] == 540
    for name in ("rhat_split", "rhat_rank", "ess_bulk"):
        assert {"median", "max"} <= set(m["convergence"][name])
    assert m["convergence"]["rhat_split"]["median"] >= 0.9
    assert (tmp_path / "ref" / "report.md").read_text().startswith("# Reference")
    assert len(list((tmp_path / "ref" / "chains").iterdir())) == 2
    loaded = reference.load(tmp_path / "ref")
    assert torch.equal(loaded.probs, ref.probs) and loaded.manifest == json.loads(
        (tmp_path / "ref" / "reference.json").read_text())


def test_chains_start_from_different_networks(built):
    ref = built[1]
    assert not torch.allclose(ref.chain_probs[0], ref.chain_probs[1])


def test_same_options_reuse_the_cache_other_options_refuse(built, tmp_path):
    out = copy_of(built, tmp_path)
    ckpts = sorted((out / "chains" / "chain-0" / "checkpoints").iterdir())
    stamp = [p.stat().st_mtime_ns for p in ckpts]
    again = tiny_reference(out)  # cached: nothing rerun
    assert [p.stat().st_mtime_ns for p in ckpts] == stamp
    assert again.manifest["draws_per_chain"] == 8
    with pytest.raises(FileExistsError, match="other options"):
        tiny_reference(out, steps=14)


def test_an_interrupted_reference_reuses_finished_chains(built, tmp_path):
    out = copy_of(built, tmp_path)
    (out / "reference.json").unlink()
    stamp = (out / "chains" / "chain-1" / "metrics.json").stat().st_mtime_ns
    ref = tiny_reference(out)
    assert (out / "chains" / "chain-1" / "metrics.json").stat().st_mtime_ns == stamp
    assert ref.probs.shape == (540, 10)


def test_refuses_non_mcmc_methods_and_one_chain(tmp_path):
    with pytest.raises(ValueError, match="MCMC"):
        reference.build(RunConfig(method="map", **{**TINY, "hyper": {}}), tmp_path / "r")
    with pytest.raises(ValueError, match="chains must be >= 2"):
        tiny_reference(tmp_path / "r", chains=1)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_cli_reference_then_evaluate_reports_agreement(tmp_path, capsys):
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    assert main(["reference", "hmc", "--model", "mlp", "--data", "digits", "--model-kwargs",
                 '{"hidden": [4]}', "--steps", "12", "--burnin", "4", "--num-leapfrog", "3",
                 "--step-size", "0.002", "--adapt-steps", "0", "--chains", "2",
                 "--workers", "1", "--out", str(ref_dir)]) == 0
    assert "split R-hat of the test predictive" in capsys.readouterr().out
    assert main(["fit", "--method", "csghmc", "--model", "mlp", "--data", "digits",
                 "--model-kwargs", '{"hidden": [4]}', "--steps", "40", "--out", str(run_dir),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--reference", str(ref_dir)]) == 0
    out = capsys.readouterr().out
    assert "agreement" in out and "total_variation" in out
    values = json.loads((run_dir / "metrics.json").read_text())
    assert 0 <= values["agreement"] <= 1 and 0 <= values["total_variation"] <= 1


def test_evaluate_refuses_a_reference_for_other_data(built, tmp_path, capsys):
    ref_dir, run_dir = built[0], tmp_path / "run"
    assert main(["fit", "--method", "map", "--model", "mlp", "--data", "digits", "--steps", "5",
                 "--data-kwargs", '{"seed": 1}',  # same test size, another split
                 "--model-kwargs", '{"hidden": [4]}', "--out", str(run_dir),
                 "--no-progress"]) == 0
    assert main(["evaluate", str(run_dir), "--reference", str(ref_dir)]) == 2
    assert "same test points" in capsys.readouterr().err


def test_cli_defaults_follow_the_izmailov_recipe():
    values = reference.with_defaults({"method": "hmc", "prior_scale": 0.5})
    assert values["steps"] == 400
    assert values["hyper"] == {"trajectory_length": 0.7854, "adapt_steps": 150,
                               "step_size": 0.005}
    given = reference.with_defaults({"method": "hmc", "steps": 50, "hyper": {"num_leapfrog": 7}})
    assert given["steps"] == 50 and given["hyper"] == {"num_leapfrog": 7, "adapt_steps": 25}
    short = reference.with_defaults({"method": "hmc", "epochs": 60, "burnin": 0})
    assert short["hyper"]["adapt_steps"] == 0  # burnin=0 means no adaptation, not a default
    assert reference.with_defaults({"method": "nuts", "burnin": 30})["hyper"] == {"warmup": 30}
    assert reference.with_defaults({"method": "nuts", "burnin": 0})["hyper"] == {"warmup": 0}


def test_convergence_flags_chains_that_disagree():
    g = torch.Generator().manual_seed(0)
    same = torch.rand(4, 50, 6, 3, generator=g, dtype=torch.float64)
    conv = reference.convergence(same)
    assert conv["rhat_split"]["max"] < 1.1 and conv["rhat_split"]["frac_above_1.05"] < 0.5
    apart = same + torch.arange(4, dtype=torch.float64).view(4, 1, 1, 1)  # shifted chains
    conv = reference.convergence(apart)
    assert conv["rhat_split"]["median"] > 2 and conv["rhat_split"]["frac_above_1.05"] == 1.0
    assert conv["rhat_rank"]["median"] > 2


def test_a_chain_started_with_other_options_is_not_reused(built, tmp_path):
    out = copy_of(built, tmp_path)
    (out / "reference.json").unlink()  # interrupted after the chains ran
    with pytest.raises(FileExistsError, match="prior_scale"):
        tiny_reference(out, prior_scale=0.5)
    ref = tiny_reference(out, prior_scale=0.5, overwrite=True)
    assert ref.manifest["config"]["prior_scale"] == 0.5


@pytest.mark.slow
def test_parallel_worker_processes_give_the_same_reference(built, tmp_path):
    cfg = RunConfig(method="hmc", **TINY)
    ref = reference.build(cfg, tmp_path / "ref", chains=2, workers=2)
    torch.testing.assert_close(ref.chain_probs, built[1].chain_probs, rtol=0, atol=1e-6)


def test_refuses_regression_data_and_foreign_folders(tmp_path):
    with pytest.raises(ValueError, match="classification"):
        tiny_reference(tmp_path / "r", data="uci/yacht")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a bdlkit reference"):
        tiny_reference(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("saved", [None, "auto", "categorical"])
@pytest.mark.parametrize("wanted", ["auto", "categorical"])
def test_a_chain_saved_before_or_with_the_likelihood_option_is_reused(tmp_path, saved, wanted):
    """A chain whose config.yaml has no ``likelihood`` (written before the option existed),
    ``auto`` or its resolution ``categorical`` is the same chain; another likelihood is not."""
    from bdlkit.runs.yaml_files import save_yaml

    cfg = RunConfig(method="hmc", data="digits", likelihood=wanted)
    values = cfg.to_dict()
    if saved is None:
        values.pop("likelihood")
    else:
        values["likelihood"] = saved
    save_yaml(tmp_path / "config.yaml", values)
    reference._check_chain(cfg, tmp_path)  # no error
    save_yaml(tmp_path / "config.yaml", {**values, "likelihood": "bernoulli"})
    with pytest.raises(FileExistsError, match="likelihood='bernoulli'"):
        reference._check_chain(cfg, tmp_path)
