"""The deterministic forecaster of the Koopa papers: Adam on the MSE with early stopping.

The protocol of ``thuml/Koopa`` (``exp/exp_main.py``; ``docs/koopa_derivations.md`` §2),
re-implemented:
Adam (lr 1e-3, no weight decay) on the mean squared error in scaled units, batch 32
shuffled with ``drop_last``, at most 10 epochs with the ``type1`` schedule
(``lr · 0.5^(e−1)`` after epoch e), the validation MSE after each epoch, patience 3 and
the best epoch's weights restored. Validation uses every window (upstream: the mean of
shuffled drop_last batch MSEs, which differs by the dropped windows). Dropout is on while
training (the module's own rate).

Written by hand: a twenty-line loop; the point of the control is to follow this exact
protocol, which no trainer library reproduces by default.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class TrainedForecaster:
    """The restored best network, its validation noise and the training record."""

    module: nn.Module
    best_epoch: int
    val_mse: float  # of the restored weights
    val_channel_mse: Tensor  # (C,): the per-channel σ² of the point model's NLL floor
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


@torch.no_grad()
def _mse(module: nn.Module, x: Tensor, y: Tensor, batch: int = 512) -> Tensor:
    """Per-channel MSE ``(C,)`` of ``module`` over all windows of ``(x, y)`` (eval mode)."""
    total = torch.zeros(y.shape[-1], dtype=torch.float64)
    for i in range(0, len(x), batch):
        err = module(x[i : i + batch]) - y[i : i + batch]
        total += (err.double() ** 2).sum(dim=(0, 1)).cpu()
    return total / (len(x) * y.shape[1])


def train_forecaster(module: nn.Module, x_train: Tensor, y_train: Tensor, x_val: Tensor,
                     y_val: Tensor, *, seed: int = 0, epochs: int = 10, patience: int = 3,
                     lr: float = 1e-3, batch_size: int = 32) -> TrainedForecaster:
    """Train ``module`` in place by the Koopa protocol (module docstring).

    Args:
        module: any forecaster ``(B, L, C) → (B, H, C)``.
        x_train, y_train: training windows and targets.
        x_val, y_val: validation windows (early stopping on their MSE, all windows).
        seed: the data order.
        epochs: the most epochs.
        patience: epochs without a lower validation MSE before stopping.
        lr: Adam's learning rate at epoch 1.
        batch_size: windows per step (``drop_last``).
    """
    if len(x_train) < batch_size:
        raise ValueError(f"{len(x_train)} training windows, fewer than batch_size {batch_size}")
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    best, best_state, best_epoch, wait, history = float("inf"), None, 0, 0, []
    for epoch in range(1, epochs + 1):
        module.train()
        order = torch.randperm(len(x_train), generator=gen)
        losses = []
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size].to(x_train.device)
            loss = ((module(x_train[idx]) - y_train[idx]) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        module.eval()
        val = float(_mse(module, x_val, y_val).mean())
        history.append({"epoch": epoch, "train_mse": sum(losses) / len(losses), "val_mse": val})
        if val < best:  # NaN never is
            best, best_epoch, wait = val, epoch, 0
            best_state = copy.deepcopy(module.state_dict())
        else:
            wait += 1
            if wait >= patience:
                break
        for group in optimizer.param_groups:  # type1: lr · 0.5^(e−1) after epoch e
            group["lr"] = lr * 0.5 ** (epoch - 1)
    if best_state is None:
        raise ValueError(f"the validation MSE was never finite ({history[-1]['val_mse']}): "
                         "training diverged; lower lr")
    module.load_state_dict(best_state)
    module.eval()
    channel = _mse(module, x_val, y_val)
    return TrainedForecaster(module, best_epoch, float(channel.mean()), channel.float(),
                             history, time.perf_counter() - start)
