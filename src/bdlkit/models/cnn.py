"""The small CNN family used to meta-train Learning to Explore (L2E).

Source: Kim, Hospedales et al., "Learning to Explore for Stochastic Gradient MCMC",
ICML 2024 (meta-training task distribution). Each network is

* non-residual: ``depth x [Conv3x3(width, SAME) -> ReLU] -> MaxPool2x2/2 -> flatten
  -> Linear(20) -> Linear(num_classes)`` (no non-linearity between the two linear layers);
* residual: the same convolutions, but the last conv output (before its ReLU) is added to
  a 1x1 conv projection of the input image, then ``ReLU -> MaxPool2x2/2 -> flatten
  -> Linear(num_classes)``.

The paper samples ``width in {4, 8, 16}`` and ``depth in 1..5``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

_INITS = ("torch", "haiku")


def haiku_truncated_normal_(weight: Tensor, fan_in: int,
                            generator: torch.Generator | None = None) -> Tensor:
    """Haiku's default weight init in place: N(0, s²) truncated at ±2s, s = 1/sqrt(fan_in),
    no variance correction (torch's ``trunc_normal_`` bounds are absolute, hence a=-2s)."""
    s = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        return nn.init.trunc_normal_(weight, mean=0.0, std=s, a=-2 * s, b=2 * s,
                                     generator=generator)


def haiku_init_(module: nn.Module) -> None:
    """Haiku-style init in place: truncated normal weights, zero biases.

    Every ``Conv2d``/``Linear`` weight is drawn from a normal with std
    ``s = 1/sqrt(fan_in)`` truncated to ``[-2s, 2s]`` (``fan_in = kh*kw*in_channels`` for
    convolutions, ``in_features`` for linear layers); biases are set to zero.
    """
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            haiku_truncated_normal_(m.weight, math.prod(m.weight.shape[1:]))
            if m.bias is not None:
                with torch.no_grad():
                    m.bias.zero_()


class ConvNet(nn.Module):
    """L2E meta-training CNN (Kim et al., ICML 2024); see the module docstring.

    Args:
        in_shape: ``(channels, height, width)`` of one input image.
        num_classes: number of output logits.
        width: channels of every 3x3 convolution (paper: 4, 8 or 16).
        depth: number of 3x3 convolutions, ``>= 1`` (paper: 1..5).
        residual: add a 1x1-conv projection of the input to the last conv output.
        init: ``"torch"`` (PyTorch defaults) or ``"haiku"`` (see :func:`haiku_init_`).

    ``forward`` maps ``(n, *in_shape)`` to ``(n, num_classes)``.
    """

    def __init__(
        self,
        in_shape: Sequence[int] = (1, 28, 28),
        num_classes: int = 10,
        width: int = 8,
        depth: int = 2,
        residual: bool = False,
        init: str = "torch",
    ) -> None:
        super().__init__()
        if len(in_shape) != 3 or any(int(s) <= 0 for s in in_shape):
            raise ValueError(f"in_shape must be (channels, height, width), got {in_shape!r}")
        if int(width) != width or width < 1:
            raise ValueError(f"width must be a positive integer (paper: 4, 8, 16), got {width!r}")
        if int(depth) != depth or depth < 1:
            raise ValueError(f"depth must be an integer >= 1 (paper: 1..5), got {depth!r}")
        if init not in _INITS:
            raise ValueError(f"unknown init {init!r}; valid: {list(_INITS)}")
        c, h, w = (int(s) for s in in_shape)
        if h < 2 or w < 2:
            raise ValueError(f"images must be at least 2x2 for the 2x2 max pool, got {in_shape!r}")
        self.in_shape = (c, h, w)
        self.num_classes = num_classes
        self.width, self.depth, self.residual = int(width), int(depth), bool(residual)
        self.convs = nn.ModuleList(
            nn.Conv2d(c if i == 0 else width, width, kernel_size=3, stride=1, padding=1)
            for i in range(self.depth)
        )
        self.proj = nn.Conv2d(c, width, kernel_size=1) if residual else None
        flat = width * (h // 2) * (w // 2)
        if residual:
            self.head = nn.Linear(flat, num_classes)
        else:
            self.head = nn.Sequential(nn.Linear(flat, 20), nn.Linear(20, num_classes))
        self.init = init
        if init == "haiku":
            haiku_init_(self)

    def reset_parameters(self) -> None:
        """The constructor's initialisation, again (PyTorch defaults, or Haiku-style with
        ``init="haiku"``); used by :meth:`bdlkit.BayesianModel.random_init`."""
        for m in self.modules():
            if m is not self and callable(getattr(m, "reset_parameters", None)):
                m.reset_parameters()
        if self.init == "haiku":
            haiku_init_(self)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(n, num_classes)`` for images ``(n, *in_shape)``."""
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h)
            last = i == self.depth - 1
            if not (last and self.proj is not None):
                h = F.relu(h)
        if self.proj is not None:
            h = F.relu(h + self.proj(x))
        h = F.max_pool2d(h, kernel_size=2, stride=2)
        return self.head(torch.flatten(h, 1))
