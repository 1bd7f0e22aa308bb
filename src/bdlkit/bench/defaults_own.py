"""The ``defaults`` suite's own-module problems: a user's regression through ``bdlkit.infer``.

The other problems of :mod:`bdlkit.bench.defaults` run through ``bdlkit fit`` with a zoo
model. These are what a user writes in Python: a small data set in tensors, their own
``nn.Module`` and likelihood, and ``bdlkit.infer(model, method, data=(x, y), epochs=200)``
with no other option (the default batch size, 128). Each method's BMA is scored with
:func:`bdlkit.evaluate` on held-out points of the same distribution, against the training
mean's RMSE (the ``majority`` health check). A run that stops with
:class:`~bdlkit.NonFiniteError` is a failure (``health``: ``diverged``).

* ``hetero-300``: 300 points x ~ U(-2, 2), y = sin 3x + (0.05 + 0.3·|x|)·ε, a 1-50-50-2
  tanh network with ``Gaussian(heteroscedastic=True)`` (mean and σ per input);
* ``homo-300``: the same inputs with y = sin 3x + 0.02·ε (low noise), a 1-50-50-1 tanh
  network with a learned σ (``Gaussian(learn_noise=True)``).

With the SG-MCMC step sizes for classification (an SGD-equivalent step lr/α of 0.1), sgld
and csghmc diverged on ``hetero-300`` and sghmc and csghmc ended above the mean predictor's
RMSE on both; the regression defaults
(:data:`bdlkit.algorithms.sgmcmc.common.REGRESSION_LR`) exist for them.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from torch import nn

EPOCHS = 200
TRAIN, TEST = 300, 500
#: name -> (noise: "growing" with |x| or a fixed std, heteroscedastic likelihood)
OWN_PROBLEMS: dict[str, tuple[str | float, bool]] = {
    "hetero-300": ("growing", True),
    "homo-300": (0.02, False),
}


def own_data(name: str, seed: int = 0) -> Any:
    """Problem ``name``'s data set: ``TRAIN`` training and ``TEST`` test rows, x of shape
    ``(n, 1)`` and y of shape ``(n,)``, float32, drawn with ``seed``."""
    from bdlkit.data.dataset import Dataset

    noise, _ = OWN_PROBLEMS[name]
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(TRAIN + TEST, 1, generator=gen) * 4 - 2
    std = 0.05 + 0.3 * x[:, 0].abs() if noise == "growing" else torch.full_like(x[:, 0], noise)
    y = torch.sin(3 * x[:, 0]) + std * torch.randn(TRAIN + TEST, generator=gen)
    return Dataset(name=name, task="regression", x_train=x[:TRAIN], y_train=y[:TRAIN],
                   x_test=x[TRAIN:], y_test=y[TRAIN:], num_classes=None)


def own_model(name: str, seed: int = 0) -> Any:
    """Problem ``name``'s model: the user's tanh network (initialised under ``seed``) as a
    :class:`~bdlkit.BayesianModel` with the default prior."""
    import bdlkit
    from bdlkit.problems import Gaussian

    _, heteroscedastic = OWN_PROBLEMS[name]
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 50), nn.Tanh(),
                        nn.Linear(50, 2 if heteroscedastic else 1))  # (n, 2): mean and σ
    likelihood = (Gaussian(heteroscedastic=True) if heteroscedastic
                  else Gaussian(learn_noise=True))
    return bdlkit.BayesianModel(net, likelihood=likelihood, num_data=TRAIN)


def run_own(name: str, method: str, seed: int = 0, epochs: int = EPOCHS) -> dict[str, Any]:
    """One table row of :mod:`bdlkit.bench.defaults`: ``method`` with its defaults on
    problem ``name`` for ``epochs`` epochs."""
    import bdlkit
    from bdlkit.bench.defaults import row
    from bdlkit.core.errors import NonFiniteError
    from bdlkit.evaluation.health import trivial_baseline

    ds = own_data(name, seed)
    baseline = trivial_baseline(ds)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = bdlkit.infer(own_model(name, seed), method, data=(ds.x_train, ds.y_train),
                                  epochs=epochs, seed=seed)
        except NonFiniteError as err:
            return {"problem": name, "method": method, "metric": baseline[0], "value": None,
                    "baseline": baseline[1], "verdict": "fails", "nll": None,
                    "health": f"diverged: {str(err).split('.')[0]}",
                    "train_s": time.perf_counter() - start, "declared": []}
        values = bdlkit.evaluate(result, ds).metrics
    return row(name, method, values, baseline, caught, time.perf_counter() - start)
