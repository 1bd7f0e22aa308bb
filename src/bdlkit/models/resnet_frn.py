"""ResNet-FRN with Swish activations for CIFAR-sized images.

Source: the ResNet20-FRN used by Kim et al., "Learning to Explore for Stochastic Gradient
MCMC", ICML 2024 (after Izmailov et al., 2021): BatchNorm is replaced by Filter Response
Normalisation with a Thresholded Linear Unit (Singh & Krishnan, 2020) so the network is a
deterministic function of its weights, and ReLU by Swish (SiLU).

Architecture (depth ``6n+2``): stem ``Conv3x3(16) -> FRN -> SiLU``; three groups of ``n``
basic blocks with ``(16, 32, 64)`` channels and strides ``(1, 2, 2)``; block
``Conv3x3 -> FRN -> SiLU -> Conv3x3 -> FRN``, plus shortcut, then SiLU; "option A"
parameter-free shortcut (subsample by 2, zero-pad channels); global mean pool; linear head
initialised to zero. All convolutions have biases, which gives the paper's 271,098
parameters for ResNet20 with 10 classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class FilterResponseNorm(nn.Module):
    """Filter Response Normalisation with TLU (Singh & Krishnan, 2020).

    ``nu2 = mean_{H,W}(x^2)``, ``y = gamma * x / sqrt(nu2 + eps) + beta``,
    ``out = max(y, tau)``, with per-channel ``gamma`` (init 1), ``beta`` and ``tau`` (init 0).
    """

    def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.num_channels = num_channels
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(num_channels))
        self.beta = nn.Parameter(torch.zeros(num_channels))
        self.tau = nn.Parameter(torch.zeros(num_channels))

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``(n, C, H, W)`` per sample and channel, then apply the TLU."""
        nu2 = x.pow(2).mean(dim=(-2, -1), keepdim=True)
        xhat = x * torch.rsqrt(nu2 + self.eps)
        shape = (1, self.num_channels, 1, 1)
        y = self.gamma.view(shape) * xhat + self.beta.view(shape)
        return torch.maximum(y, self.tau.view(shape))

    def extra_repr(self) -> str:
        return f"{self.num_channels}, eps={self.eps}"


class BasicBlockFRN(nn.Module):
    """``Conv3x3 -> FRN -> SiLU -> Conv3x3 -> FRN``, add the option-A shortcut, SiLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.frn1 = FilterResponseNorm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1)
        self.frn2 = FilterResponseNorm(out_channels)
        self.stride = stride
        self.pad = (out_channels - in_channels) // 2
        if stride not in (1, 2) or out_channels - in_channels != 2 * self.pad or self.pad < 0:
            raise ValueError("option-A shortcut needs stride 1/2 and out = in + 2*pad channels")

    def shortcut(self, x: Tensor) -> Tensor:
        """Option A: subsample by the stride and zero-pad the channels on both sides."""
        if self.stride == 1 and self.pad == 0:
            return x
        if self.stride == 2:
            x = x[:, :, ::2, ::2]
        return F.pad(x, (0, 0, 0, 0, self.pad, self.pad))

    def forward(self, x: Tensor) -> Tensor:
        out = F.silu(self.frn1(self.conv1(x)))
        out = self.frn2(self.conv2(out))
        return F.silu(out + self.shortcut(x))


class ResNetFRN(nn.Module):
    """ResNet-FRN-Swish of depth ``6n+2`` (ResNet20-FRN for ``depth=20``); see module doc.

    Args:
        depth: total depth, ``6n+2`` with ``n >= 1`` blocks per group.
        num_classes: number of output logits.
        in_channels: image channels.
        width: channels of the first group (later groups use ``2*width``, ``4*width``).

    ``forward`` maps ``(n, in_channels, H, W)`` to ``(n, num_classes)``; at initialisation the
    head is zero, so every logit is exactly zero.
    """

    def __init__(
        self, depth: int = 20, num_classes: int = 10, in_channels: int = 3, width: int = 16
    ) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(f"depth must be 6n+2 with n >= 1 (e.g. 20, 32, 56), got {depth}")
        if width < 4 or width % 2 != 0:
            raise ValueError(f"width must be an even integer >= 4, got {width}")
        n = (depth - 2) // 6
        self.depth, self.num_classes = depth, num_classes
        self.stem = nn.Conv2d(in_channels, width, 3, stride=1, padding=1)
        self.stem_frn = FilterResponseNorm(width)
        blocks: list[nn.Module] = []
        channels = width
        for group, stride in enumerate((1, 2, 2)):
            out_channels = width * 2**group
            for i in range(n):
                blocks.append(BasicBlockFRN(channels, out_channels, stride if i == 0 else 1))
                channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, num_classes)
        self.reset_parameters(layers=False)

    def reset_parameters(self, layers: bool = True) -> None:
        """The constructor's initialisation, again: PyTorch's default for the convolutions
        (``layers``), FRN's gamma = 1, beta = tau = 0, and the zero head (used by
        :meth:`bdlkit.BayesianModel.random_init`, e.g. for deep-ensemble members)."""
        for m in self.modules():
            if layers and isinstance(m, nn.Conv2d):
                m.reset_parameters()
            elif isinstance(m, FilterResponseNorm):
                nn.init.ones_(m.gamma)
                nn.init.zeros_(m.beta)
                nn.init.zeros_(m.tau)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def features(self, x: Tensor) -> Tensor:
        """Pooled features ``(n, 4*width)`` before the head."""
        h = F.silu(self.stem_frn(self.stem(x)))
        h = self.blocks(h)
        return h.mean(dim=(-2, -1))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def resnet20_frn(num_classes: int = 10, in_channels: int = 3) -> ResNetFRN:
    """ResNet20-FRN-Swish of the L2E paper (271,098 parameters for 10 classes, RGB)."""
    return ResNetFRN(depth=20, num_classes=num_classes, in_channels=in_channels, width=16)
