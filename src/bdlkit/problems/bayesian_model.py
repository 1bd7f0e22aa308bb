"""A Bayesian neural network posterior with a minibatch score oracle.

The target density, with N training points, a minibatch B of size ``|B|``, the
temperature T and the KL discount ``kld`` (``docs/conventions.md``)::

    log π(θ | D)   = (1/T) [ (1/kld) Σ_{i=1}^N log p(y_i | x_i, θ) + log p(θ) ] + const
    value(θ, B)    = (1/T) [ (N_eff/|B|) Σ_{i∈B} log p(y_i | x_i, θ) + log p(θ) ]
    score(θ, B)    = ∇_θ value(θ, B),        N_eff = N / kld  (``effective_num_data``)

``value`` and ``score`` are unbiased for the full-data quantities. ``kld`` < 1 weights the
likelihood by 1/kld and leaves the prior as it is (the KL discount of BayesDLL's VI loss
mean NLL + kld·KL/N, whose optimum is the VI approximation of this density;
``docs/vi.md``). Algorithms that want per-datum scales divide by N_eff themselves, so a
step size means the same per datum with or without the discount.

Parameters: only the selected (``bayesian=``) parameters and the likelihood's own
parameters are random; they are passed around as a ``dict[str, Tensor]``. All other
parameters and all buffers are deterministic: they are read from the module (not
copied, so a frozen pretrained backbone costs no extra memory; do not train the module
while a BayesianModel uses it). ``init_params`` returns the module's values at build
time; seeds change data order and algorithm noise, not this starting point (initialise
the module under ``torch.manual_seed`` for different starts, or draw one with
``random_init(generator)`` as deep ensembles do).

Buffers (BatchNorm statistics): ``buffers="frozen"`` (default) puts the module in
eval mode; normalisation layers use their stored statistics, dropout is off, and no
buffer ever changes. ``buffers="batch_stats"`` runs in train mode (batch statistics)
on a copy of the buffers, so stored statistics still never change. Prefer
normalisation without batch statistics (FRN, LayerNorm) for samplers.
"""

from __future__ import annotations

from copy import deepcopy as copy_module
from typing import Any, Literal

import torch
from torch import Tensor, nn

from bdlkit.core.distributed import Topology
from bdlkit.core.errors import InputError
from bdlkit.core.value_range import UPPER_BOUNDS, positive_problem
from bdlkit.problems.data_parallel import ShardReducer
from bdlkit.problems.inputs import InputContract
from bdlkit.problems.likelihoods import PREFIX, Likelihood, make_likelihood
from bdlkit.problems.oracles import (
    FlatModuleOracle,
    functional_value_and_score,
    module_value_and_score,
)
from bdlkit.problems.precision import autocast_call, check_precision
from bdlkit.problems.priors import IsotropicGaussian, make_prior
from bdlkit.problems.select import Selection, select_parameters

Params = dict[str, Tensor]


class BayesianModel:
    """A network posterior ``π(θ | D) ∝ p(θ) Π p(y_i | x_i, θ)`` (tempered by ``1/T``).

    Args:
        module: any ``nn.Module`` mapping inputs to outputs (logits, means, ...).
        likelihood: a name, the same as ``bdlkit fit --likelihood`` takes:
            ``"categorical"``, ``"bernoulli"``, ``"gaussian"`` (σ learned with the
            weights), ``"gaussian:0.1"`` (σ fixed) or ``"heteroscedastic"`` (the network
            outputs a mean and a σ per target), see
            :func:`~bdlkit.problems.likelihoods.make_likelihood`; or a
            :class:`~bdlkit.problems.likelihoods.Likelihood`.
        prior: the prior std σ0 of an isotropic Gaussian, or an
            :class:`~bdlkit.problems.priors.IsotropicGaussian` (e.g. with
            ``mean="init"`` for pretrained weights).
        num_data: N, the number of training examples the likelihood is scaled to.
        temperature: T > 0; T < 1 gives a cold posterior. Like ``prior``'s σ0 it is in
            [1e-15, 1e15], bdlkit's range of float values (:mod:`bdlkit.core.value_range`).
        kld: the KL discount in (0, 1] (at least 1e-15): the likelihood is weighted by
            1/kld, the prior is not (1e-3 is BayesDLL's MNIST protocol; default 1, the
            posterior itself).
        bayesian: which parameters are random (see :mod:`bdlkit.problems.select`).
        buffers: ``"frozen"`` or ``"batch_stats"`` (module docstring).
        oracle: ``"functional"`` (torch.func, default) or ``"module"`` (writes θ into
            the module and calls ``backward()``; for huge or distributed models).
        precision: the network's forward pass, ``"fp32"`` (default), ``"bf16"`` or
            ``"fp16"`` (autocast; outputs cast back to the parameters' dtype before the
            likelihood: :mod:`bdlkit.problems.precision`).
    """

    def __init__(
        self,
        module: nn.Module,
        likelihood: str | Likelihood = "categorical",
        prior: float | IsotropicGaussian = 1.0,
        num_data: int | None = None,
        temperature: float = 1.0,
        bayesian: Selection = "all",
        *,
        kld: float = 1.0,
        buffers: Literal["frozen", "batch_stats"] = "frozen",
        oracle: Literal["functional", "module"] = "functional",
        precision: str = "fp32",
    ) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if num_data is None or int(num_data) != num_data or num_data < 1:
            raise ValueError(f"num_data must be a positive integer (N), got {num_data!r}")
        if problem := positive_problem(temperature):
            raise ValueError(f"temperature {problem}")
        check_kld(kld)
        if buffers not in ("frozen", "batch_stats"):
            raise ValueError(f"buffers must be 'frozen' or 'batch_stats', got {buffers!r}")
        if oracle not in ("functional", "module"):
            raise ValueError(f"oracle must be 'functional' or 'module', got {oracle!r}")
        self.module = module
        self.likelihood = make_likelihood(likelihood)
        self.prior = make_prior(prior)
        self.num_data = int(num_data)
        self.temperature = float(temperature)
        self.kld = float(kld)
        self.buffers = buffers
        self.oracle = oracle
        self.reducer: ShardReducer | None = None  # data parallel: set by shard_over
        #: the per-example shape and dtype of the data last validated (what a Result checks
        #: its inputs against); None until :meth:`validate_data`
        self.example_inputs: InputContract | None = None
        self.precision = check_precision(precision)
        self.bayesian_names = select_parameters(module, bayesian)
        clash = [n for n, _ in module.named_parameters() if n.startswith(PREFIX)]
        if clash:
            raise ValueError(
                f"module parameters {clash[:3]} start with {PREFIX!r}, which bdlkit reserves for "
                "likelihood parameters; rename that submodule"
            )
        module.train(buffers == "batch_stats")
        self._read_module()
        self._initial = self._snapshot()
        self.prior.bind(self._initial)

    def _read_module(self) -> None:
        """The deterministic parameters and buffers, read from the module (not copied)."""
        named = dict(self.module.named_parameters())
        self.fixed: Params = {
            n: p.detach() for n, p in named.items() if n not in set(self.bayesian_names)
        }
        self.buffer_values: Params = {n: b.detach() for n, b in self.module.named_buffers()}

    @property
    def device(self) -> torch.device:
        """Where the parameters live (what :meth:`to` moved them to); batches follow it."""
        return next(iter(self._initial.values())).device

    def to(self, device: torch.device | str) -> BayesianModel:
        """Move the module (in place, as ``nn.Module.to``), the initial parameters and the
        prior's means to ``device``; returns ``self``. A no-op on the current device."""
        device = torch.device(device)
        if device == self.device:
            return self
        self.module.to(device)
        self._read_module()
        self._initial = {k: v.to(device) for k, v in self._initial.items()}
        self.prior.bind(self._initial)
        return self

    def __repr__(self) -> str:
        return (
            f"BayesianModel({type(self.module).__name__}, likelihood={self.likelihood!r}, "
            f"prior={self.prior!r}, num_data={self.num_data}, temperature={self.temperature}, "
            + (f"kld={self.kld:g}, " if self.kld != 1.0 else "") +
            f"bayesian={len(self.bayesian_names)} tensors / {self.num_params} values"
            + (f", precision={self.precision}" if self.precision != "fp32" else "") + ")"
        )

    # ----------------------------------------------------------------- parameters
    def _snapshot(self, module: nn.Module | None = None) -> Params:
        named = dict((module or self.module).named_parameters())
        params = {n: named[n].detach().clone() for n in self.bayesian_names}
        first = next(iter(params.values()))
        # the likelihood's parameters (a learned log σ) live with the network's
        params.update({k: v.to(first.device) for k, v in
                       self.likelihood.init_params(first.dtype).items()})
        return params

    @property
    def effective_num_data(self) -> float:
        """The number of examples the likelihood counts, N_eff = N/kld (module docstring),
        which every per-datum scale divides by."""
        return self.num_data / self.kld

    @property
    def num_params(self) -> int:
        return sum(t.numel() for t in self._initial.values())

    def init_params(self, generator: torch.Generator | None = None) -> Params:
        """The Bayesian parameters' values when the model was built (a fresh copy)."""
        return {k: v.clone() for k, v in self._initial.items()}

    def random_init(self, generator: torch.Generator) -> Params:
        """A fresh draw from the module's own initialisers (deep ensembles' members 1..M-1).

        A deep copy of the module gets ``init_params()``'s values, then, under a private
        RNG seeded from ``generator``, its root ``reset_parameters()`` if it defines one, else
        every submodule's ``reset_parameters()`` in ``modules()`` order. Parameters that no
        ``reset_parameters`` touches keep their ``init_params`` value: FRN's gamma/beta/tau,
        ViT's ``cls_token``/``pos_embed``. A root ``reset_parameters`` should repeat the
        constructor's initialisation, as the zoo's ResNet-FRN (zero head, FRN constants) and
        ``ConvNet`` (PyTorch or Haiku-style) do, so that every member is drawn from the same
        distribution as the module itself. Same names, shapes, dtypes and devices as
        ``init_params``; the likelihood's parameters are their initial values. Costs one
        temporary copy of the module.
        """
        seed = int(torch.randint(0, 2**62, (), generator=generator, device=generator.device))
        copy = copy_module(self.module)
        named = dict(copy.named_parameters())
        cuda = sorted({p.device.index or 0 for p in named.values() if p.device.type == "cuda"})
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            for name in self.bayesian_names:
                named[name].copy_(self._initial[name])
            torch.default_generator.manual_seed(seed)  # only the RNGs forked above
            for index in cuda:
                torch.cuda.default_generators[index].manual_seed(seed)
            if callable(getattr(copy, "reset_parameters", None)):
                copy.reset_parameters()
            else:
                for sub in copy.modules():
                    if callable(getattr(sub, "reset_parameters", None)):
                        sub.reset_parameters()
        return self._snapshot(copy)

    @staticmethod
    def split(params: Params) -> tuple[Params, Params]:
        """Split into network parameters and likelihood parameters."""
        net = {k: v for k, v in params.items() if not k.startswith(PREFIX)}
        lik = {k: v for k, v in params.items() if k.startswith(PREFIX)}
        return net, lik

    # ----------------------------------------------------------------- densities
    def forward(self, params: Params, x: Tensor) -> Tensor:
        """Network outputs at ``params`` (functional; the module is not modified)."""
        net, _ = self.split(params)
        buffers = self.buffer_values
        if self.buffers == "batch_stats":
            buffers = {k: v.clone() for k, v in buffers.items()}
        values = {**self.fixed, **buffers, **net}
        return autocast_call(lambda: torch.func.functional_call(self.module, values, (x,)),
                             self.precision, x.device.type, self.param_dtype)

    @property
    def param_dtype(self) -> torch.dtype:
        """The parameters' dtype (a mixed-precision forward pass casts its outputs to it)."""
        return next(iter(self._initial.values())).dtype

    def log_likelihood(self, params: Params, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Per-example ``log p(y_i | x_i, θ)``, shape ``(|B|,)``."""
        x, y = batch
        _, lik = self.split(params)
        return self.likelihood.log_prob(self.forward(params, x), y, lik)

    def log_prior(self, params: Params) -> Tensor:
        return self.prior.log_prob(params)

    def combine(self, sum_loglik: Tensor, batch_size: int, log_prior: Tensor) -> Tensor:
        """The minibatch convention: ``(1/T)[(N_eff/|B|)·Σ loglik + log prior]``."""
        return (self.effective_num_data / batch_size * sum_loglik + log_prior) / self.temperature

    def log_posterior(self, params: Params, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Unbiased minibatch estimate of ``log π_T(θ | D)`` (up to a constant)."""
        loglik = self.log_likelihood(params, batch)
        return self.combine(loglik.sum(), loglik.shape[0], self.log_prior(params))

    @torch.compiler.disable
    def value_and_score(
        self, params: Params, batch: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Params]:
        """``(log_posterior, ∇ log_posterior)`` with the configured oracle (eager inside a
        compiled step, :mod:`bdlkit.engine.compiled`: the module path swaps parameter
        storage, which a graph cannot trace, and a network's own compilation is separate)."""
        if self.reducer is not None and batch[1].shape[0] == 0:  # an empty shard weighs 0
            first = next(iter(params.values()))
            return self.reducer(first.new_zeros(()), {k: torch.zeros_like(v)
                                                      for k, v in params.items()}, 0)
        if self.oracle == "module":
            value, score = module_value_and_score(self, params, batch)
        else:
            value, score = functional_value_and_score(self.log_posterior, params, batch)
        if self.reducer is not None:  # this rank's shard -> the whole minibatch
            return self.reducer(value, score, batch[1].shape[0])
        return value, score

    def shard_over(self, topology: Topology) -> BayesianModel:
        """Make the oracle data parallel over ``topology``'s ranks (in place; returns
        ``self``): each call scores this rank's shard of the minibatch and all-reduces the
        estimate of the whole minibatch (:mod:`bdlkit.problems.data_parallel`). The
        runner calls it when it runs on several data-parallel ranks; ``topology`` alone
        (one rank) undoes it."""
        self.reducer = ShardReducer(topology) if topology.data_parallel else None
        return self

    def flat_oracle(self, names: tuple[str, ...], sizes: tuple[int, ...],
                    shapes: tuple[tuple[int, ...], ...]) -> FlatModuleOracle | None:
        """The oracle on one flat θ laid out as ``names`` (:class:`FlatModuleOracle`), or
        None where it does not apply (then flat storage calls :meth:`value_and_score` on
        views): with ``oracle="module"`` (kept for DDP/FSDP, checkpointing: its own path),
        a subclass that overrides a density method, batch statistics, another prior, or a
        random tensor that is not a module parameter requiring grad (a likelihood's)."""
        named = dict(self.module.named_parameters())
        own = all(getattr(type(self), m) is getattr(BayesianModel, m) for m in _DENSITY_METHODS)
        applies = (self.oracle == "functional" and own and self.buffers == "frozen"
                   and type(self.prior) is IsotropicGaussian
                   and all(n in named and named[n].requires_grad for n in names))
        return FlatModuleOracle(self, names, sizes, shapes) if applies else None

    # ----------------------------------------------------------------- prediction
    @torch.no_grad()
    def predictive(self, params: Params, x: Tensor) -> Any:
        """Predictive distribution of one draw: class probabilities or mean/variance."""
        _, lik = self.split(params)
        return self.likelihood.predictive(self.forward(params, x), lik)

    def log_predictive(self, params: Params, x: Tensor) -> Tensor:
        """Log class probabilities ``(n, K)`` of one draw (classification likelihoods)."""
        _, lik = self.split(params)
        return self.likelihood.log_predictive(self.forward(params, x), lik)

    # ----------------------------------------------------------------- validation
    def validate_data(self, data: Any) -> None:
        """Check inputs, targets and the network's outputs before any training step; raise
        ``ValueError`` (an :class:`~bdlkit.core.errors.InputError` for a network that
        returns no floating tensor). Records the inputs' per-example shape and dtype in
        ``example_inputs``, which a :class:`~bdlkit.Result` checks its inputs against.

        ``data`` is a :class:`~bdlkit.data.Dataset`, an ``(x, y)`` pair of tensors or a
        ``DataLoader`` (then its first batch is checked).
        """
        x, y = _as_pair(data)
        if not isinstance(x, Tensor) or not isinstance(y, Tensor):
            raise ValueError(f"data must hold tensors, got {type(x).__name__}, {type(y).__name__}")
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"inputs and targets disagree in length: x has {x.shape[0]} rows, y has "
                f"{y.shape[0]}"
            )
        if x.shape[0] == 0:
            raise ValueError("the training data is empty")
        if y.dtype.is_floating_point:
            _check_finite("targets y", y)
        if x.dtype.is_floating_point:  # integer inputs (token ids) are passed through as is
            _check_finite("inputs x", x)
            dtype = next(iter(self._initial.values())).dtype
            if x.dtype != dtype:
                raise ValueError(
                    f"inputs are {x.dtype} but the model's parameters are {dtype}; "
                    f"convert with x.to({dtype})"
                )
        try:
            outputs = self.forward(self._initial, x[:2].to(self.device))
        except RuntimeError as err:
            raise ValueError(
                f"the network cannot take inputs of shape {tuple(x.shape[1:])} per example: {err}"
            ) from err
        network = type(self.module).__name__
        if not isinstance(outputs, Tensor):
            raise InputError(f"the network {network} returns a {type(outputs).__name__}, not "
                             "a tensor: its forward must return the outputs (logits, means) "
                             "as one torch.Tensor")
        if not outputs.dtype.is_floating_point:
            raise InputError(f"the network {network} returns {outputs.dtype} outputs; the "
                             "likelihood needs floating outputs (logits, means) to "
                             "differentiate: return them as floats (drop the integer cast "
                             "or rounding in its forward)")
        # every target is checked against the output shape of one example (cheap)
        self.likelihood.check_targets(y, outputs[:1].expand(y.shape[0], *outputs.shape[1:]))
        self.example_inputs = InputContract.of(x)


#: the methods whose override rules out the flat oracle (it computes them itself)
_DENSITY_METHODS = ("forward", "log_likelihood", "log_prior", "combine", "log_posterior",
                    "value_and_score")


def check_kld(kld: Any) -> None:
    """Refuse a KL discount outside (0, 1] with the option, the range and what it means."""
    problem = positive_problem(kld, *UPPER_BOUNDS["kld"])
    if problem:
        raise ValueError(f"kld {problem}")


def _as_pair(data: Any) -> tuple[Any, Any]:
    if data is None:
        raise ValueError("a BayesianModel needs training data: pass data=(x, y) or a Dataset")
    if hasattr(data, "x_train") and hasattr(data, "y_train"):
        return data.x_train, data.y_train
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    if isinstance(data, torch.utils.data.DataLoader):
        first = next(iter(data), None)
        if first is None:
            raise ValueError("the DataLoader yields no batches")
        return _as_pair(first)
    raise ValueError(
        f"cannot read training data from {type(data).__name__}; pass (x, y), a Dataset or a DataLoader"
    )


def _check_finite(what: str, t: Tensor) -> None:
    bad = ~torch.isfinite(t.reshape(t.shape[0], -1)).all(-1)
    if bad.any():
        rows = bad.nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"{what} contain NaN or inf in {int(bad.sum())} rows (first: {rows}); "
            "clean or impute them before inference"
        )
