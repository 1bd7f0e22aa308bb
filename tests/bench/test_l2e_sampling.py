"""``bdlkit bench l2e-sampling``: the noise-transmission measure against known answers and
a tiny end-to-end run."""

import json
import math

import pytest
import torch

from bdlkit import bench
from bdlkit.algorithms.sgmcmc import l2e as l2e_algorithm
from bdlkit.bench import l2e as l2e_bench
from bdlkit.bench import l2e_sampling as S
from bdlkit.l2e.kinetic import Constants, init_meta_params
from bdlkit.l2e.pretrained import Pretrained, save_meta_params


def _state(alg, seed=0):
    start = torch.tensor([[0.3, -0.8]], dtype=torch.float64)
    state = alg.init(start, generator=torch.Generator().manual_seed(seed))
    for _ in range(20):
        state, _ = alg.step(state, None)
    return state


def _constant(out1, **constants):
    meta = {k: torch.zeros_like(v) for k, v in init_meta_params(torch.Generator()).items()}
    meta["b2"] = torch.tensor([0.0, out1])
    return Pretrained(meta, Constants(**constants), {}, "")


def test_sghmc_passes_its_momentum_on_whole():
    alg = l2e_algorithm.build(S.gaussian_target(), kinetic="identity", grad_scale=1.0,
                              noise_mode="paper", friction=1.0)
    state = _state(alg)
    got = S.noise_sensitivity(alg, state, None)
    assert got["dbeta_dr"] == pytest.approx(1.0, rel=1e-12)
    # noise share: ε·σ·‖Jξ‖ / ‖ε·r'‖, with J = I
    assert 0 < got["noise_share"] < 10


def test_momentum_form_passes_its_scale_on():
    pre = _constant(1.0, kinetic_form="momentum", grad_scale="num_data", noise_mode="paper",
                    precond_mult=1.0)
    alg = l2e_algorithm.build(S.gaussian_target(), meta_params=pre)
    got = S.noise_sensitivity(alg, _state(alg), None)
    assert got["dbeta_dr"] == pytest.approx(math.log1p(math.e) / math.log(2), rel=1e-6)


def test_a_beta_that_ignores_r_transmits_nothing():
    """The free form with a constant MLP output: β does not depend on r, dβ/dr = 0."""
    alg = l2e_algorithm.build(S.gaussian_target(), meta_params=_constant(0.5, grad_scale=1.0))
    got = S.noise_sensitivity(alg, _state(alg), None)
    assert got == {"dbeta_dr": 0.0, "noise_share": 0.0}


def test_candidates_pair_each_file_with_its_sghmc_control(tmp_path):
    c = Constants(kinetic_form="momentum", grad_scale="num_data", noise_mode="paper",
                  friction=10.0)
    path = save_meta_params(tmp_path / "v1" / "meta_params.safetensors",
                            init_meta_params(torch.Generator().manual_seed(0)), c)
    names = [(x.name, x.options) for x in S.candidates((str(path),))]
    assert [n for n, _ in names] == ["shipped", "shipped-as-sghmc", "v1", "v1-as-sghmc"]
    assert names[3][1] == {"kinetic": "identity", "eps": c.eps, "grad_scale": "num_data",
                           "friction": 10.0, "noise_mode": "paper", "noise_mult": c.noise_mult}
    with pytest.raises(ValueError, match="l2e-sampling suite alone"):
        bench.run_suite("l2e", tmp_path / "x", meta_params=(str(path),))
    with pytest.raises(ValueError, match="no such file"):
        bench.run_suite("l2e-sampling", tmp_path / "x", meta_params=("nope.safetensors",))


@pytest.mark.slow
def test_tiny_suite_end_to_end(tmp_path, monkeypatch):
    tiny = l2e_bench.Task("digits-hmc", "digits", "mlp", {"hidden": [4]}, 24,
                          reference_chains=2, reference_steps=8, probe_points=16)
    monkeypatch.setattr(l2e_bench, "tasks", lambda quick: [tiny])
    monkeypatch.setattr(l2e_bench, "CHAINS", 2)
    monkeypatch.setattr(S, "GAUSS_STEPS", 400)
    monkeypatch.setattr(S, "GAUSS_DRAWS", 100)
    monkeypatch.setattr(S, "BLR_STEPS", 300)
    monkeypatch.setattr(S, "SENSITIVITY_BURNIN", {"gauss": 50, "digits": 10})
    monkeypatch.setattr(S, "warm_up", lambda: None)
    monkeypatch.setattr(S, "candidates", lambda meta_params: [
        S.Candidate("shipped"), S.Candidate("broken", {"friction": -1.0})])
    # the HMC reference is bench l2e's (tested there): a uniform stand-in here
    def fake_reference(task, base, ds, runs, seed):
        probs = torch.full((len(ds.y_test), 10), 0.1)
        return {"div_tv": 0.25, "div_disagreement": 0.5, "agreement": 1.0}, probs, "fake"

    monkeypatch.setattr(l2e_bench, "reference_row", fake_reference)
    rows = S.run(tmp_path, quick=True, echo=False)
    assert [r["candidate"] for r in rows] == ["hmc (digits reference)", "shipped", "broken"]
    assert rows[2]["status"].startswith("failed: gauss (ValueError: L2E friction")
    assert "error" in rows[2]["blr100"] and "error" in rows[2]["digits"]
    row = rows[1]
    assert row["status"] == "ok", row["status"]
    assert len(row["gauss"]["std_ratio"]) == 2 and len(row["blr1000"]["std_ratio"]) == 2
    assert row["sensitivity_gauss"]["dbeta_dr"] >= 0
    assert 0 <= row["digits_agreement"] <= 1 and 0 <= row["digits_div_tv"] <= 1
    assert rows[0]["digits_div_tv"] == 0.25
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["suite"] == "l2e-sampling"
    assert "gauss std ratio" in (tmp_path / "results.md").read_text()
    assert "| failed |" in (tmp_path / "results.md").read_text()
