"""Issue 45: finite but extreme values are refused where they are parsed, in one line that
names the option and bdlkit's range of float values (item 1; the in-process sweep of every
method at the range's ends is ``tests/algorithms/test_value_range_sweep.py``);
``--overwrite`` deletes nothing before the new run's configuration is valid (item 1's
second half); ``changes:`` in a ``--config`` file is refused for a new run (a smaller item).
"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.algorithms import get_method
from bdlkit.cli import main
from bdlkit.core.distributed import Topology
from bdlkit.core.errors import InputError
from bdlkit.core.value_range import HIGH, LOW, SPAN
from bdlkit.runs import ranks, reference, run_record, yaml_files
from bdlkit.runs.config import RunConfig
from test_cli_errors import _assert_one_error_line, _run

QUICK = ["--steps", "2", "--no-progress"]
RANGE = SPAN  # "[1e-15, 1e15]": every message names it

#: item 1's cases: each was an "internal error" traceback (exit 1)
CLI_CASES = {
    "sgld-lr-1e308": (["--method", "sgld", "--lr", "1e308"], "--lr"),
    "sghmc-lr-1e308": (["--method", "sghmc", "--lr", "1e308"], "--lr"),
    "temperature-1e308": (["--method", "sgld", "--temperature", "1e308"], "--temperature"),
    "temperature-1e-300": (["--method", "sgld", "--temperature", "1e-300"], "--temperature"),
    "likelihood-gaussian-1e308": (["--method", "sgld", "--data", "uci/yacht", "--likelihood",
                                   "gaussian:1e308"], "--likelihood"),
    "prior-scale-1e308": (["--method", "sgld", "--prior-scale", "1e308"], "--prior-scale"),
    "prior-scale-1e-320": (["--method", "sgld", "--prior-scale", "1e-320"], "--prior-scale"),
    "kld-1e-300": (["--method", "map", "--kld", "1e-300"], "--kld"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_extreme_value_on_the_command_line_is_one_line(case, tmp_path, capsys):
    argv, option = CLI_CASES[case]
    rc = _run(["fit", *argv, "--out", str(tmp_path / "out"), *QUICK])
    line = _assert_one_error_line(rc, capsys.readouterr().err, [option])
    assert RANGE in line or "at least 1e-15" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["hyper: {lr: 1e308}", "hyper: {lr: 1.0e+308}",
                                  "hyper: {lr: 100000000000000000000}",
                                  "prior_scale: 1.0e-320", "temperature: 1e308"])
def test_extreme_value_in_a_config_file_names_the_file_and_key(text, tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(f"method: sgld\nsteps: 2\n{text}\n")
    rc = _run(["fit", "--config", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    key = "hyper.lr" if "lr" in text else text.split(":")[0]
    _assert_one_error_line(rc, capsys.readouterr().err, ["exp.yaml", f"'{key}'", RANGE])


def test_extreme_value_in_a_runs_config_yaml_is_refused_on_resume(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".bdlkit-run").write_text("")
    (run / "config.yaml").write_text("method: sgld\nsteps: 2\nhyper: {lr: 1.0e+308}\n")
    rc = _run(["fit", "--resume", str(run), "--no-progress"])
    _assert_one_error_line(rc, capsys.readouterr().err, ["config.yaml", "'hyper.lr'", RANGE])


def test_the_python_api_refuses_extreme_values():
    x, y = torch.randn(8, 2), torch.zeros(8, dtype=torch.long)
    model = bdlkit.BayesianModel(nn.Linear(2, 2), "categorical", num_data=8)
    with pytest.raises(InputError, match=r"lr must be a finite number .*\[1e-15, 1e15\]"):
        get_method("sgld").build(model, lr=1e308)
    with pytest.raises(InputError, match=r"lr must be .*got 1e-300"):
        bdlkit.infer(model, "sghmc", data=(x, y), steps=2, lr=1e-300)
    with pytest.raises(InputError, match=r"clip_radius must be inf or a number"):
        get_method("ivon").build(model, clip_radius=1e300)
    get_method("ivon").build(model, clip_radius=float("inf"))  # its default: allowed
    for value in (LOW, HIGH):  # the ends of the range are allowed
        get_method("sghmc").build(model, lr=value)
    bad = [dict(prior=1e308), dict(prior=1e-320), dict(temperature=1e308),
           dict(temperature=1e-300), dict(kld=1e-300), dict(likelihood="gaussian:1e308")]
    for kwargs in bad:
        with pytest.raises(ValueError, match=r"1e-15"):
            bdlkit.BayesianModel(nn.Linear(2, 1), **{"likelihood": "gaussian", "num_data": 8,
                                                     **kwargs})
    with pytest.raises(InputError, match=r"'prior_scale' must be a finite number > 0 in \[1e-15"):
        RunConfig.from_dict({"method": "sgld", "prior_scale": 1e16}, source="x.yaml")


def test_a_resumes_new_step_size_is_range_checked_naming_the_option():
    """``bdlkit fit --resume R --lr X`` (before: ``hyper.lr`` named as a file key)."""
    cfg = RunConfig(method="sgld", steps=2)
    for value in (1e308, 1e-300):
        with pytest.raises(InputError, match=r"^--lr must be a finite number > 0 in "
                                             r"\[1e-15, 1e15\]"):
            run_record.with_step_size(cfg, "lr", "lr", value, step=1)
    assert run_record.with_step_size(cfg, "lr", "lr", HIGH, step=1).hyper["lr"] == HIGH


# ---------------------------------------------------------------- --overwrite
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["fit", "--method", "sgld", "--out", str(out), *QUICK]) == 0
    return out


@pytest.mark.parametrize("bad", [["--lr", "1e308"], ["--temperature", "1e-300"],
                                 ["--lr", "-1"], ["--model-kwargs", '{"hidden": "abc"}']],
                         ids=["lr-1e308", "temperature-1e-300", "lr-negative", "model-kwargs"])
def test_overwrite_deletes_nothing_before_the_new_configuration_is_valid(
        bad, finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    rc = _run(["fit", "--method", "sgld", "--out", str(run), "--overwrite", *QUICK, *bad])
    _assert_one_error_line(rc, capsys.readouterr().err, [bad[0].lstrip("-")])
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_overwrite_of_a_chain_groups_run_checks_every_chain_first(finished_run, tmp_path):
    """``torchrun ... fit --chain-groups 2 --out OUT --overwrite``: rank 0 cleared OUT before
    any chain was built (a rank of a 2-process launch, run here in one process: the
    barrier is a no-op without torch.distributed)."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    before = _files(out)
    topology = Topology(world=2, rank=0, chain_groups=2)
    for hyper, model_kwargs in (({"lr": -1.0}, {}), ({}, {"hidden": "abc"})):
        cfg = RunConfig(method="sgld", steps=2, hyper=hyper, model_kwargs=model_kwargs)
        with pytest.raises((ValueError, TypeError)):
            ranks.fit(cfg, out, topology, overwrite=True)
        assert _files(out) == before


def test_overwrite_of_a_reference_builds_a_chain_first(tmp_path):
    """``bdlkit reference hmc --out REF --overwrite`` with a model option that cannot be
    built: the old reference stays (before: deleted, then the first chain failed)."""
    out = tmp_path / "ref"
    out.mkdir()
    for name, text in ((reference.MARKER, ""), ("reference.json", "{}"), ("report.md", "old")):
        (out / name).write_text(text)
    cfg = RunConfig(method="hmc", steps=2, model_kwargs={"hidden": "abc"})
    with pytest.raises(ValueError, match="hidden"):
        reference.build(cfg, out, chains=2, workers=1, overwrite=True)
    assert (out / "report.md").read_text() == "old" and (out / "reference.json").exists()


def test_a_derived_default_outside_the_range_is_left_unset_in_config_yaml(tmp_path):
    """Options in the range whose derived default is not (score_vi's closed form: init_std
    = 1/sqrt(λ(h0 + δ)) ≈ 1e-15 at σ0 = 1e-10, T = 1e-15): the run starts, and its
    config.yaml reads back (before: refused after --overwrite had deleted the old run)."""
    out = tmp_path / "run"
    rc = _run(["fit", "--method", "score_vi", "--solver", "closed_form", "--prior-scale",
               "1e-10", "--temperature", "1e-15", "--out", str(out), *QUICK])
    assert rc in (0, 1)  # it ran: to the end, or into the NaN stop
    config = yaml_files.load_yaml(out / "config.yaml")
    assert config["hyper"]["init_std"] is None
    assert RunConfig.from_dict(config, "config.yaml").hyper["init_std"] is None


# ---------------------------------------------------------------- changes: in --config
def test_changes_in_a_config_file_is_refused_for_a_new_run(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nsteps: 2\nchanges:\n- {step: 1, option: lr, from: 0.1, "
                    "to: 0.01}\n")
    rc = _run(["fit", "--config", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    _assert_one_error_line(rc, capsys.readouterr().err,
                           ["exp.yaml", "'changes'", "--resume", "remove"])
    assert not (tmp_path / "out").exists()


def test_a_runs_config_yaml_with_no_changes_starts_a_new_run(finished_run, tmp_path):
    """A run's config.yaml as a template (``changes: []``) is a valid --config file."""
    assert "changes: []" in (finished_run / "config.yaml").read_text()
    assert main(["fit", "--config", str(finished_run / "config.yaml"),
                 "--out", str(tmp_path / "new"), *QUICK]) == 0
