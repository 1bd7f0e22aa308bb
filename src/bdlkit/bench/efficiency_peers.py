"""The rows of ``bench efficiency`` that are not bdlkit methods: a torch floor and peers.

* ``torch_sgd``: the hand-written floor of training, the module's own forward and
  backward and ``torch.optim.SGD(momentum=0.9)``; the denominator of the goals.
* ``torch_sgld``: the floor of any sampler, ``torch_sgd``'s step plus one ``randn`` of all
  coordinates into a preallocated buffer added in place (what no SG-MCMC step can avoid).
* ``posteriors_sgld``, ``posteriors_sghmc``, ``posteriors_vi_diag``: the same methods in
  ``posteriors`` (``pip install bdlkit[peers]``), built on the same log posterior per
  datum, at their default ``inplace=False`` (functional, as bdlkit's steps). Skipped,
  with the reason, when ``posteriors`` is not installed.
* ``ivon_opt``: IVON in ``ivon-opt`` (the peer a user would pick for VI on networks; GPL,
  a peer only, as in :mod:`.peers`) in its own optimizer loop: ``zero_grad``, then under
  ``sampled_params(train=True)`` the mean negative log-likelihood of the batch and its
  ``backward()``, then ``step()``. It trains its own copy of the module (ivon-opt swaps
  the parameters' storage for its buffers, which would tie it to the floor rows) with
  bdlkit ``ivon``'s hyperparameters as the suite sets them (:data:`SETTINGS_OF`): learning
  rate, initial curvature, betas, S, clip radius, data size (N/T, ``ess``) and the prior's
  weight decay 1/(σ0² N). Skipped, with the reason, when ``ivon-opt`` is not installed.

Each row is an object with ``init(generator=...)`` and ``step(state, batch) -> (state,
info)`` like a bdlkit algorithm, so the suite times every row the same way, interleaved.
"""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import torch

from bdlkit import algorithms
from bdlkit.bench.peers import missing as missing_peer
from bdlkit.problems import BayesianModel

FLOORS = ("torch_sgd", "torch_sgld")
PEERS = ("posteriors_sgld", "posteriors_sghmc", "posteriors_vi_diag", "ivon_opt")
#: each peer row's bdlkit counterpart(s), for the ``a/peer`` ratios
COUNTERPARTS = {"posteriors_sgld": ("sgld",), "posteriors_sghmc": ("sghmc",),
                "posteriors_vi_diag": ("score_vi", "advi"),
                "ivon_opt": ("advi", "score_vi", "ivon")}
#: a peer row -> the suite row whose method and hyperparameters it takes
SETTINGS_OF = {"ivon_opt": "ivon"}
LR = 1e-3


def available(name: str) -> str | None:
    """None when row ``name`` can be built here, else why not."""
    if name == "ivon_opt":
        return missing_peer("ivon_opt")
    if name in PEERS and importlib.util.find_spec("posteriors") is None:
        return "posteriors is not installed (pip install bdlkit[peers])"
    return None


def build(name: str, problem: BayesianModel, seed: int,
          settings: tuple[str, dict[str, Any]] | None = None) -> tuple[Any, Any]:
    """``(row, state)`` for row ``name`` on ``problem``.

    Args:
        name: a row of :data:`FLOORS` or :data:`PEERS`.
        problem: the model the row trains.
        seed: the seed of its noise.
        settings: the registered method and hyperparameters of the suite row that
            :data:`SETTINGS_OF` names (``ivon_opt``: bdlkit ``ivon``'s).
    """
    if name in FLOORS:
        row: Any = _TorchStep(problem, noise=name == "torch_sgld")
    elif name in SETTINGS_OF:
        if settings is None:
            raise ValueError(f"the {name} row takes the settings of the suite's "
                             f"{SETTINGS_OF[name]} row: pass settings=(method, hyperparameters)")
        row = _IvonOpt(problem, *settings)
    else:
        row = _Posteriors(name, problem)
    return row, row.init(generator=torch.Generator().manual_seed(seed))


class _TorchStep:
    """Plain module training (the floor): zero_grad, forward, loss, backward, SGD step."""

    def __init__(self, problem: BayesianModel, noise: bool) -> None:
        self.module = problem.module
        self.problem = problem
        params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.SGD(params, lr=LR, momentum=0.9)
        self.noise = noise
        self.params = params

    def init(self, generator: torch.Generator) -> Any:
        total = sum(p.numel() for p in self.params)
        first = self.params[0]
        self.buffer = torch.empty(total, dtype=first.dtype, device=first.device)
        self.views = [v.view_as(p) for v, p in zip(
            self.buffer.split([p.numel() for p in self.params]), self.params, strict=True)]
        self.generator = torch.Generator(device=first.device).manual_seed(
            int(torch.randint(0, 2**62, (), generator=generator)))
        return None

    def step(self, state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loglik = self.problem.likelihood.log_prob(self.module(x), y, {})
            loss = -loglik.mean()
            loss.backward()
        self.optimizer.step()
        if self.noise:
            self.buffer.normal_(generator=self.generator)
            with torch.no_grad():
                torch._foreach_add_(self.params, self.views, alpha=1e-3)
        return state, {"log_prob": -loss.detach()}


class _Posteriors:
    """A posteriors transform on the problem's log posterior per datum."""

    def __init__(self, name: str, problem: BayesianModel) -> None:
        import posteriors
        import torchopt

        n = problem.num_data

        def log_posterior(params: dict[str, torch.Tensor], batch: Any) -> Any:
            value = problem.log_posterior(params, batch) / n
            return value, value.detach()

        self.problem = problem
        if name == "posteriors_sgld":
            self.transform = posteriors.sgmcmc.sgld.build(log_posterior, lr=LR,
                                                          temperature=1.0 / n)
        elif name == "posteriors_sghmc":
            self.transform = posteriors.sgmcmc.sghmc.build(log_posterior, lr=LR, alpha=0.1,
                                                           temperature=1.0 / n)
        else:
            self.transform = posteriors.vi.diag.build(
                log_posterior, torchopt.adam(lr=1e-2), temperature=1.0 / n,
                init_log_sds=-4.6)

    def init(self, generator: torch.Generator) -> Any:
        torch.manual_seed(int(torch.randint(0, 2**62, (), generator=generator)))
        return self.transform.init(self.problem.init_params())

    def step(self, state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        state, _ = self.transform.update(state, batch, inplace=False)
        return state, {"log_prob": None}


class _IvonOpt:
    """ivon-opt's own optimizer loop on a copy of the module (module docstring)."""

    def __init__(self, problem: BayesianModel, method: str, hyper: dict[str, Any]) -> None:
        import ivon

        twin = algorithms.get_method(method).build(problem, **hyper)
        self.module = copy.deepcopy(problem.module)
        self.problem = problem
        self.optimizer = ivon.IVON(
            [p for p in self.module.parameters() if p.requires_grad], lr=float(twin.rate(0)),
            ess=twin.data_size, hess_init=twin.hess_init, beta1=twin.beta1, beta2=twin.beta2,
            weight_decay=twin.weight_decay, mc_samples=twin.mc_samples,
            clip_radius=twin.clip_radius)

    def init(self, generator: torch.Generator) -> Any:
        torch.manual_seed(int(torch.randint(0, 2**62, (), generator=generator)))
        return None  # ivon-opt draws its noise from torch's global generator

    def step(self, state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad(), self.optimizer.sampled_params(train=True):
            loss = -self.problem.likelihood.log_prob(self.module(x), y, {}).mean()
            loss.backward()
        self.optimizer.step()
        return state, {"log_prob": -loss.detach()}


__all__ = ["COUNTERPARTS", "FLOORS", "PEERS", "SETTINGS_OF", "available", "build"]
