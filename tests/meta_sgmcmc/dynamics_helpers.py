"""Meta-SGMCMC problems and meta-parameters shared by test_dynamics.py and
test_meta_params_refused.py (``from dynamics_helpers import ...``)."""

import torch

import bdlkit
from bdlkit.meta_sgmcmc import dynamics as dyn
from bdlkit.meta_sgmcmc import init_meta_params

F64 = torch.float64


def gaussian_target():
    """N(m, Σ) in 3-D, float64, m away from the origin."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 3, generator=g, dtype=F64)
    prec = torch.linalg.inv(a @ a.T + 3 * torch.eye(3, dtype=F64))
    mean = torch.tensor([1.0, -2.0, 0.5], dtype=F64)

    def log_prob(th):
        z = th - mean
        return -0.5 * ((z @ prec) * z).sum(-1)

    return bdlkit.Target(log_prob, dim=3, dtype=F64)


def sghmc_meta(b: float) -> dict[str, torch.Tensor]:
    """Random first layers, but Q_f ≡ 1 (q_w1 = 0, q_b1 = 1) and f_D ≡ b (d_w1 = 0)."""
    meta = init_meta_params(torch.Generator().manual_seed(3), F64)
    meta["q_w1"] = torch.zeros(dyn.HIDDEN, 1, dtype=F64)
    meta["q_b1"] = torch.ones(1, dtype=F64)
    meta["d_w1"] = torch.zeros(dyn.HIDDEN, 1, dtype=F64)
    meta["d_b1"] = torch.full((1,), b, dtype=F64)
    return meta


def random_meta(seed: int) -> dict[str, torch.Tensor]:
    """Random float64 meta-parameters with non-zero biases (so that no unit is switched off
    for every input and the biases matter)."""
    gen = torch.Generator().manual_seed(seed)
    meta = init_meta_params(gen, F64)
    for k in ("q_b0", "q_b1", "d_b0", "d_b1"):
        meta[k] = 0.3 * torch.randn(meta[k].shape, generator=gen, dtype=F64)
    return meta
