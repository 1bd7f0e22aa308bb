"""Inference algorithms, one per file, each with ``build(problem, **hyper)``.

``METHODS`` maps a method name to its module. A method module declares ``ALGORITHM``
(its frozen dataclass, deriving from one of the kinds in :mod:`bdlkit.core.protocol`), ``KIND``
and ``build`` (usually ``options.builder(ALGORITHM)``). :func:`register` checks those
declarations once, when the method is added: a new method is one new file plus one
``register`` line here (``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import sys
from types import ModuleType

from bdlkit.algorithms.mcmc import hmc, nuts
from bdlkit.algorithms.options import problem_defaults_errors, undocumented
from bdlkit.algorithms.point import ensemble
from bdlkit.algorithms.point import map as map_
from bdlkit.algorithms.sgmcmc import csghmc, csgld, l2e, meta_sgmcmc, psgld, sghmc, sgld
from bdlkit.algorithms.vi import advi, bam, fisher_vi, gsm, ivon, mc_dropout, score_vi
from bdlkit.core.errors import InputError
from bdlkit.core.protocol import KINDS, AlgorithmBase, EnsembleBase, Variational

METHODS: dict[str, ModuleType] = {}
DESCRIPTIONS: dict[str, str] = {}


def register(name: str, module: ModuleType, description: str) -> None:
    """Add method ``name`` implemented by ``module`` after checking its declarations
    (:func:`declaration_errors`); it is then ``bdlkit.algorithms.<name>``, as a module
    path too (``from bdlkit.algorithms.<name> import ...``)."""
    where = f"method {name!r} ({module.__name__})"
    if name in METHODS:
        raise ValueError(f"{where}: a method named {name!r} is already registered")
    errors = declaration_errors(name, module)
    if errors:
        raise TypeError(f"{where}: " + "; ".join(errors))
    METHODS[name] = module
    DESCRIPTIONS[name] = description
    setattr(sys.modules[__name__], name, module)
    sys.modules.setdefault(f"{__name__}.{name}", module)


def declaration_errors(name: str, module: ModuleType) -> list[str]:
    """What is wrong with ``module`` as method ``name`` (empty when nothing is):
    ``ALGORITHM`` is a frozen dataclass deriving from a kind of
    :mod:`bdlkit.core.protocol` with ``init``, ``step`` and ``params`` and a ``name``
    defaulting to ``name``; the capabilities it declares have their methods (``keep`` for
    ``chooses_draws``, ``approximation`` for a Variational, ``member_stack`` for an
    ensemble, ``flat_twin`` for ``flat_storage``); ``KIND`` is its kind;
    ``build(problem, ...)`` exists; every option has a line in the class's ``Args:``
    section; ``problem_defaults`` names known problem kinds and the class's options."""
    cls = getattr(module, "ALGORITHM", None)  # the registration check itself
    if not (isinstance(cls, type) and issubclass(cls, AlgorithmBase)):
        return ["ALGORITHM must be a class deriving from bdlkit.core.protocol.Sampler, "
                "Optimizer, Variational or EnsembleBase"]
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
        return [f"{cls.__name__} must be a frozen dataclass"]
    errors = [f"{cls.__name__} lacks {m}" for m in ("init", "step", "params")
              if not callable(getattr(cls, m, None))]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if "name" not in fields or fields["name"].default != name:
        errors.append(f"{cls.__name__}.name must default to {name!r}")
    for declared, method, base in ((cls.chooses_draws, "keep", AlgorithmBase),
                                   (issubclass(cls, Variational), "approximation", Variational),
                                   (issubclass(cls, EnsembleBase), "member_stack", EnsembleBase)):
        if declared and getattr(cls, method) is getattr(base, method):
            errors.append(f"{cls.__name__} declares what needs {method}() but does not define it")
    if cls.flat_storage is not AlgorithmBase.flat_storage and not callable(
            getattr(cls, "flat_twin", None)):
        errors.append(f"{cls.__name__} declares flat_storage but does not define flat_twin() "
                      "(derive it from bdlkit.algorithms.storage.FlatStorage)")
    kind = getattr(module, "KIND", None)
    if kind not in KINDS or kind != cls.kind:
        errors.append(f"KIND={kind!r} must be {cls.kind!r} (one of {KINDS})")
    build = getattr(module, "build", None)
    if not callable(build) or next(iter(inspect.signature(build).parameters), "") != "problem":
        errors.append("build(problem, **hyper) is missing")
    if undocumented(cls):
        errors.append(f"options without a line in {cls.__name__}'s Args: section: "
                      f"{', '.join(undocumented(cls))}")
    return errors + problem_defaults_errors(cls)


def unregister(name: str) -> None:
    """Remove method ``name`` (for tests and plug-ins that registered one)."""
    module = get_method(name)
    del METHODS[name], DESCRIPTIONS[name]
    delattr(sys.modules[__name__], name)
    if sys.modules.get(f"{__name__}.{name}") is module:
        del sys.modules[f"{__name__}.{name}"]


register("map", map_, "MAP point estimate with Adam or SGD (a deterministic baseline)")
register("sgld", sgld, "stochastic gradient Langevin dynamics (Welling & Teh 2011)")
register("psgld", psgld, "preconditioned (RMSprop) SGLD (Li et al. 2016)")
register("sghmc", sghmc, "stochastic gradient HMC, SGD-with-momentum form (Chen et al. 2014)")
register("csghmc", csghmc,
         "cyclical SGHMC: cosine cycles, noise and draws at cycle ends (Zhang et al. 2020)")
register("csgld", csgld, "cyclical SGLD (Zhang et al. 2020)")
register("l2e", l2e,
         "learning to explore: SG-MCMC with a meta-learned kinetic energy (Kim et al. 2024)")
register("meta_sgmcmc", meta_sgmcmc,
         "Meta-SGMCMC: SGHMC with meta-learned curl and diffusion networks (Gong et al. 2019)")
register("ensemble", ensemble,
         "deep ensemble: independently initialised MAP members (Lakshminarayanan 2017)")
register("mc_dropout", mc_dropout,
         "MC dropout: dropout training, a dropout mask per predictive draw (Gal 2016)")
register("hmc", hmc,
         "full-batch HMC, MH-corrected, dual averaging (Neal 2011; Izmailov et al. 2021)")
register("nuts", nuts,
         "No-U-Turn sampler via Pyro (Hoffman & Gelman 2014): full batch, CPU reference")
register("score_vi", score_vi,
         "proximal SG score-based VI, diagonal Gaussian (SSM-prox; Kim 2026)")
register("advi", advi, "mean-field ADVI, reparameterised ELBO (Kucukelbir et al. 2017)")
register("ivon", ivon, "IVON, variational online Newton with a Price curvature (Shen et al. 2024)")
register("fisher_vi", fisher_vi,
         "reparameterised Fisher-divergence VI (needs Hessian-vector products)")
register("gsm", gsm, "Gaussian score matching, full or diagonal covariance (Modi et al. 2023)")
register("bam", bam, "batch and match, full, low-rank or diagonal covariance (Cai et al. 2024)")


def kind_of(name: str) -> str:
    """``"optimizer"``, ``"sampler"``, ``"vi"`` or ``"ensemble"``: what ``name`` produces."""
    return get_method(name).KIND


def get_method(name: str) -> ModuleType:
    """The module implementing ``name``; an unknown name is an :class:`InputError` (a
    ``ValueError``) suggesting the closest method and listing the valid ones."""
    if name not in METHODS:
        close = difflib.get_close_matches(str(name), list(METHODS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"unknown method {name!r}{hint}; valid methods: "
                         f"{', '.join(sorted(METHODS))}")
    return METHODS[name]
