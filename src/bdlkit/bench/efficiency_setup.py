"""What ``bench efficiency`` measures: its models, its methods and how each row is built.

Shared by the timing (:mod:`.efficiency_timing`), the memory probe
(:mod:`.efficiency_memory`, which rebuilds a row in a fresh interpreter) and the suite
(:mod:`.efficiency`), so that every part measures the same problem and the same
hyperparameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bdlkit import algorithms
from bdlkit import models as zoo
from bdlkit.bench import efficiency_peers as peers
from bdlkit.problems import BayesianModel

BATCH_SIZE = 128
NUM_DATA = 50_000
NUM_CLASSES = 10

#: model name -> (label, input shape, constructor)
MODEL_SPECS: dict[str, tuple[str, tuple[int, ...], Callable[[], torch.nn.Module]]] = {
    "mlp": ("MLP 784-256-256-10", (784,),
            lambda: zoo.MLP(784, NUM_CLASSES, hidden=(256, 256))),
    "resnet20_frn": ("ResNet20-FRN", (3, 32, 32),
                     lambda: zoo.resnet20_frn(num_classes=NUM_CLASSES)),
}
#: suite method name -> (registered method, hyperparameters); the VI rows draw S = 1
METHOD_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "sgd": ("map", {"optimizer": "sgd", "lr": 1e-3}),
    "score_vi": ("score_vi", {"num_samples": 1}),
    "advi": ("advi", {"num_samples": 1}),
    "ivon": ("ivon", {"mc_samples": 1}),
    "fisher_vi": ("fisher_vi", {"num_samples": 1}),
    "sgld": ("sgld", {}),
    "score_vi_flow": ("score_vi", {"num_samples": 1, "family": "flow"}),
    "advi_flow": ("advi", {"num_samples": 1, "family": "flow"}),
    "score_vi_spline": ("score_vi", {"num_samples": 1, "family": "spline"}),
    "advi_spline": ("advi", {"num_samples": 1, "family": "spline"}),
}
#: the run length that cyclical samplers' schedules are set up for
RUN_LENGTH = 1000
#: full-batch reference samplers, not timed by default (:func:`extra_samplers`)
FULL_BATCH = ("hmc", "nuts")


def registered(method: str) -> str:
    """The registered method behind suite row ``method``."""
    return METHOD_SPECS.get(method, (method, {}))[0]


def extra_samplers() -> list[str]:
    """Registered minibatch samplers the suite has no entry for (timed with default
    hyperparameters). The full-batch references (:data:`FULL_BATCH`) are left out: one of
    their steps is a whole trajectory, not comparable with a minibatch step."""
    known = {spec[0] for spec in METHOD_SPECS.values()}
    return [m for m in sorted(algorithms.METHODS)
            if m not in known and m not in FULL_BATCH and algorithms.kind_of(m) == "sampler"]


def problem_for(model_name: str, seed: int, dev: torch.device
                ) -> tuple[BayesianModel, tuple[torch.Tensor, torch.Tensor]]:
    """The model ``model_name`` (N(0, 1) prior, N = :data:`NUM_DATA`) and one fixed random
    batch of :data:`BATCH_SIZE` (inputs N(0, 1), uniform labels), both seeded."""
    _, shape, build_net = MODEL_SPECS[model_name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build_net().to(dev)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(BATCH_SIZE, *shape, generator=g).to(dev)
    y = torch.randint(0, NUM_CLASSES, (BATCH_SIZE,), generator=g).to(dev)
    return BayesianModel(net, "categorical", prior=1.0, num_data=NUM_DATA), (x, y)


def build(method: str, problem: BayesianModel, seed: int) -> tuple[Any, Any]:
    """``(row, state)``: a bdlkit method with the suite's hyperparameters, or a floor or
    peer row (:mod:`.efficiency_peers`); each has ``step(state, batch) -> (state, info)``."""
    if method in (*peers.FLOORS, *peers.PEERS):
        twin = peers.SETTINGS_OF.get(method)
        return peers.build(method, problem, seed, METHOD_SPECS[twin] if twin else None)
    name, hyper = METHOD_SPECS.get(method, (method, {}))
    # a schedule tied to the run length (cyclical samplers) as for a 1 000-step run
    algorithm = algorithms.get_method(name).build(problem, **hyper).for_run(RUN_LENGTH)
    return algorithm, algorithm.init(generator=torch.Generator().manual_seed(seed))


def run_steps(method: str, problem: BayesianModel, batch: Any, seed: int, steps: int) -> None:
    """Build row ``method`` afresh and run ``steps`` steps (the memory measurements)."""
    algorithm, state = build(method, problem, seed)
    for _ in range(steps):
        state, _ = algorithm.step(state, batch)


__all__ = ["BATCH_SIZE", "FULL_BATCH", "METHOD_SPECS", "MODEL_SPECS", "NUM_CLASSES",
           "NUM_DATA", "RUN_LENGTH", "build", "extra_samplers", "problem_for", "registered",
           "run_steps"]
