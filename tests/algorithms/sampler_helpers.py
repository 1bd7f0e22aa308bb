"""What the sampler tests share: a correlated Gaussian Target far from the origin (float64),
Gaussian KL, and the two statistical checks every sampler must pass (issue [sgmcmc]):

1. moment recovery: the draws' mean and covariance are close to the target's, and the KL of
   the draws' Gaussian fit to the target is below 1 % of the KL of the starting points'
   Gaussian fit;
2. preservation: started from exact draws, the chains still have the target's marginals
   (Kolmogorov-Smirnov test per coordinate).
"""

import torch
from scipy import stats

import bdlkit

F64 = torch.float64


def correlated_target(d: int = 3, seed: int = 0):
    """N(m, Σ) with Σ = D R D (correlations up to ~0.6, stds in [0.7, 1.5]) and m ≈ 3 away from
    the origin, so that a start at N(0, I) has a large KL; returns (target, m, Σ)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    r = a @ a.T + d * torch.eye(d, dtype=F64)
    s = r.diagonal().rsqrt()
    corr = s[:, None] * r * s[None, :]
    std = 0.7 + 0.8 * torch.rand(d, generator=g, dtype=F64)
    cov = std[:, None] * corr * std[None, :]
    mean = 3.0 * torch.randn(d, generator=g, dtype=F64).sign()
    prec = torch.linalg.inv(cov)

    def log_prob(th):
        z = th - mean
        return -0.5 * ((z @ prec) * z).sum(-1)

    target = bdlkit.Target(log_prob, dim=d, name=f"gauss{d}", dtype=F64,
                           reference=bdlkit.problems.Reference(mean=mean, cov=cov))
    return target, mean, cov


def gaussian_kl(m0, s0, m1, s1) -> float:
    """KL(N(m0, s0) ‖ N(m1, s1))."""
    d = len(m0)
    l1 = torch.linalg.cholesky(s1)
    sol = torch.cholesky_solve(s0, l1)
    diff = (m1 - m0).unsqueeze(-1)
    maha = (diff.T @ torch.cholesky_solve(diff, l1)).item()
    logdet = 2 * l1.diagonal().log().sum() - torch.linalg.slogdet(s0)[1]
    return 0.5 * (sol.trace().item() + maha - d + logdet.item())


def fit_kl(draws, mean, cov) -> float:
    """KL of the Gaussian fit of ``draws`` (n, d) to N(mean, cov)."""
    return gaussian_kl(draws.mean(0), torch.cov(draws.T), mean, cov)


def assert_recovers(draws, start, mean, cov, *, mean_tol=0.1, cov_tol=0.12, kl_frac=0.01):
    """Moment recovery (module docstring); tolerances in target stds / relative covariance."""
    draws, start = draws.double(), start.double()
    std = cov.diagonal().sqrt()
    err_mean = ((draws.mean(0) - mean) / std).abs().max().item()
    emp = torch.cov(draws.T)
    err_cov = ((emp - cov) / (std[:, None] * std[None, :])).abs().max().item()
    kl0, kl = fit_kl(start, mean, cov), fit_kl(draws, mean, cov)
    assert err_mean < mean_tol, f"mean off by {err_mean:.3f} stds"
    assert err_cov < cov_tol, f"covariance off by {err_cov:.3f} (relative to std_i std_j)"
    assert kl < kl_frac * kl0, f"KL {kl:.4f} not below {kl_frac} x initial KL {kl0:.2f}"
    return {"err_mean": err_mean, "err_cov": err_cov, "kl": kl, "kl0": kl0}


def exact_draws(mean, cov, n, seed=0):
    """``n`` exact draws of N(mean, cov), shape (n, d)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, len(mean), generator=g, dtype=F64)
    return mean + z @ torch.linalg.cholesky(cov).T


def assert_marginals_preserved(draws, mean, cov, *, alpha=1e-3):
    """KS test of every marginal of ``draws`` (n, d) against the target (Bonferroni over d).

    The draws should be (nearly) independent: take one draw per chain, or thin."""
    draws = draws.double()
    std = cov.diagonal().sqrt()
    d = draws.shape[1]
    pvalues = [stats.kstest(((draws[:, i] - mean[i]) / std[i]).numpy(), "norm").pvalue
               for i in range(d)]
    assert min(pvalues) > alpha / d, f"KS p-values {pvalues}"
    return pvalues


def stationary_check(alg_name, steps, chains=400, seed=0, d=3, **hyper):
    """Run ``alg_name`` from exact draws for ``steps`` steps; KS-test the final states."""
    target, mean, cov = correlated_target(d)
    start = exact_draws(mean, cov, chains, seed=seed + 100)
    res = bdlkit.infer(target, alg_name, steps=steps, init=start, seed=seed, burnin=steps - 1,
                       thin=1, **hyper)
    last = res.sample(chains)
    return assert_marginals_preserved(last, mean, cov)


def small_classifier(temperature: float = 1.0):
    """A float64 4-8-2 tanh classifier on 64 points (a BayesianModel, N(0, 1) prior) and its
    data (x, y): the minibatch problem of the SGHMC-family tests."""
    from torch import nn

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g, dtype=F64)
    y = (x[:, 0] > 0).long()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=64,
                                 temperature=temperature)
    return model, (x, y)
