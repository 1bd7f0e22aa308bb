"""Peer rows of the classification benches, run by the peer libraries themselves.

* ``ivon_opt``: IVON as ``ivon-opt`` (Shen et al. 2024; ``pip install ivon-opt``, GPL, a
  peer only: bdlkit's own ``ivon`` is written from the paper) in its own training loop:
  ``sampled_params(train=True)``, the mean cross-entropy of the minibatch, ``step()``;
  ess = N/(T·kld) and weight decay kld/(N σ0²), so it fits the same (discounted) posterior
  as the bdlkit rows; the cosine of bdlkit's schedule set on its learning rate; its BMA
  averages the softmax of ``EVAL_DRAWS`` ``sampled_params()`` draws.
* ``laplace``: the post-hoc Laplace approximation of ``laplace-torch`` (Daxberger et al.
  2021) on the MAP network of the same seed: last layer, Kronecker-factored GGN (its
  defaults), the likelihood's temperature kld (the discount), the prior precision fitted by
  its marginal likelihood (``optimize_prior_precision(method="marglik")``), a Monte Carlo
  predictive of the same number of draws. ``laplace-torch`` declares torchvision, which
  does not import beside the CPU torch wheel bdlkit pins; ``make install`` installs it and
  what it uses without dependencies (``requirements/peers-nodeps.txt``).

Both take bdlkit's data, minibatch size, number of steps and seed. A peer that is not
installed is a row whose ``status`` says so.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

PEERS = {"ivon_opt": "ivon", "laplace": "laplace"}  # row -> the module it needs


def missing(row: str) -> str | None:
    """Why peer ``row`` cannot run here (None when it can)."""
    module = PEERS[row]
    if importlib.util.find_spec(module) is None:
        package = {"ivon": "ivon-opt", "laplace": "laplace-torch"}[module]
        return f"{package} is not installed (make install, or pip install {package})"
    return None


def _batches(x: Tensor, y: Tensor, batch_size: int, steps: int, seed: int):
    """``steps`` minibatches of shuffled epochs (a seeded permutation per epoch)."""
    gen = torch.Generator().manual_seed(seed)
    done = 0
    while done < steps:
        perm = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), batch_size):
            if done == steps:
                return
            idx = perm[start:start + batch_size]
            yield x[idx], y[idx]
            done += 1


def ivon_opt_fit(make_net: Callable[[], nn.Module], train: tuple[Tensor, Tensor], *,
                 steps: int, batch_size: int, seed: int, lr: float, hess_init: float,
                 prior_scale: float = 1.0, kld: float = 1.0, beta1: float = 0.9,
                 beta2: float = 0.99999) -> tuple[nn.Module, Any]:
    """The network trained by ivon-opt's own loop (module docstring) and its optimizer."""
    import ivon

    x, y = train
    n_eff = len(x) / kld
    net = make_net()
    opt = ivon.IVON(net.parameters(), lr=lr, ess=n_eff, hess_init=hess_init, beta1=beta1,
                    beta2=beta2, weight_decay=1.0 / (prior_scale ** 2 * n_eff))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # ivon-opt draws its noise from torch's global generator
        for t, (xb, yb) in enumerate(_batches(x, y, batch_size, steps, seed)):
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * t / steps))
            with opt.sampled_params(train=True):
                opt.zero_grad()
                F.cross_entropy(net(xb), yb).backward()
            opt.step()
    return net, opt


@torch.no_grad()
def ivon_opt_probs(net: nn.Module, opt: Any, x: Tensor, draws: int, seed: int) -> Tensor:
    """The BMA class probabilities of ``draws`` ivon-opt posterior draws."""
    total = torch.zeros(len(x), _out_features(net, x))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(draws):
            with opt.sampled_params():
                total += F.softmax(net(x), -1)
    return total / draws


def laplace_fit(net: nn.Module, train: tuple[Tensor, Tensor], *, batch_size: int,
                kld: float = 1.0) -> Any:
    """laplace-torch's last-layer KFAC Laplace on the trained ``net``, its prior precision
    fitted by the marginal likelihood (module docstring)."""
    from laplace import Laplace

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*train),
                                         batch_size=batch_size)
    la = Laplace(net, "classification", subset_of_weights="last_layer",
                 hessian_structure="kron", temperature=kld)
    la.fit(loader)
    la.optimize_prior_precision(method="marglik")
    return la


def laplace_probs(la: Any, x: Tensor, draws: int, seed: int) -> Tensor:
    """The Monte Carlo predictive of ``draws`` draws of a fitted Laplace at ``x``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return la(x, pred_type="glm", link_approx="mc", n_samples=draws).detach()


def _out_features(net: nn.Module, x: Tensor) -> int:
    return int(net(x[:1]).shape[-1])


__all__ = ["PEERS", "ivon_opt_fit", "ivon_opt_probs", "laplace_fit", "laplace_probs", "missing"]
