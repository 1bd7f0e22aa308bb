"""Inference algorithms, one per file, each with ``build(problem, **hyper)``.

``METHODS`` maps a method name to its module (which defines ``KIND`` and
``build``); later capabilities add files here.
"""

from __future__ import annotations

from types import ModuleType

from . import (
    advi,
    bam,
    csghmc,
    csgld,
    ensemble,
    fisher_vi,
    gsm,
    hmc,
    l2e,
    nuts,
    psgld,
    score_vi,
    sghmc,
    sgld,
)
from . import map as map_

METHODS: dict[str, ModuleType] = {
    "map": map_,
    "sgld": sgld,
    "psgld": psgld,
    "sghmc": sghmc,
    "csghmc": csghmc,
    "csgld": csgld,
    "l2e": l2e,
    "ensemble": ensemble,
    "hmc": hmc,
    "nuts": nuts,
    "score_vi": score_vi,
    "advi": advi,
    "fisher_vi": fisher_vi,
    "gsm": gsm,
    "bam": bam,
}
DESCRIPTIONS: dict[str, str] = {
    "map": "MAP point estimate with Adam or SGD (a deterministic baseline)",
    "sgld": "stochastic gradient Langevin dynamics (Welling & Teh 2011)",
    "psgld": "preconditioned (RMSprop) SGLD (Li et al. 2016)",
    "sghmc": "stochastic gradient HMC, SGD-with-momentum form (Chen et al. 2014)",
    "csghmc": "cyclical SGHMC: cosine cycles, noise and draws at cycle ends (Zhang et al. 2020)",
    "csgld": "cyclical SGLD (Zhang et al. 2020)",
    "l2e": "learning to explore: SG-MCMC with a meta-learned kinetic energy (Kim et al. 2024)",
    "hmc": "full-batch HMC, MH-corrected, dual averaging (Neal 2011; Izmailov et al. 2021)",
    "nuts": "No-U-Turn sampler via Pyro (Hoffman & Gelman 2014): full batch, CPU reference",
    "ensemble": "deep ensemble: independently initialised MAP members (Lakshminarayanan 2017)",
    "score_vi": "proximal SG score-based VI, diagonal Gaussian (SSM-prox; Kim 2026)",
    "advi": "mean-field ADVI, reparameterised ELBO (Kucukelbir et al. 2017)",
    "fisher_vi": "reparameterised Fisher-divergence VI (needs Hessian-vector products)",
    "gsm": "Gaussian score matching, full or diagonal covariance (Modi et al. 2023)",
    "bam": "batch and match, full, low-rank or diagonal covariance (Cai et al. 2024)",
}


def kind_of(name: str) -> str:
    """``"optimizer"``, ``"sampler"``, ``"vi"`` or ``"ensemble"``: what ``name`` produces."""
    return get_method(name).KIND


def get_method(name: str) -> ModuleType:
    """The module implementing ``name``; unknown names list the valid ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]
