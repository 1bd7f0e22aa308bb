"""``infer(..., device=...)``: put a problem and its starting point on one device.

A :class:`~bdlkit.BayesianModel` is moved with :meth:`~bdlkit.BayesianModel.to` (its
module in place, like ``nn.Module.to``); an explicit ``init`` follows it. The training
batches then follow the model: :class:`~bdlkit.engine.batches.Batches` moves tensor data
once and every DataLoader batch as it is drawn to the problem's ``device``. A
:class:`~bdlkit.Target` holds its tensors inside its ``log_prob``, which bdlkit cannot move:
it runs on the CPU only through ``device=``; build its tensors on the GPU and pass an
``init=`` there instead.
"""

from __future__ import annotations

from typing import Any

import torch

from bdlkit.core.tree import tree_map
from bdlkit.problems import BayesianModel


def place(problem: Any, init: Any, device: str | torch.device | None) -> tuple[Any, Any]:
    """``(problem, init)`` on ``device`` (unchanged when ``device`` is None).

    Args:
        problem: the problem ``infer`` runs on; a BayesianModel is moved in place.
        init: the starting parameters (a tree of tensors) or None.
        device: a torch device bdlkit runs on (``cpu``, ``cuda``, ``cuda:N``, ``mps``),
            checked by the caller (``infer`` calls :func:`bdlkit.runs.config.check_device`:
            the engine does not import the run layer).
    """
    if device is None:
        return problem, init
    target = torch.device(device)
    if isinstance(problem, BayesianModel):
        problem.to(target)
    elif target.type != "cpu":
        raise ValueError(
            f"device={str(device)!r} moves a BayesianModel and its data; a "
            f"{type(problem).__name__}'s tensors live in its log_prob, which bdlkit cannot "
            "move: build them on the device and pass init= there (without device=)"
        )
    if init is not None:
        init = tree_map(lambda t: t.to(target) if isinstance(t, torch.Tensor) else t, init)
    return problem, init
