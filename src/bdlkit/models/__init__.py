"""bdlkit's small model zoo: plain ``torch.nn.Module``s that work with ``torch.func``.

Registry names: ``"mlp"`` (:class:`MLP`), ``"cnn"`` (the L2E meta-training
:class:`ConvNet`), ``"resnet20_frn"`` (:func:`resnet20_frn`), ``"vit"`` (:class:`ViT`).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from bdlkit.models.cnn import ConvNet, haiku_init_
from bdlkit.models.mlp import MLP
from bdlkit.models.resnet_frn import BasicBlockFRN, FilterResponseNorm, ResNetFRN, resnet20_frn
from bdlkit.models.vit import ViT

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": MLP,
    "cnn": ConvNet,
    "resnet20_frn": resnet20_frn,
    "vit": ViT,
}


def build_model(name: str, **kwargs: object) -> nn.Module:
    """Build the registered model ``name`` with constructor keyword arguments ``kwargs``.

    Raises:
        ValueError: if ``name`` is not registered (the message lists the valid names).
    """
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}"
        ) from None
    return factory(**kwargs)


__all__ = [
    "MODELS",
    "MLP",
    "BasicBlockFRN",
    "ConvNet",
    "FilterResponseNorm",
    "ResNetFRN",
    "ViT",
    "build_model",
    "haiku_init_",
    "resnet20_frn",
]
