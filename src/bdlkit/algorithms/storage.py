"""Flat storage for the element-wise algorithms: the same update on one vector.

An element-wise method (SGLD, pSGLD, SGHMC, the cyclical samplers, MAP, ADVI and
score_vi's gradient solver on the diagonal Gaussian) writes its update once, as
:meth:`FlatStorage.update`, with ``tree_map`` over its parameters. With
``storage="flat"`` (the default) :meth:`FlatStorage.step` runs that same ``update`` with
every parameter-shaped dict of the state packed into one vector
(:func:`bdlkit.core.flat.pack`) and the problem seen on that vector
(:class:`~bdlkit.core.flat.FlatProblem`): one kernel per operation instead of one per
tensor, and the states it returns hold named views into one buffer per field. Noise is
drawn as one vector either way (:func:`bdlkit.core.tree.randn_like`), so ``"flat"`` and
``"tree"`` give the same iterates to float rounding (tested for every such method). A
Target's θ is one tensor already: nothing changes for it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from bdlkit.core.flat import FlatLayout, FlatProblem, pack, unpack
from bdlkit.core.protocol import AlgorithmBase, Batch, Info

STORAGES = ("flat", "tree")


@dataclass(frozen=True)
class FlatStorage:
    """How an element-wise method stores its state (keyword-only; module docstring).

    Args:
        storage: "flat" (default: one contiguous buffer per state field, one kernel per
            operation) or "tree" (one tensor per network parameter). The iterates are the
            same to float rounding; "tree" is for comparison and debugging.
    """

    storage: Literal["flat", "tree"] = field(default="flat", kw_only=True, repr=False,
                                             compare=False)
    _twins: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def flat_storage(self) -> bool:
        """Whether this configuration runs flat (a method with a non-element-wise variant,
        e.g. a flow family, says no for it)."""
        return self.storage == "flat"

    def update(self, state: Any, batch: Batch) -> tuple[Any, Info]:
        """One step of the method on whatever storage ``state`` has."""
        raise NotImplementedError

    def step(self, state: Any, batch: Batch) -> tuple[Any, Info]:
        """:meth:`update`, on the packed state when storage is flat (module docstring)."""
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {self.storage!r}")
        layout = FlatLayout.of(self.params(state)) if self.flat_storage else None  # type: ignore[attr-defined]
        if layout is None:
            return self.update(state, batch)
        new, info = self.flat_twin(layout).update(pack(layout, state), batch)
        return unpack(layout, state, new), info

    def flat_twin(self, layout: FlatLayout) -> Any:
        """This algorithm on :class:`FlatProblem` (cached per layout): a shallow copy with
        the problem, and that of any algorithm it delegates to, replaced."""
        twin = self._twins.get(layout)
        if twin is None:
            twin = _on_problem(self, FlatProblem(self.problem, layout))  # type: ignore[attr-defined]
            self._twins[layout] = twin
        return twin


def _on_problem(algorithm: Any, flat: FlatProblem) -> Any:
    twin = copy.copy(algorithm)
    object.__setattr__(twin, "_twins", {})
    original = algorithm.problem
    object.__setattr__(twin, "problem", flat)
    for f in dataclasses.fields(twin):
        value = getattr(twin, f.name)
        if isinstance(value, AlgorithmBase) and getattr(value, "problem", None) is original:
            object.__setattr__(twin, f.name, _on_problem(value, flat))
    return twin


__all__ = ["STORAGES", "FlatStorage"]
