"""The KL discount ``kld``, a problem option: the likelihood weighted by 1/kld and the prior
not, every method reading it from the problem, the per-datum scale N/kld, bad values refused
by name (Python, config and command line) with nothing written."""

import math

import pytest
import torch

import bdlkit
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.runs.config import RunConfig

F64 = torch.float64


def model(kld: float = 1.0, temperature: float = 1.0) -> bdlkit.BayesianModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                  torch.nn.Linear(4, 2)).to(F64)
    return bdlkit.BayesianModel(net, "categorical", prior=0.5, num_data=40, kld=kld,
                                temperature=temperature)


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 3, generator=g, dtype=F64), torch.randint(0, 2, (8,), generator=g)


@pytest.mark.parametrize("oracle_path", ["tree", "flat"])
def test_the_score_weights_the_likelihood_by_one_over_kld_and_not_the_prior(oracle_path):
    """ŝ_kld = ∇log p/T + (ŝ − ∇log p/T)/kld at T = 2, through the dict oracle and the flat
    module oracle alike."""
    x, y = batch()
    plain, discounted = model(temperature=2.0), model(kld=1e-3, temperature=2.0)
    params = plain.init_params()
    if oracle_path == "flat":
        from bdlkit.core.flat import FlatLayout, FlatProblem

        layout = FlatLayout.of(params)
        flat = layout.flatten(params)
        _, s1 = FlatProblem(plain, layout).value_and_score(flat, (x, y))
        _, s2 = FlatProblem(discounted, layout).value_and_score(flat, (x, y))
        prior = layout.flatten(torch.func.grad(plain.log_prior)(params)) / 2.0
    else:
        _, s1 = plain.value_and_score(params, (x, y))
        _, s2 = discounted.value_and_score(params, (x, y))
        s1, s2 = (torch.cat([v.reshape(-1) for v in s.values()]) for s in (s1, s2))
        prior = torch.cat([v.reshape(-1) for v in
                           torch.func.grad(plain.log_prior)(params).values()]) / 2.0
    torch.testing.assert_close(s2, prior + (s1 - prior) / 1e-3, rtol=1e-10, atol=1e-8)
    assert discounted.effective_num_data == pytest.approx(40 / 1e-3)
    assert "kld=0.001" in repr(discounted) and "kld" not in repr(plain)


def test_map_minimises_bayesdlls_per_datum_loss():
    """MAP's gradient is −ŝ/N_eff = ∇[mean NLL + kld·(−log p)/N]: BayesDLL's VI loss at the
    mean, so a step size means per datum what it means without the discount."""
    x, y = batch()
    m = model(kld=1e-2)
    params = m.init_params()
    _, score = m.value_and_score(params, (x, y))
    lik = torch.func.grad(lambda p: -m.log_likelihood(p, (x, y)).mean())(params)
    prior = torch.func.grad(lambda p: -m.log_prior(p))(params)
    for k in params:
        torch.testing.assert_close(-score[k] / m.effective_num_data,
                                   lik[k] + 1e-2 * prior[k] / 40, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", ["advi", "ivon", "map", "sghmc", "ensemble", "score_vi"])
def test_every_method_reads_the_discount_from_the_problem(method):
    """A run under kld 1e-3 differs from one without; no method takes a kld of its own."""
    x, y = batch()
    hyper = {"members": 2} if method == "ensemble" else {}
    runs = [bdlkit.infer(model(kld=k), method, data=(x, y), steps=5, seed=0, batch_size=8,
                         **hyper) for k in (1.0, 1e-3)]
    a, b = (torch.cat([v.reshape(-1) for v in r.params.values()]) if isinstance(r.params, dict)
            else r.params.reshape(-1) for r in runs)
    assert not torch.allclose(a, b)
    with pytest.raises(InputError, match="kld is the problem's: BayesianModel"):
        bdlkit.infer(model(), method, data=(x, y), steps=1, kld=1e-3, **hyper)


@pytest.mark.parametrize("value", [0, 0.0, -1e-3, 2.0, math.nan, math.inf, True, "0.1"])
def test_a_bad_kld_is_refused_by_the_problem(value):
    with pytest.raises(ValueError, match=r"kld must be a number in \(0, 1\]"):
        model(kld=value)


@pytest.mark.parametrize("text", ["0", "2", "nan", "inf", "-1e-3", "1e-3x"])
def test_a_bad_kld_on_the_command_line_is_one_line_and_writes_nothing(text, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["fit", "--method", "map", "--data", "digits", "--steps", "2", f"--kld={text}",
              "--out", str(out), "--no-progress"])
    assert info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--kld" in err[0] and "(0, 1]" in err[0], err
    assert not out.exists()


def test_a_bad_kld_in_a_config_file_names_the_key():
    with pytest.raises(InputError, match=r"exp.yaml: key 'kld' must be a number in \(0, 1\]"):
        RunConfig.from_dict({"method": "map", "kld": 5}, source="exp.yaml")


def test_the_run_records_kld_and_a_resume_keeps_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "--method", "map", "--data", "digits", "--steps", "4", "--kld", "1e-2",
                 "--out", str(out), "--no-progress"]) == 0
    from bdlkit.runs.yaml_files import load_yaml

    assert load_yaml(out / "config.yaml")["kld"] == 1e-2
    loaded = bdlkit.load(out)
    assert loaded.problem.kld == 1e-2
