"""Run health: the checks a user should see before trusting a run's metrics.

Each check compares a quantity of the evaluated run with a threshold and, when it fails,
says what it means and the likely fix:

* **majority**: a classifier no better than always predicting the most frequent test
  class (accuracy ≤ that class's frequency + 1 point), or a regressor no better than the
  training mean (RMSE ≥ the mean predictor's);
* **nll**: a predictive no better than the trivial *probabilistic* predictor, measured on
  the evaluation data: the test NLL of the BMA is not below that of the training class
  frequencies (add-one smoothed) or, for regression, of a Gaussian with the training
  targets' mean and standard deviation (:func:`trivial_nll`). A fit whose mean is barely
  better than the training mean but whose intervals are the prior's fails here. The fix
  depends on the kind of run (:func:`nll_fix`): a point estimate or ensemble is
  overconfident, a sampler's draws are off the posterior, a VI q has hardly moved;
* **prior**: a diagonal-Gaussian VI fit whose q sits at its isotropic Gaussian prior
  N(m, σ0²): the mean over coordinates of KL(q_i ‖ p_i) = log(σ0/σ_i) + (σ_i² + (μ_i −
  m_i)²)/(2σ0²) − ½ is below :data:`PRIOR_KL` nats (:func:`prior_divergence`) *and*
  its test NLL is less than :data:`NEAR_TRIVIAL` nats below the trivial predictor's. For
  small moves KL_i ≈ (log σ_i/σ0)² + (μ_i − m_i)²/(2σ0²), so 0.05 nats is σ within about
  20 % of σ0 and means within about 0.3 σ0 on average. The mean, not the median, is used
  because mean-field VI legitimately prunes many weights of a good fit to the prior; the
  few it keeps add several nats each. On a large network the pruned share can still bring
  the mean below 0.05 nats (a 784-100-10 MLP on 500 MNIST digits: 0.036 at accuracy
  0.89), so the predictive must be near-trivial too;
* **rhat**, **ess**: sampler diagnostics against Vehtari et al. (2021): split R̂ below
  :data:`RHAT_MAX` (1.01, also the line of ``rhat_layers.png``) and an effective sample
  size of at least 100 per chain (here the mean ESS over weights of the single chain,
  against min(100, draws / 2)). A network run is one chain (``chains=`` is for Targets),
  and a network's weights do not mix between its many equivalent modes, so for a single
  chain these are *information* (:func:`run_notes`, ``metrics["health_notes"]``), not
  failures; they fail only for several chains;
* **draws**: fewer than 10 kept draws to average;
* **sigma**: a diagonal-Gaussian VI run whose median σ is within a factor 1.5 of its
  ``init_std``: still close to a point estimate;
* **ood_aupr**: an OOD AUPR less than half of the way from its base rate (the OOD
  fraction, what an uninformative score gets) to 1: e.g. 0.94 against a base rate of
  0.91 is a third of the way, far weaker than it reads.

:func:`run_health` returns ``{check: message}`` for the failed checks only, and
:func:`run_notes` the informational findings; every value is a deterministic function of
the metrics and the run, so both are part of ``metrics.json`` (``health``,
``health_notes``), printed by the command line and listed in ``report.md``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from bdlkit.core.draws import ApproximationDraws
from bdlkit.diagnostics import RHAT_MAX  # also the line of rhat_layers.png
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA
from bdlkit.families.diag_gaussian import DiagGaussian
from bdlkit.problems import BayesianModel
from bdlkit.problems.priors import IsotropicGaussian

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

ESS_PER_CHAIN = 100  # Vehtari et al. (2021)
MIN_DRAWS = 10
SIGMA_FACTOR = 1.5  # as bdlkit.engine.vi_checks
#: A VI q whose mean KL to its prior per coordinate is below this many nats sits at it,
#: if its predictive is also near-trivial (:data:`NEAR_TRIVIAL`).
PRIOR_KL = 0.05
#: A test NLL less than this many nats per test row below the trivial predictor's is
#: near-trivial (for a Gaussian, a σ at most 5 % below the targets' std: R² below 0.1).
NEAR_TRIVIAL = 0.05
#: Why one chain's R-hat and ESS are information, not failures (see run_notes).
ONE_CHAIN = ("a network run is one chain, whose weights move between equivalent modes "
             "rather than mix, so R-hat and ESS describe it but do not judge the draws; "
             "compare several seeds' predictions to judge them")
#: Why a fit may not have moved from where it started (part of the ``nll`` fixes).
SCALE_HINT = ("check that the inputs (and regression targets) are standardised: a feature in "
              "the hundreds, or raw 0..255 pixels, leaves a fit where it started")
#: What the ``nll`` check suggests for a predictive whose accuracy or RMSE is no better than
#: the trivial predictor's either (it learned nothing), whatever the kind of run.
USELESS_FIX = ("a smaller or larger lr, or more steps (see `bdlkit fit --method M --help`); "
               + SCALE_HINT)
#: What the ``nll`` check suggests, by the kind of run (``bdlkit.core.protocol.KINDS``), for
#: a predictive whose accuracy or RMSE beats the trivial predictor's but whose probabilities
#: do not: a point estimate or an ensemble is confidently wrong (overfit), a sampler's draws
#: are not yet from the posterior, a VI q has hardly moved from where it started.
NLL_FIX = {
    "optimizer": ("a point estimate is overconfident where it errs: a Bayesian method (a "
                  "sampler, VI or an ensemble), fewer steps (stop before it overfits), a "
                  "stronger prior, or more data"),
    "ensemble": ("the members are confidently wrong together: fewer steps per member, a "
                 "stronger prior, more members, or more data"),
    "sampler": ("the draws are not yet from the posterior, or the chain is unstable: a "
                "smaller lr, a longer burn-in (--burnin) or more steps"),
    "vi": ("more steps or a larger lr (see `bdlkit fit --method M --help`): q has hardly "
           "moved from where it started; " + SCALE_HINT),
}


def run_health(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    """The failed checks of the module docstring, ``{check: message with the fix}``."""
    found: dict[str, str] = {}
    for check in (_majority, _nll, _prior, _sampling, _draws, _sigma, _ood):
        found.update(check(values, result, test, ds))
    return found


def run_notes(values: dict[str, Any]) -> dict[str, str]:
    """The informational findings, ``{check: message}``: R-hat and ESS of a single chain
    (module docstring), which :func:`run_health` does not count as failures."""
    diag = values.get("diagnostics") or {}
    if _chains(diag) != 1:
        return {}
    return {check: f"{message} (information, not a failure: {ONE_CHAIN})"
            for check, message in _sampling_findings(diag).items()}


def trivial_baseline(ds: Any) -> tuple[str, float] | None:
    """The trivial predictor's score on ``ds``'s test split, in the units ``metrics.json``
    reports: ``("accuracy", frequency of the most frequent test class)`` for classes,
    ``("rmse", RMSE of the training mean)`` for regression targets (times
    ``meta["y_std"]``, the targets' original units); None without test rows."""
    y = ds.y_test
    if not len(y):
        return None
    if not y.dtype.is_floating_point:
        return "accuracy", float(torch.bincount(y.cpu()).max()) / len(y)
    if not len(ds.y_train):
        return None
    return "rmse", target_scale(ds) * float(((ds.y_train.mean(0) - y) ** 2).mean().sqrt())


def target_scale(ds: Any) -> float:
    """The std the regression targets were divided by (``meta["y_std"]``), else 1."""
    return float((getattr(ds, "meta", None) or {}).get("y_std", 1.0))


def _majority(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    baseline = trivial_baseline(ds)
    if baseline is None or not isinstance(test, (ClassificationBMA, RegressionBMA)):
        return {}
    metric, trivial = baseline
    if isinstance(test, ClassificationBMA):
        accuracy = values.get("accuracy", 0.0)
        if accuracy <= trivial + 0.01:
            return {"majority": (
                f"accuracy {accuracy:.3f} is no better than always predicting the most "
                f"frequent class ({trivial:.3f}): the run learned nothing usable. Fix: a "
                "smaller or larger lr (see `bdlkit fit --method M --help`), more steps, or "
                "check the labels")}
    elif (model := target_scale(ds) * float(((test.mean - ds.y_test) ** 2).mean().sqrt())) >= trivial:
        return {"majority": (
            f"RMSE {model:.4g} is no better than predicting the "
            f"training mean ({trivial:.4g}). Fix: another lr, more steps, or check the inputs")}
    return {}


def trivial_nll(ds: Any, num_classes: int | None = None) -> float | None:
    """The test NLL (nats per test row, standardised units) of the trivial probabilistic
    predictor: the training class frequencies, add-one smoothed over ``num_classes``
    classes, or for regression targets a Gaussian per target element with the training
    targets' mean and standard deviation. ``None`` without training or test rows, or for
    constant training targets (no spread to predict with)."""
    y, y_train = ds.y_test, ds.y_train
    if not len(y) or not len(y_train):
        return None
    if not y.dtype.is_floating_point:
        k = max(num_classes or 0, int(y.max()) + 1, int(y_train.max()) + 1)
        counts = torch.bincount(y_train.cpu(), minlength=k).double() + 1.0
        return float(-(counts / counts.sum()).log()[y.cpu()].mean())
    train = y_train.double().reshape(len(y_train), -1)
    mean, std = train.mean(0), train.std(0, unbiased=False)
    if not bool((std > 0).all()):
        return None
    z = (y.double().reshape(len(y), -1).cpu() - mean.cpu()) / std.cpu()
    per_row = 0.5 * (math.log(2 * math.pi) + z ** 2) + std.cpu().log()
    return float(per_row.sum(-1).mean())


def model_nll(test: ClassificationBMA | RegressionBMA, y: Tensor) -> float:
    """The BMA's test NLL in the units of :func:`trivial_nll`: −log p̄(y) of the class
    probabilities, or the mixture's log density at ``y`` (the moment-matched Gaussian's
    when the BMA was made without targets), per test row."""
    if isinstance(test, ClassificationBMA):
        return float(-test.log_probs.gather(-1, y.to(test.log_probs.device)[:, None]).mean())
    if test.log_density is not None:
        return float(-test.log_density.double().mean())
    mean, var = test.mean.double(), test.var.double()
    diff = y.to(mean.device, torch.float64).reshape(mean.shape) - mean
    per = 0.5 * (math.log(2 * math.pi) + var.log() + diff ** 2 / var)
    return float(per.reshape(len(per), -1).sum(-1).mean())


def nll_against_trivial(test: Any, ds: Any) -> tuple[float, float] | None:
    """``(model_nll, trivial_nll)`` of the BMA ``test`` on ``ds``'s test split, or ``None``
    where there is no BMA or no trivial predictor to compare with."""
    if not isinstance(test, (ClassificationBMA, RegressionBMA)):
        return None
    classes = test.log_probs.shape[-1] if isinstance(test, ClassificationBMA) else None
    trivial = trivial_nll(ds, classes)
    return None if trivial is None else (model_nll(test, ds.y_test), trivial)


def _nll(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    both = nll_against_trivial(test, ds)
    if both is None:
        return {}
    model, trivial = both
    if math.isfinite(model) and model < trivial:
        return {}
    classes = isinstance(test, ClassificationBMA)
    what = ("the training class frequencies" if classes else
            "a Gaussian with the training targets' mean and standard deviation")
    units = ("nats per test row, of the standardised targets" if _targets_standardised(ds)
             else "nats per test row")
    return {"nll": (
        f"the test NLL {model:.4g} is no lower than that of the trivial predictor, "
        f"{what} ({trivial:.4g}; {units}): the predictive is no better than "
        f"knowing nothing about the inputs. Fix: "
        f"{nll_fix(result.kind, learned=not _majority(values, result, test, ds))}")}


def nll_fix(kind: str | None, learned: bool) -> str:
    """The ``nll`` check's fix for a run of ``kind``: :data:`NLL_FIX`'s, or
    :data:`USELESS_FIX` where the run learned nothing (``learned`` false: the ``majority``
    check fails too) or the kind is unknown; a VI run's is always its own.

    Args:
        kind: the run's kind (``bdlkit.core.protocol.KINDS``), ``None`` if unknown.
        learned: whether the predictive's accuracy or RMSE beats the trivial predictor's.
    """
    if kind == "vi" or (learned and kind in NLL_FIX):
        return NLL_FIX[kind]
    return USELESS_FIX


def _targets_standardised(ds: Any) -> bool:
    """Whether ``ds``'s regression targets were standardised on load (``meta["y_std"]``)."""
    meta = getattr(ds, "meta", None) or {}
    return "y_std" in meta and bool(meta.get("normalized", True))


def prior_divergence(q: DiagGaussian, prior: IsotropicGaussian) -> tuple[float, float] | None:
    """``(mean over coordinates of KL(q_i ‖ p_i), median of σ_i/σ0)`` of a diagonal
    Gaussian ``q`` against the isotropic Gaussian ``prior`` N(m, σ0²) (module docstring),
    in float64; ``None`` for a q that is not a dict of named tensors (a Target's)."""
    mu, rho = q.params.mu, q.params.rho
    if not isinstance(mu, dict) or not mu:
        return None
    kls, ratios = [], []
    scale = prior.scale
    for name, m in mu.items():
        centre = prior.means.get(name)
        diff = m.double() - (0.0 if centre is None else centre.to(m.device).double())
        log_ratio = rho[name].double() - math.log(scale)  # log σ_i/σ0
        kl = -log_ratio + 0.5 * ((2 * log_ratio).exp() + diff ** 2 / scale ** 2) - 0.5
        kls.append(kl.reshape(-1).cpu())
        ratios.append(log_ratio.reshape(-1).cpu())
    return float(torch.cat(kls).mean()), float(torch.cat(ratios).median().exp())


def _prior(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    if result.kind != "vi" or result.algorithm is None or result.problem is None:
        return {}
    draws = result.draws
    q = draws.approximation if isinstance(draws, ApproximationDraws) else None
    if not isinstance(q, DiagGaussian) or not isinstance(result.problem, BayesianModel):
        return {}  # a Target has no prior of its own
    prior = result.problem.prior
    if not isinstance(prior, IsotropicGaussian):
        return {}
    found = prior_divergence(q, prior)
    both = nll_against_trivial(test, ds)
    if found is None or found[0] >= PRIOR_KL or both is None:
        return {}
    model, trivial = both
    if math.isfinite(model) and model < trivial - NEAR_TRIVIAL:
        return {}  # an informative predictive: the few coordinates q moved carry the fit
    kl, ratio = found
    knob = result.algorithm.step_size_param
    now = result.algorithm.hyperparameters().get(knob)
    return {"prior": (
        f"q sits at its prior: the mean KL(q‖prior) per coordinate is {kl:.3g} nats "
        f"(< {PRIOR_KL:g}) and the median σ is {ratio:.2f} × the prior's σ0="
        f"{prior.scale:g}, and the test NLL {model:.4g} is within {NEAR_TRIVIAL:g} nats "
        f"of the trivial predictor's ({trivial:.4g}): the data have hardly moved q, so its "
        f"predictions are the prior's. Fix: more steps or a larger {knob}"
        + (f" (now {now:g})" if isinstance(now, (int, float)) else "")
        + "; check that the inputs (and regression targets) are standardised; if q "
        "converged there, weaken the KL term (kld < 1 or temperature < 1)")}


def _chains(diag: dict[str, Any]) -> int:
    """How many chains the diagnostics saw: a network run's one unless they say more."""
    chains = diag.get("chains", 1)
    return chains if isinstance(chains, int) else 1


def _sampling(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    diag = values.get("diagnostics") or {}
    return _sampling_findings(diag) if _chains(diag) > 1 else {}


def _sampling_findings(diag: dict[str, Any]) -> dict[str, str]:
    """R-hat and ESS against their thresholds: failures for several chains, information
    (:func:`run_notes`) for one."""
    out = {}
    rhat = diag.get("weights_rhat_split_mean")
    if isinstance(rhat, float) and math.isfinite(rhat) and rhat > RHAT_MAX:
        out["rhat"] = (
            f"mean split R-hat of the weights is {rhat:.3f} (> {RHAT_MAX}, Vehtari et al. "
            "2021): the chain has not mixed, so its draws are not yet from one posterior "
            "region. Fix: more steps after burn-in, a longer burn-in, or a cyclical sampler")
    ess, draws = diag.get("weights_ess_mean"), diag.get("chain_draws")
    if isinstance(ess, float) and isinstance(draws, int) and draws:
        need = min(ESS_PER_CHAIN, draws / 2)
        if ess < need:
            out["ess"] = (
                f"mean ESS of the weights is {ess:.1f} of {draws} draws (< {need:g}): the "
                "draws are strongly autocorrelated, so the average is over few independent "
                "ones. Fix: thin more over a longer run (--thin), or a larger step size")
    return out


def _draws(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    # the run's kept draws, not those averaged (`evaluate --num-draws` may ask for fewer)
    kept = result.num_kept
    if result.kind == "sampler" and kept < MIN_DRAWS:
        return {"draws": (
            f"only {kept} draws were kept to average (< {MIN_DRAWS}). Fix: a shorter "
            "--burnin, a smaller --thin or more steps")}
    return {}


def _sigma(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    rows = result.sigma_summary() if result.algorithm is not None else None
    init = (result.algorithm.hyperparameters().get("init_std")
            if result.algorithm is not None else None)
    overall = next((r for r in rows or [] if r["tensor"] == "all"), None)
    if overall is None or not isinstance(init, (int, float)) or init <= 0:
        return {}
    ratio = overall["median"] / init
    if 1 / SIGMA_FACTOR < ratio < SIGMA_FACTOR:
        return {"sigma": (
            f"the median σ of q is {overall['median']:.3g}, within a factor {SIGMA_FACTOR} "
            f"of init_std={init:g}: q is still close to a point estimate (its predictions "
            "are nearly its mean's). Fix: more steps, or a larger lr or init_std")}
    return {}


def _ood(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    aupr, base = values.get("ood_aupr"), values.get("ood_aupr_base_rate")
    if isinstance(aupr, float) and isinstance(base, float) and base < 1:
        gain = (aupr - base) / (1 - base)
        if gain < 0.5:
            return {"ood_aupr": (
                f"OOD AUPR {aupr:.3f} is only {max(gain, 0):.0%} of the way from its base "
                f"rate {base:.3f} (the OOD fraction, what an uninformative score gets) to 1: "
                "the predictive tells OOD inputs apart less well than the number suggests. "
                "Read AUROC beside it")}
    return {}
