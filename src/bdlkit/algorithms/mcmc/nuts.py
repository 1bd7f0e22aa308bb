"""The No-U-Turn Sampler (Hoffman & Gelman, JMLR 2014) through Pyro (Bingham et al., JMLR 2019).

NUTS is Hamiltonian Monte Carlo that picks its own trajectory length: it doubles a leapfrog
trajectory forwards or backwards in time until it makes a U-turn (at most ``max_tree_depth``
doublings) and draws the next state from it, an exact MCMC kernel with no step-size bias.
During the first ``warmup`` transitions Pyro adapts the step size (dual averaging towards
``target_accept``) and, unless ``adapt_mass_matrix=False``, a diagonal inverse mass matrix
(Stan's windows; Pyro adapts the mass matrix only when ``warmup >= 20``).

This module is an *adapter*: one bdlkit ``step`` is one Pyro NUTS transition per chain on
``potential_fn(z) = -log π(z)`` over the flattened parameters (sorted keys for a network),
with gradients by autograd through ``Target.log_prob`` or ``BayesianModel.log_posterior``
on the **full batch**, on **CPU** (use ``hmc`` for GPUs and large networks). It exists as a
gold-standard reference for Targets, UCI-size models and small networks, and as an
oracle in tests. Each chain of a ``(chains, d)`` Target has its own kernel (Pyro's own
multi-chain mode uses processes); a network posterior has one chain.

Reproducibility: Pyro draws from torch's global RNG, so each step forks it, seeds it from
``state.rng_state`` and stores the advanced RNG state back; the state also records the
step size and diagonal inverse mass matrix after every step. Kernels are cached on the
algorithm object and rebuilt from the state whenever they are not exactly at the incoming
state (a resume, a state stepped twice, another run). After warm-up this is exact: same
state and batch in, same state out, and checkpoints resume bit-exactly. Inside warm-up the
adaptation's running sums (dual averaging, Welford) are not in the state, so a rebuild
restarts Pyro's adaptation windows over the remaining warm-up steps from the recorded step
size and mass matrix: a valid warm-up, but not the uninterrupted trajectory. Discard the
warm-up (the runner's default burn-in covers it and warns about a shorter one).
Info: ``log_prob`` (summed over chains), ``accept_prob``, ``step_size``, ``tree_depth``
(means over chains), ``num_grads`` (sum).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from bdlkit.algorithms.mcmc.adaptation import default_adaptation
from bdlkit.algorithms.options import builder
from bdlkit.core import rng
from bdlkit.core.errors import DefaultsWarning, caller_stacklevel
from bdlkit.core.extras import require
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.tree import TensorTree, detach_clone, pytree_dataclass

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm
WARMUP = 200  # the cap on the default warm-up length (half the run)
SITE = ("z",)  # Pyro keys its mass matrix blocks by tuples of site names


@pytree_dataclass
class NUTSState:
    params: TensorTree
    rng_state: Tensor
    step: int
    step_size: Tensor  # float64, () or (chains,)
    inverse_mass: Tensor  # diagonal, (D,) or (chains, D)


#: parameters × training rows above which NUTS on a network warns before the run — digits'
#: MLP (7 510 × 1 257 ≈ 1e7) takes 25 s for 30 transitions on 2 cores, so 1e8 is minutes
#: and MNIST-5000's MLP (4e8) about 20 minutes (``bdlkit bench defaults``).
COSTLY = 1e8


def warn_if_costly(problem: Problem, max_tree_depth: int) -> None:
    """A :class:`~bdlkit.core.errors.DefaultsWarning` when NUTS on a network would need
    full-batch gradients of more than :data:`COSTLY` parameter-rows each."""
    num_params, rows = getattr(problem, "num_params", None), getattr(problem, "num_data", None)
    if not (isinstance(num_params, int) and isinstance(rows, int)):  # a Target
        return
    work = num_params * rows
    if work > COSTLY:
        warnings.warn(
            f"nuts on a network of {num_params} parameters and {rows} training rows: each "
            f"transition takes up to 2^{max_tree_depth} full-batch gradients, about {work:.1e} parameter-rows each, so a run takes tens of minutes or more. "
            "It is a reference for small problems: use `bdlkit reference nuts` on a subset, "
            "or hmc / an SG-MCMC method here", DefaultsWarning, stacklevel=caller_stacklevel())


@dataclass(frozen=True)
class NUTS(Sampler):
    """One Pyro NUTS transition per chain and ``step`` (module docstring).

    Args:
        step_size: the initial leapfrog step size (adapted during the warm-up).
        max_tree_depth: the most doublings of a trajectory, an integer in [1, 30].
        warmup: transitions of Pyro's adaptation (step size, mass matrix); None: half the
            run, at most 200 (:mod:`.adaptation`). The default burn-in covers them.
        target_accept: the acceptance probability in (0, 1) the step size adapts to.
        adapt_mass_matrix: also adapt a diagonal inverse mass matrix during the warm-up
            (Pyro does so only when ``warmup >= 20``).
    """

    problem: Problem
    step_size: float = 0.1
    max_tree_depth: int = 8
    warmup: int | None = None
    target_accept: float = 0.8
    adapt_mass_matrix: bool = True
    name: str = "nuts"
    full_batch: ClassVar[bool] = True
    step_size_param: ClassVar[str] = "step_size"
    data_parallel: ClassVar[bool] = False  # Pyro differentiates problem.log_posterior
    _cache: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = self.problem
        if not hasattr(problem, "log_prob") and not hasattr(problem, "log_posterior"):
            raise TypeError(
                f"nuts needs a Target (log_prob) or a BayesianModel (log_posterior), got "
                f"{type(problem).__name__}"
            )
        if not 0 < _number(self.step_size) < float("inf"):
            raise ValueError(f"step_size must be a finite number > 0, got {self.step_size!r}")
        for key, low, high in (("max_tree_depth", 1, 30), ("warmup", 0, float("inf"))):
            value = getattr(self, key)
            if value is None and key == "warmup":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{key} must be an integer in [{low}, {high}], got {value!r}")
        if not 0 < _number(self.target_accept) < 1:
            raise ValueError(f"target_accept must be in (0, 1), got {self.target_accept!r}")
        if not isinstance(self.adapt_mass_matrix, bool):
            raise ValueError(f"adapt_mass_matrix must be True or False, got "
                             f"{self.adapt_mass_matrix!r}")
        _pyro_nuts()
        warn_if_costly(problem, self.max_tree_depth)
        object.__setattr__(self, "step_size", float(self.step_size))
        object.__setattr__(self, "target_accept", float(self.target_accept))
        object.__setattr__(self, "_cache", {})

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> NUTSState:
        if params is None:
            params = self.problem.init_params(generator)
        params = detach_clone(params)
        flat = _flatten(params)
        gen = rng.split(generator, device="cpu")
        lead = flat.shape[:1] if isinstance(params, Tensor) and params.ndim == 2 else ()
        return NUTSState(params=params, rng_state=rng.state_of(gen), step=0,
                         step_size=torch.full(lead, float(self.step_size), dtype=torch.float64),
                         inverse_mass=torch.ones_like(flat).reshape(*lead, -1))

    def step(self, state: NUTSState, batch: Batch) -> tuple[NUTSState, Info]:
        flat = _flatten(state.params)
        cache = self._cache
        masses = state.inverse_mass.reshape(flat.shape)
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.set_rng_state(state.rng_state)
            fresh = not (cache.get("step") == state.step and torch.equal(cache["params"], flat)
                         and torch.equal(cache["rng"], state.rng_state))
            if not fresh and not _same_batch(cache["batch"], batch):
                for kernel in cache["kernels"]:
                    kernel.clear_cache()  # its cached potential belongs to the old batch
            cache.update(step=None, batch=batch)  # invalid until this step completes
            if fresh:
                cache["kernels"] = [self._kernel(state, z, s, m, cache) for z, s, m
                                    in zip(flat, state.step_size.reshape(-1).tolist(), masses)]
            kernels = cache["kernels"]
            try:
                new_flat = torch.stack([_transition(k, z) for k, z in zip(kernels, flat)])
            except RuntimeError:  # Pyro fails on an infinite potential: the NaN stop's case
                if all(_finite_potential(k, z) for k, z in zip(kernels, flat)):
                    raise
                return state, {"log_prob": math.nan}
            rng_out = torch.get_rng_state()
        cache.update(step=state.step + 1, params=new_flat, rng=rng_out)
        step_size = torch.tensor([float(k.step_size) for k in kernels], dtype=torch.float64)
        inverse_mass = torch.stack([k.inverse_mass_matrix[SITE].detach() for k in kernels])
        new = NUTSState(params=_unflatten(new_flat, state.params), rng_state=rng_out,
                        step=state.step + 1, step_size=step_size.reshape(state.step_size.shape),
                        inverse_mass=inverse_mass.clone().reshape(state.inverse_mass.shape))
        total = {key: sum(k.stats[key] for k in kernels) for key in kernels[0].stats}
        return new, {"log_prob": -sum(float(k._potential_energy_last) for k in kernels),
                     "accept_prob": total["accept_prob"] / len(kernels),
                     "step_size": float(step_size.mean()),
                     "tree_depth": total["tree_depth"] / len(kernels),
                     "num_grads": total["num_grads"]}

    def params(self, state: NUTSState) -> TensorTree:
        return state.params

    def for_run(self, total_steps: int) -> NUTS:
        """This sampler with ``warmup`` fixed for a run of ``total_steps`` transitions (the
        copy's ``__post_init__`` does not repeat the cost warning ``build`` gave)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DefaultsWarning)
            return dataclasses.replace(
                self, warmup=default_adaptation(self.warmup, WARMUP, total_steps))

    @property
    def warmup_steps(self) -> int:
        """Transitions of Pyro's adaptation — the runner's default burn-in covers them."""
        return default_adaptation(self.warmup, WARMUP, None)

    def _kernel(self, state: NUTSState, z: Tensor, step_size: float, inverse_mass: Tensor,
                cache: dict[str, Any]) -> Any:
        """A Pyro kernel set up at ``z`` for the rest of the run (draws from the global RNG)."""
        remaining = max(self.warmup_steps - state.step, 0)
        template = state.params

        def potential(sites: dict[str, Tensor]) -> Tensor:
            kernel.stats["num_grads"] += 1
            if isinstance(template, Tensor):
                return -self.problem.log_prob_for_autograd(sites["z"])  # type: ignore
            params = _unflatten(sites["z"].unsqueeze(0), template)
            return -self.problem.log_posterior(params, cache["batch"])  # type: ignore

        adapt = remaining > 0
        kernel = _pyro_nuts()(
            potential_fn=potential, step_size=step_size, adapt_step_size=adapt,
            adapt_mass_matrix=adapt and self.adapt_mass_matrix,
            target_accept_prob=self.target_accept, max_tree_depth=self.max_tree_depth)
        kernel.stats = {"num_grads": 0, "tree_depth": 0, "accept_prob": 0.0}
        build_tree = kernel._build_tree

        def tracked_build_tree(*args: Any, **kwargs: Any) -> Any:  # NUTS.sample's doublings
            depth = kwargs.get("tree_depth", args[5] if len(args) > 5 else 0)
            kernel.stats["tree_depth"] = max(kernel.stats["tree_depth"], depth + 1)
            return build_tree(*args, **kwargs)

        kernel._build_tree = tracked_build_tree
        kernel.initial_params = {"z": z.clone()}
        kernel.setup(warmup_steps=remaining)
        if state.step > 0:  # continue from the recorded mass matrix (re-tune the step size)
            kernel.mass_matrix_adapter.inverse_mass_matrix = {SITE: inverse_mass.clone()}
            if adapt:
                kernel._adapter.reset_step_size_adaptation(kernel.initial_params)
        return kernel


def _finite_potential(kernel: Any, z: Tensor) -> bool:
    """Whether the potential −log π is finite at ``z`` (where Pyro's transition starts)."""
    with torch.no_grad():
        return bool(torch.isfinite(kernel.potential_fn({"z": z})).all())


def _transition(kernel: Any, z: Tensor) -> Tensor:
    """One NUTS transition; its statistics are left in ``kernel.stats``."""
    kernel.stats.update(num_grads=0, tree_depth=0)
    mean_before = kernel._mean_accept_prob
    out = kernel.sample({"z": z.clone()})["z"].detach().clone()
    t, warm = kernel._t, kernel._warmup_steps
    n = t - warm if t > warm else t  # Pyro's running-mean count (restarted after warm-up)
    accept = mean_before + n * (kernel._mean_accept_prob - mean_before)
    kernel.stats["accept_prob"] = min(max(accept, 0.0), 1.0)
    return out


def _flatten(params: TensorTree) -> Tensor:
    """``(chains, D)``: a Target's rows, or a model's tensors concatenated in sorted key order."""
    if isinstance(params, Tensor):
        flat = params.reshape(-1, params.shape[-1])
    else:
        flat = torch.cat([params[k].reshape(-1) for k in sorted(params)]).unsqueeze(0)
    if flat.device.type != "cpu":
        raise ValueError(f"nuts runs on CPU only (Pyro's kernel), but the parameters are on "
                         f"{flat.device}: use method 'hmc' on GPUs, or move model and data to CPU")
    return flat


def _unflatten(flat: Tensor, template: TensorTree) -> TensorTree:
    if isinstance(template, Tensor):
        return flat.reshape(template.shape)
    keys = sorted(template)
    parts = dict(zip(keys, flat[0].split([template[k].numel() for k in keys])))
    return {k: parts[k].reshape(template[k].shape).to(template[k].dtype) for k in template}


def _same_batch(a: Batch, b: Batch) -> bool:
    if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
        return a is b
    return all(x is y or (isinstance(x, Tensor) and isinstance(y, Tensor)
                          and x.shape == y.shape and torch.equal(x, y)) for x, y in zip(a, b))


def _pyro_nuts() -> type:
    return require("pyro.infer.mcmc", "reference", "method 'nuts'").NUTS


def _number(value: Any) -> float:
    """``value`` as a float; NaN (which fails every check) if it is not a real number."""
    real = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if real else float("nan")


build = builder(NUTS)

__all__ = ["NUTS", "NUTSState", "build"]


ALGORITHM = NUTS
