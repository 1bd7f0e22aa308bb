"""Mixed precision for the network forward pass of a :class:`~bdlkit.BayesianModel`.

``precision="bf16"`` or ``"fp16"`` runs the network under :func:`torch.autocast` (matrix
products and convolutions in the low precision, the parameters and their scores stay
float32) and casts its outputs back to the parameters' dtype before the likelihood, so
log-likelihoods, the minibatch sum, the prior and the scores are all accumulated in float32.
``"fp32"`` (default) calls the network as it is, with no autocast context at all, so a
float32 run is bit-identical to one of a bdlkit without this option.

bf16 has float32's range, so no scaling is needed; fp16 works on CPU and GPU (torch 2.13),
but bdlkit applies no loss scaling (a sampler's gradient noise and its step size depend on
the score's exact scale), so small gradients can underflow: prefer bf16.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

#: The autocast dtype of each precision name (None means no autocast).
AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16,
}


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`AUTOCAST_DTYPES`, else ``ValueError``."""
    if precision not in AUTOCAST_DTYPES:
        raise ValueError(f"precision must be one of {', '.join(AUTOCAST_DTYPES)}, got "
                         f"{precision!r}")
    return precision


def autocast_call(network: Callable[[], Tensor], precision: str, device_type: str,
                  out_dtype: torch.dtype) -> Tensor:
    """``network()`` in ``precision``, its outputs in ``out_dtype``.

    Args:
        network: calls the network on its inputs (no arguments).
        precision: ``"fp32"`` (a plain call), ``"bf16"`` or ``"fp16"`` (autocast).
        device_type: the inputs' device type (``"cpu"``, ``"cuda"``, ...), for autocast.
        out_dtype: the dtype of the returned outputs (the parameters' dtype): what the
            likelihood sees.
    """
    dtype = AUTOCAST_DTYPES[precision]
    if dtype is None:
        return network()
    with torch.autocast(device_type, dtype=dtype):
        outputs = network()
    return outputs.to(out_dtype)
