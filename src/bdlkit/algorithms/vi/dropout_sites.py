"""Where MC dropout drops: the ``Linear`` weights whose input columns it masks.

A network with ``nn.Dropout`` layers: each must feed a ``Linear`` layer directly (the
dropped activations are that layer's input columns), which a ``torch.fx`` trace of the
module shows; the rate is the layer's own ``p`` unless ``rate`` overrides every layer. A
network without dropout layers and a rate p > 0: the inputs of every ``Linear`` layer are
dropped at p (Gal & Ghahramani's placement, before every weight layer), in training by a
forward pre-hook on the layer (:func:`masks_active`). Only weights the posterior treats as
random (``BayesianModel(bayesian=...)``) can carry a mask.

``torch.fx`` is the tool for "which layer consumes this layer's output"; the module's
registration order says nothing about the data flow of a custom ``forward``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from bdlkit.core.errors import InputError
from bdlkit.families.dropout import Site

DROPOUT_LAYERS = (nn.Dropout,)  # element-wise dropout (Dropout2d drops whole channels)
ADD_LAYERS = "add dropout layers (the zoo's mlp: --model-kwargs dropout=0.05)"


def check_rate(rate: Any) -> float | None:
    """``rate`` as a float in [0, 1), or None (each dropout layer's own p)."""
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
        raise InputError(f"mc_dropout: rate must be a number in [0, 1) (the probability of "
                         f"dropping a unit), got {rate!r}; try rate=0.05")
    return float(rate)


def find_sites(module: nn.Module, bayesian: tuple[str, ...] | list[str],
               rate: float | None) -> tuple[Site, ...]:
    """The sites of ``module`` (module docstring), in the module's parameter order.

    Args:
        module: the network.
        bayesian: the names of its random parameters.
        rate: overrides every dropout layer's p; with no dropout layers, the rate at the
            input of every ``Linear`` layer (required then, and > 0).
    """
    rate = check_rate(rate)
    dropouts = {name for name, m in module.named_modules() if isinstance(m, DROPOUT_LAYERS)}
    # nn.Linear itself: a subclass such as MultiheadAttention's out_proj is read as a
    # weight, never called, so neither a dropout nor a pre-hook could act on its inputs
    linears = {name for name, m in module.named_modules() if type(m) is nn.Linear}
    if not dropouts:
        if not rate:
            raise InputError(
                f"mc_dropout: {type(module).__name__} has no dropout layers and the rate is "
                f"{rate!r}, so nothing would be dropped: give a rate in (0, 1) to drop the "
                f"inputs of every Linear layer (--rate 0.05), or {ADD_LAYERS}")
        found = {f"{name}.weight": (rate, None) for name in linears}
    else:
        found = {f"{linear}.weight": (rate if rate is not None else
                                      _layer_rate(module, drop), drop)
                 for drop, linear in _fed_linears(module, dropouts, linears)}
        if rate is None and not any(r for r, _ in found.values()):
            raise InputError(
                f"mc_dropout: every dropout layer of {type(module).__name__} has p = 0, so "
                "nothing would be dropped: give a rate in (0, 1) (--rate 0.05)")
    sites = tuple(Site(name, *found[name]) for name in _ordered(module) if name in found
                  and name in set(bayesian))
    if not sites:
        raise InputError(
            f"mc_dropout: no dropout site of {type(module).__name__} has a random weight: "
            f"the Linear layers it drops into ({', '.join(sorted(found)) or 'none'}) are not "
            "among the Bayesian parameters; select them (bayesian='all') or " + ADD_LAYERS)
    return sites


def _layer_rate(module: nn.Module, name: str) -> float:
    p = module.get_submodule(name).p
    if not 0 <= p < 1:
        raise InputError(f"mc_dropout: dropout layer {name!r} has p = {p}, outside [0, 1): "
                         "set it below 1 or override every layer with a rate (--rate 0.05)")
    return float(p)


def _ordered(module: nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters()]


def _fed_linears(module: nn.Module, dropouts: set[str],
                 linears: set[str]) -> list[tuple[str, str]]:
    """(dropout layer, the Linear layer it feeds) for every call of a dropout layer."""
    try:
        graph = torch.fx.symbolic_trace(module).graph
    except Exception as err:  # noqa: BLE001 - fx raises many kinds on untraceable code
        raise InputError(
            f"mc_dropout: torch.fx cannot trace {type(module).__name__} to find the layers "
            f"its dropout layers feed ({type(err).__name__}: {str(err)[:160]}); make its "
            "forward traceable, or remove the dropout layers and give a rate to drop the "
            "inputs of every Linear layer") from None
    pairs = []
    for node in graph.nodes:
        if node.op != "call_module" or node.target not in dropouts:
            continue
        users = list(node.users)
        fed = users[0] if len(users) == 1 else None
        if fed is None or fed.op != "call_module" or fed.target not in linears \
                or fed.args[:1] != (node,):
            what = ", ".join(str(u.target) for u in users) or "nothing"
            raise InputError(
                f"mc_dropout: dropout layer {node.target!r} of {type(module).__name__} feeds "
                f"{what}, not a single Linear layer; mc_dropout draws a mask as the zeroed "
                "input columns of the Linear layer a dropout feeds: put each dropout directly "
                "before a Linear layer")
        pairs.append((str(node.target), str(fed.target)))
    return pairs


@contextmanager
def masks_active(module: nn.Module, sites: tuple[Site, ...], seed: int) -> Iterator[None]:
    """Dropout on, per example, at every site while the context is open: a site's dropout
    layer in train mode at the site's rate, or, where the network has none, a forward
    pre-hook dropping the inputs of the site's ``Linear``. Masks come from torch's RNG
    seeded with ``seed`` (the CPU's and every initialised CUDA device's generator, forked:
    the caller's RNG state is untouched). Everything is restored after."""
    layers = {site.layer: site.rate for site in sites if site.layer is not None}
    saved = {name: (module.get_submodule(name).training, module.get_submodule(name).p)
             for name in layers}
    hooks = []
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        for site in (site for site in sites if site.layer is None):
            linear = module.get_submodule(site.weight.rpartition(".")[0])
            hooks.append(linear.register_forward_pre_hook(
                functools.partial(_drop_input, rate=site.rate)))
        for name, rate in layers.items():
            layer = module.get_submodule(name)
            layer.train(True)
            layer.p = rate
        with torch.random.fork_rng(devices=devices):
            torch.default_generator.manual_seed(seed)
            for index in devices:
                torch.cuda.default_generators[index].manual_seed(seed)
            yield
    finally:
        for hook in hooks:
            hook.remove()
        for name, (training, p) in saved.items():
            layer = module.get_submodule(name)
            layer.train(training)
            layer.p = p


def _drop_input(layer: nn.Module, args: tuple[Any, ...], rate: float) -> tuple[Any, ...]:
    return (nn.functional.dropout(args[0], rate, training=True), *args[1:])


__all__ = ["DROPOUT_LAYERS", "check_rate", "find_sites", "masks_active"]
