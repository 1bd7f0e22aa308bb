"""The VI methods of the ``synthetic`` and ``posteriordb`` suites and their tuning grids.

Every method gets a grid of the **same size** (three points) over its most sensitive
setting, everything else fixed. The suites run every grid point on the first seed, pick
per method the point with the lowest final negative ELBO (a criterion that needs no
reference) and repeat it on the other seeds (:func:`bdlkit.bench.vi_runs.tune_then_repeat`).
The methods start from the same q₀, set by the suite.

=============  ==================================================  ======================
row            fixed                                               grid
=============  ==================================================  ======================
score_vi       gradient solver, Adam, 4 draws/step, K = 1: the same    lr 0.01, 0.03, 0.1
               iterates as ADVI (a control; docs/score_vi.md)      annealed ×0.01
score_vi_cf    the proximal closed form: one antithetic pair per   ω 0.1, 0.3, 1
               step, curvature average β = 0.99, α_max = 0.5,
               warm-up 10 % of the steps
advi           reparameterised ELBO, Adam, 4 draws/step            lr as score_vi
fisher_vi      reparameterised Fisher divergence, Adam, 4 draws    lr as score_vi
gsm_full       full Σ, exact scores                                batch 2, 8, 32
gsm_diag       per-coordinate GSM                                  batch 2, 8, 32
bam_full       full Σ, batch 16, λ_t = c·B·d/(t+1)                 c 0.1, 1, 10
bam_lowrank    as bam_full, rank-(B+1) U (no d × d eigh; the       c 0.1, 1, 10
               d³/3 Cholesky remains; same iterates as bam_full)
bam_diag       per-coordinate BaM, batch 16                        c 0.1, 1, 10
score_vi_flow  score_vi with a neural spline flow (3 couplings, 8   lr 0.001, 0.003, 0.01
               bins), 16 draws/step, K = 1                          annealed ×0.01
advi_flow      advi with the same flow, full ELBO estimator         lr 0.003, 0.01, 0.03
advi_flow_stl  advi_flow with sticking-the-landing gradients       lr as advi_flow
=============  ==================================================  ======================

The flow rows run where the suite asks for them (``posteriordb``; the multimodal part of
``synthetic``), not in the Gaussian part of ``synthetic``. Their grids sit lower than the
Gaussian rows' because a flow's loss is scaled by 1/d, not 1/N (``flow_vi``), and
score_vi with a flow is unstable at a constant 0.01 (``flow_vi``'s measurements).

The learning-rate grids are annealed geometrically by 100× over the run (``Annealed``):
with a constant step Adam's iterates keep a noise floor that would decide the comparison.
"""

from __future__ import annotations

from typing import Any

from bdlkit.bench.vi_runs import Annealed, MethodSpec, scores_per_step

LR_GRID = tuple({"lr": Annealed(lr)} for lr in (0.01, 0.03, 0.1))
SAMPLES_GRID = tuple({"num_samples": b} for b in (2, 8, 32))
LAM_GRID = tuple({"lam_scale": c} for c in (0.1, 1.0, 10.0))
FLOW = {"family": "flow", "num_samples": 16}
SCORE_FLOW_GRID = tuple({"lr": Annealed(lr)} for lr in (1e-3, 3e-3, 1e-2))
ELBO_FLOW_GRID = tuple({"lr": Annealed(lr)} for lr in (3e-3, 1e-2, 3e-2))

SPECS: dict[str, MethodSpec] = {
    "score_vi": MethodSpec("score_vi", "score_vi", {"solver": "gradient", "num_samples": 4},
                           LR_GRID),
    "score_vi_cf": MethodSpec("score_vi_cf", "score_vi", {"solver": "closed_form"},
                              tuple({"omega": w} for w in (0.1, 0.3, 1.0))),
    "advi": MethodSpec("advi", "advi", {"num_samples": 4}, LR_GRID),
    "fisher_vi": MethodSpec("fisher_vi", "fisher_vi", {"num_samples": 4}, LR_GRID),
    "gsm_full": MethodSpec("gsm_full", "gsm", {"covariance": "full"}, SAMPLES_GRID),
    "gsm_diag": MethodSpec("gsm_diag", "gsm", {"covariance": "diag"}, SAMPLES_GRID),
    "bam_full": MethodSpec("bam_full", "bam", {"covariance": "full", "num_samples": 16},
                           LAM_GRID),
    "bam_lowrank": MethodSpec("bam_lowrank", "bam", {"covariance": "lowrank", "num_samples": 16},
                              LAM_GRID),
    "bam_diag": MethodSpec("bam_diag", "bam", {"covariance": "diag", "num_samples": 16},
                           LAM_GRID),
    "score_vi_flow": MethodSpec("score_vi_flow", "score_vi", FLOW, SCORE_FLOW_GRID),
    "advi_flow": MethodSpec("advi_flow", "advi", FLOW, ELBO_FLOW_GRID),
    "advi_flow_stl": MethodSpec("advi_flow_stl", "advi", {**FLOW, "stl": True}, ELBO_FLOW_GRID),
}
FLOW_ROWS = ("score_vi_flow", "advi_flow", "advi_flow_stl")
FULL_COVARIANCE = ("gsm_full", "bam_full", "bam_lowrank")


def configs(label: str, init_std: float, budget: int) -> list[dict[str, Any]]:
    """The grid of row ``label`` with the common initial scale σ₀ (and, for the closed-form
    score_vi, a warm-up of 10 % of the steps that ``budget`` score evaluations buy)."""
    out = []
    for hyper in SPECS[label].configs():
        hyper = {**hyper, "init_std": init_std}
        if label == "score_vi_cf":
            hyper["warmup"] = max(1, budget // scores_per_step("score_vi", hyper) // 10)
        out.append(hyper)
    return out


__all__ = ["FLOW_ROWS", "FULL_COVARIANCE", "LAM_GRID", "LR_GRID", "SAMPLES_GRID", "SPECS",
           "configs"]
