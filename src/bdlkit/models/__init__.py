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


def build_for_data(
    name: str, input_shape: tuple[int, ...], out_features: int, **kwargs: object
) -> nn.Module:
    """Build model ``name`` for inputs of ``input_shape`` and ``out_features`` outputs.

    Used by the CLI: the input and output sizes come from the data set, the remaining
    constructor options from ``kwargs``. Image models need ``(C, H, W)`` inputs.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}")
    shape = tuple(int(s) for s in input_shape)
    if name == "mlp":
        return MLP(shape, out_features, **kwargs)
    if len(shape) != 3:
        raise ValueError(
            f"model {name!r} needs image inputs (channels, height, width), but the data have "
            f"shape {shape}; use --model mlp"
        )
    if name == "cnn":
        return ConvNet(in_shape=shape, num_classes=out_features, **kwargs)
    if name == "resnet20_frn":
        return resnet20_frn(num_classes=out_features, in_channels=shape[0], **kwargs)
    if shape[1] != shape[2]:
        raise ValueError(f"model 'vit' needs square images, got {shape}")
    return ViT(image_size=shape[1], in_channels=shape[0], num_classes=out_features, **kwargs)


__all__ = [
    "build_for_data",
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
