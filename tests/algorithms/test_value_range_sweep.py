"""Issue 45 item 1: no value bdlkit's one range of float values allows
(:mod:`bdlkit.core.value_range`: 0 or a magnitude in [1e-15, 1e15]) reaches a kernel that
overflows. Every registered method runs 2 steps on tiny data in-process with its step size,
the temperature, the prior scale, the KL discount and a fixed σ at the ends of the range
(alone and at the corners where they multiply): each run ends normally or in bdlkit's NaN
stop (:class:`~bdlkit.NonFiniteError`), never in another exception (before: ``RuntimeError:
value cannot be converted to type float without overflow`` from ``torch.add(...,
alpha=lr·T/N)``, ``OverflowError`` from ``1/scale²``). The shipped defaults lie in the range.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.algorithms import METHODS, get_method
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.value_range import HIGH, LOW
from bdlkit.runs.config import method_options

X = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
LABELS = (X[:, 0] > 0).long()
TARGETS = X[:, :1] * 2
#: options that keep each method's two steps small (and mc_dropout's sites: a rate)
SMALL = {"mc_dropout": {"rate": 0.05}, "ensemble": {"members": 2}, "hmc": {"num_leapfrog": 2},
         "bam": {"num_samples": 2}, "gsm": {"num_samples": 2}, "nuts": {"max_tree_depth": 2}}
VARIANTS = [(m, {}) for m in sorted(METHODS)] + [("score_vi", {"solver": "closed_form"})]
#: (step size, temperature, prior scale, kld): each at an end alone, then the corners where
#: they multiply (1/(σ0²·T), lr·T/N·1/kld)
CASES = [(LOW, 1, 1, 1), (HIGH, 1, 1, 1), (None, LOW, 1, 1), (None, HIGH, 1, 1),
         (None, 1, LOW, 1), (None, 1, HIGH, 1), (None, 1, 1, LOW), (LOW, LOW, LOW, LOW),
         (HIGH, LOW, LOW, LOW), (HIGH, HIGH, HIGH, 1), (LOW, HIGH, HIGH, LOW)]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: milliseconds per run


def _step_option(method: str) -> str | None:
    """The method's step-size option (what the NaN stop names), if it has one."""
    knob = get_method(method).ALGORITHM.step_size_param
    knob = knob if isinstance(knob, str) else "lr"  # score_vi's depends on its solver
    options = method_options(method)
    if knob in options:
        return knob
    return "lam_scale" if "lam_scale" in options else None  # bam's λ_t factor; gsm: none


def _ends_normally_or_in_the_nan_stop(method: str, hyper: dict, likelihood: str = "categorical",
                                      temperature: float = 1.0, prior: float = 1.0,
                                      kld: float = 1.0) -> None:
    torch.manual_seed(0)
    model = bdlkit.BayesianModel(nn.Sequential(nn.Linear(2, 2 if likelihood == "categorical"
                                                         else 1)), likelihood, prior=prior,
                                 num_data=8, temperature=temperature, kld=kld)
    y = LABELS if likelihood == "categorical" else TARGETS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            bdlkit.infer(model, method, data=(X, y), steps=2, batch_size=4, progress=False,
                         **{**SMALL.get(method, {}), **hyper})
        except NonFiniteError:
            pass  # the NaN stop: bdlkit's answer to a step that diverged


@pytest.mark.parametrize("method, base", VARIANTS,
                         ids=[m + ("/" + "".join(b.values()) if b else "") for m, b in VARIANTS])
def test_extreme_values_end_normally_or_in_the_nan_stop(method, base):
    knob = _step_option(method)
    for step, temperature, prior, kld in CASES:
        if step is not None and knob is None:
            continue
        hyper = {**base, **({} if step is None else {knob: step})}
        _ends_normally_or_in_the_nan_stop(method, hyper, temperature=temperature,
                                          prior=prior, kld=kld)
    for sigma in (LOW, HIGH):  # a fixed σ of a Gaussian likelihood
        _ends_normally_or_in_the_nan_stop(method, base, likelihood=f"gaussian:{sigma!r}")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_shipped_default_is_in_the_range(method):
    for option in method_options(method).values():
        for default in (option.default, *option.by_kind.values()):
            assert option.range_problem(default) is None, (method, option.name, default)


@pytest.mark.parametrize("method", ["sgld", "sghmc", "ivon", "hmc"])
def test_build_refuses_a_step_size_out_of_the_range(method):
    problem = bdlkit.BayesianModel(nn.Linear(2, 2), "categorical", num_data=8)
    knob = _step_option(method)
    for value in (1e308, 1e-300, -1e16):
        with pytest.raises(ValueError, match=rf"{knob} must be .*\[1e-15, 1e15\].*got"):
            get_method(method).build(problem, **{knob: value})
