"""``bdlkit bench l2e-sampling``: does an L2E sampler sample, or optimise?

For the shipped meta-parameters, an SGHMC control (``kinetic="identity"``: β = r, α = 0,
with each candidate's constants) and every meta-parameter file passed with
``--meta-params``, on problems whose answer is known or held out of meta-training:

* ``gauss``: ``bdlkit.infer`` on the 2-D Gaussian N([0.5, −1], diag(1, 0.3)²) with exact
  gradients (a :class:`~bdlkit.Target`, N = 1), 50 000 steps, seed 0, 4 000 draws: the
  draws' mean error (in target stds) and std ratio to the truth, per coordinate;
* ``blr100`` / ``blr1000``: a 2-D Bayesian linear regression (x ~ N(0, I), w = (1, −2),
  noise 1, prior N(0, 2²I)) with N = 100 and 1 000 points, minibatch 32, 6 000 steps
  (burn-in 2 000, thin 10): std ratio to the exact posterior's;
* ``sensitivity`` (``docs/l2e.md``, Why the shipped sampler collapsed): at states of a
  chain (the Gaussian's, and digits' after 200 steps), the Jacobian J = ∂β(θ, r')/∂r' of
  the position step at the new momentum, applied to random directions: ``dbeta_dr`` =
  ‖J v‖/‖v‖ (1 for SGHMC's β = r) and ``noise_share`` = ‖ε·J·(σ_ξ·ξ)‖ / ‖ε·β‖, the part
  of one position step that the injected noise of that step accounts for, to first order;
* ``digits``: the ``digits-hmc`` task of ``bdlkit bench l2e`` (3 chains, same HMC reference):
  agreement and TV with HMC, NLL, within-chain diversity, ESS/s.

A sampler that samples has std ratios near 1 and a noise share well above 0; one that
optimises has ratios near 0 (exact gradients) and a noise share near 0. Wall time: about
1.5 minutes per candidate on 2 CPU cores.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import bdlkit
from bdlkit.algorithms.sgmcmc import l2e as l2e_algorithm
from bdlkit.algorithms.sgmcmc.common import loss_gradient
from bdlkit.bench import l2e as l2e_bench
from bdlkit.bench.common import prepare_bench_out, warm_up, write_results
from bdlkit.core.tree import tree_leaves
from bdlkit.l2e.kinetic import l2e_update
from bdlkit.runs import directory as run_module
from bdlkit.runs.config import RunConfig

DESCRIPTION = ("does L2E sample? std ratios on a 2-D Gaussian and Bayesian linear regression, "
               "noise transmission dβ/dr, within-chain diversity on digits")
GAUSS_MEAN = (0.5, -1.0)
GAUSS_SD = (1.0, 0.3)
GAUSS_STEPS = 50_000
GAUSS_DRAWS = 4000
BLR_SIZES = (100, 1000)
BLR_STEPS = 6000  # burn-in a third, every 10th step kept
SENSITIVITY_STATES = 5
SENSITIVITY_BURNIN = {"gauss": 5000, "digits": 200}


@dataclass(frozen=True)
class Candidate:
    """One sampler: a name and the ``l2e`` options it runs with."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)


def candidates(meta_params: tuple[str, ...] = ()) -> list[Candidate]:
    """The shipped set and each given file (named by its folder), each followed by its SGHMC
    control: ``kinetic="identity"`` with the same stored constants."""
    from bdlkit.l2e import load_meta_params, load_pretrained

    out: list[Candidate] = []
    for name, path in [("shipped", None),
                       *((Path(p).parent.name or Path(p).stem, p) for p in meta_params)]:
        if any(c.name == name for c in out):  # two files in same-named folders
            name = f"{name}-{len(out)}"
        pre = load_pretrained() if path is None else load_meta_params(path)
        constants = {k: v for k, v in pre.constants.to_dict().items()
                     if k in ("eps", "grad_scale", "friction", "noise_mode", "noise_mult")}
        control = {"kinetic": "identity", **constants}
        out.append(Candidate(name, {} if path is None else {"meta_params": str(path)}))
        if all(c.options != control for c in out):  # one control per set of constants
            out.append(Candidate(f"{name}-as-sghmc", control))
    return out


# --------------------------------------------------------------------------- problems
def gaussian_target() -> bdlkit.Target:
    mean = torch.tensor(GAUSS_MEAN, dtype=torch.float64)
    sd = torch.tensor(GAUSS_SD, dtype=torch.float64)
    return bdlkit.Target(lambda x: -0.5 * (((x - mean) / sd) ** 2).sum(-1), 2,
                         name="gauss-2d", dtype=torch.float64,
                         score=lambda x: -(x - mean) / sd**2)


def gaussian_spread(options: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """Mean error (in target stds) and std ratio of ``l2e`` draws on the 2-D Gaussian."""
    res = bdlkit.infer(gaussian_target(), "l2e", steps=GAUSS_STEPS, seed=seed, **options)
    draws = res.sample(GAUSS_DRAWS).reshape(-1, 2).double()
    sd = torch.tensor(GAUSS_SD, dtype=torch.float64)
    return {"mean_err": ((draws.mean(0) - torch.tensor(GAUSS_MEAN)) / sd).tolist(),
            "std_ratio": (draws.std(0) / sd).tolist()}


def blr_problem(n: int, seed: int = 0) -> tuple[bdlkit.BayesianModel, Tensor, Tensor,
                                                 Tensor, Tensor]:
    """(model, x, y, posterior mean, posterior std) of the 2-D regression with ``n`` points."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0], dtype=torch.float64) + torch.randn(
        n, generator=g, dtype=torch.float64)
    precision = x.T @ x + torch.eye(2, dtype=torch.float64) / 4.0
    cov = torch.linalg.inv(precision)
    mean = torch.linalg.solve(precision, x.T @ y)
    net = nn.Linear(2, 1, bias=False).double()
    model = bdlkit.BayesianModel(net, likelihood=bdlkit.problems.Gaussian(noise=1.0),
                                 prior=2.0, num_data=n)
    return model, x, y, mean, cov.diagonal().sqrt()


def blr_spread(options: dict[str, Any], n: int, seed: int = 0) -> dict[str, Any]:
    model, x, y, mean, sd = blr_problem(n)
    res = bdlkit.infer(model, "l2e", data=(x, y), steps=BLR_STEPS, batch_size=32, seed=seed,
                       burnin=BLR_STEPS // 3, thin=10, **options)
    draws = res.samples["weight"].reshape(-1, 2).double()
    return {"mean_err": ((draws.mean(0) - mean) / sd).tolist(),
            "std_ratio": (draws.std(0) / sd).tolist()}


# --------------------------------------------------------------------------- sensitivity
def noise_sensitivity(alg: Any, state: Any, batch: Any, probes: int = 4,
                      seed: int = 0) -> dict[str, float]:
    """``dbeta_dr`` and ``noise_share`` (module docstring) of ``alg`` (an ``l2e`` sampler) at
    ``state``: one momentum update as the sampler takes it, then J·v by forward-mode
    differentiation of β(θ, r') in r'."""
    c = alg.constants
    _, score = alg.problem.value_and_score(state.params, batch)
    grad = tree_leaves(loss_gradient(alg.problem, score))
    theta, r = tree_leaves(state.params), tree_leaves(state.momentum)
    moments = tree_leaves(state.moments)
    if _stacked(alg, state):  # a Target's (1, d) chain stack: its one chain
        theta, r, grad = [t[0] for t in theta], [t[0] for t in r], [t[0] for t in grad]
        moments = [m[:, 0] for m in moments]
    kin = alg.kinetic_fn
    sd = math.sqrt(c.noise_variance(float(alg.problem.temperature)))
    gen = torch.Generator().manual_seed(seed)
    xi = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in theta]
    _, r_new, moments = l2e_update(kin, c, theta, r, moments, grad, xi,
                                   float(alg.problem.temperature))

    def beta_at(*rr: Tensor) -> tuple[Tensor, ...]:
        return tuple(kin(grad, theta, list(rr), moments)[1])

    step = torch.cat([b.reshape(-1) for b in beta_at(*r_new)]) * c.eps
    gains, shares = [], []
    for _ in range(probes):
        v = tuple(torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in theta)
        _, jv = torch.func.jvp(beta_at, tuple(r_new), v)
        flat_jv = torch.cat([j.reshape(-1) for j in jv])
        flat_v = torch.cat([x.reshape(-1) for x in v])
        gains.append(float(flat_jv.norm() / flat_v.norm()))
        shares.append(float((c.eps * sd * flat_jv).norm() / step.norm().clamp_min(1e-30)))
    return {"dbeta_dr": sum(gains) / probes, "noise_share": sum(shares) / probes}


def _stacked(alg: Any, state: Any) -> bool:
    return isinstance(alg.problem, bdlkit.Target) and state.params.dim() == 2


def chain_sensitivity(problem: Any, options: dict[str, Any], batches: Any,
                      burnin: int, seed: int = 0) -> dict[str, float]:
    """The mean of :func:`noise_sensitivity` over states ``burnin + k·burnin/5`` of a chain."""
    alg = l2e_algorithm.build(problem, **options)
    gen = torch.Generator().manual_seed(seed)
    start = problem.init_params(gen)
    if isinstance(start, Tensor) and start.dim() == 1:
        start = start.unsqueeze(0)
    state = alg.init(start, generator=gen)
    values = []
    every = max(burnin // SENSITIVITY_STATES, 1)
    for t in range(burnin + every * SENSITIVITY_STATES):
        batch = batches(t)
        if t >= burnin and (t - burnin) % every == 0:
            values.append(noise_sensitivity(alg, state, batch, seed=t))
        state, _ = alg.step(state, batch)
    return {k: sum(v[k] for v in values) / len(values) for k in values[0]}


def digits_sensitivity(options: dict[str, Any], task: Any, ds: Any,
                       seed: int = 0) -> dict[str, float]:
    """:func:`chain_sensitivity` on the digits task's model (``ds``: its data set)."""
    cfg = RunConfig(method="l2e", model=task.model, data=task.data,
                    model_kwargs=task.model_kwargs, seed=seed)
    model = run_module.build_problem(cfg, ds)
    gen = torch.Generator().manual_seed(seed)
    burnin = SENSITIVITY_BURNIN["digits"]
    steps = burnin + max(burnin // SENSITIVITY_STATES, 1) * SENSITIVITY_STATES
    order = torch.randint(len(ds.y_train), (steps, 128), generator=gen)
    return chain_sensitivity(model, options,
                             lambda t: (ds.x_train[order[t]], ds.y_train[order[t]]), burnin, seed)


# --------------------------------------------------------------------------- the suite
def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, meta_params: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every candidate on every problem (module docstring); returns the rows."""
    start = time.perf_counter()
    chosen = candidates(meta_params)  # a bad file fails here, before any work
    prepare_bench_out(out)
    warm_up()
    digits_task = l2e_bench.tasks(quick)[0]
    base = {"model": digits_task.model, "data": digits_task.data,
            "model_kwargs": digits_task.model_kwargs, "data_kwargs": {}}
    ds = run_module.load_dataset(RunConfig(method="sghmc", **base))
    runs = out / "runs"
    ref_row, ref_probs, ref_note = l2e_bench.reference_row(digits_task, base, ds, runs, seed)
    rows: list[dict[str, Any]] = [{"candidate": "hmc (digits reference)",
                                   **_digits_values(ref_row)}]
    for cand in chosen:
        row: dict[str, Any] = {"candidate": cand.name}
        row.update(_candidate_values(cand, digits_task, base, ds, ref_probs, runs, seed))
        failed = [k for k, v in row.items() if isinstance(v, dict) and "error" in v]
        row["status"] = "ok" if not failed else "failed: " + ", ".join(
            f"{k} ({row[k]['error'][:80]})" for k in failed)
        rows.append(row)
        if echo:
            print(f"  {row}", flush=True)
    settings = {"quick": quick, "seed": seed, "gauss_steps": GAUSS_STEPS,
                "blr_sizes": list(BLR_SIZES), "digits": digits_task.describe(),
                "reference": ref_note, "candidates": [c.__dict__ for c in chosen],
                "wall_s": time.perf_counter() - start}
    write(out, rows, settings, quick, command)
    return rows


def write(out: Path, rows: list[dict[str, Any]], settings: dict[str, Any], quick: bool,
          command: str | None) -> None:
    """``results.json`` and ``results.md`` of the rows (also to re-render a table)."""
    write_results(out, "l2e-sampling", quick, command, "does L2E sample?",
                  f"2-D Gaussian ({settings['gauss_steps']} steps, exact gradients), 2-D BLR "
                  f"(N = {', '.join(map(str, settings['blr_sizes']))}, batch 32), digits "
                  f"({settings['digits']})", rows, {"settings": settings}, floatfmt=".3f",
                  table=_table(rows))


def _candidate_values(cand: Candidate, task: Any, base: dict[str, Any], ds: Any,
                      ref_probs: Tensor, runs: Path, seed: int) -> dict[str, Any]:
    """Every measure of one candidate; a measure that fails (e.g. a diverging control)
    holds its error and the others still run."""
    opts = cand.options
    measures = {
        "gauss": lambda: gaussian_spread(opts, seed),
        **{f"blr{n}": (lambda n=n: blr_spread(opts, n, seed)) for n in BLR_SIZES},
        "sensitivity_gauss": lambda: chain_sensitivity(
            gaussian_target(), opts, lambda t: None, SENSITIVITY_BURNIN["gauss"], seed),
        "sensitivity_digits": lambda: digits_sensitivity(opts, task, ds, seed),
        "digits": lambda: _digits_run(opts, task, base, ds, ref_probs, runs / cand.name, seed),
    }
    out: dict[str, Any] = {}
    for name, measure in measures.items():
        try:
            out[name] = measure()
        except Exception as err:  # noqa: BLE001 - recorded, the other measures still run
            out[name] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
    out.update(_digits_values(out["digits"]))
    return out


def _digits_run(opts: dict[str, Any], task: Any, base: dict[str, Any], ds: Any,
                ref_probs: Tensor, runs: Path, seed: int) -> dict[str, Any]:
    """``bench l2e``'s chains of ``l2e`` on the digits task; an error if every chain failed."""
    row = l2e_bench.run_method(task, "l2e", dict(opts), base, ds, {"reference": ref_probs},
                                runs, seed, "cpu")
    if row["status"].startswith("error"):
        raise RuntimeError(row["status"])
    return row


def _digits_values(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("agreement", "total_variation", "nll", "div_disagreement", "div_tv",
            "ess_per_s", "fn_ess_per_s")
    return {f"digits_{k}": row.get(k) for k in keys if row.get(k) is not None}


def _table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def ratios(value: Any) -> str:
        if value is None or "error" in value:
            return "" if value is None else "failed"
        return " / ".join(f"{v:.3g}" for v in value["std_ratio"])

    def num(value: Any, fmt: str = ".3f") -> str:
        return "" if value is None else format(value, fmt)

    return [{"candidate": r["candidate"],
             "gauss std ratio": ratios(r.get("gauss")),
             "blr100 std ratio": ratios(r.get("blr100")),
             "blr1000 std ratio": ratios(r.get("blr1000")),
             "dβ/dr gauss": num((r.get("sensitivity_gauss") or {}).get("dbeta_dr"), ".3g"),
             "noise share gauss": num((r.get("sensitivity_gauss") or {}).get("noise_share"),
                                      ".3g"),
             "dβ/dr digits": num((r.get("sensitivity_digits") or {}).get("dbeta_dr"), ".3g"),
             "noise share digits": num((r.get("sensitivity_digits") or {}).get("noise_share"),
                                       ".3g"),
             "digits agreement": num(r.get("digits_agreement")),
             "digits NLL": num(r.get("digits_nll")),
             "within-chain TV": num(r.get("digits_div_tv")),
             "within-chain disagr.": num(r.get("digits_div_disagreement")),
             "ESS/s": num(r.get("digits_ess_per_s"), ".4g"),
             "status": r.get("status", "reference")} for r in rows]
