"""Data parallelism of a score oracle: each rank scores its shard, one all-reduce combines.

With ``D`` ranks, rank ``r`` holds ``B_r`` rows of the step's minibatch of ``B = Σ_r B_r``
rows (:class:`bdlkit.engine.batches.Batches` with a shard) and its oracle returns the
unbiased estimate on its shard, ``v_r = (1/T)[(N/B_r) Σ_{i∈r} log p(y_i|x_i,θ) + log p(θ)]``
and ``s_r = ∇v_r``. The combination

    v = Σ_r B_r v_r / B,   s = Σ_r B_r s_r / B

equals ``(1/T)[(N/B) Σ_i log p(y_i|x_i,θ) + log p(θ)]`` and its gradient exactly: the
one-process estimate on the whole minibatch of ``B`` rows, up to float rounding. The
weights ``B_r`` make unequal shards (an epoch's last batch) exact too; a rank whose shard
is empty sends zeros (its oracle is not called: N/0). ``B_r v_r``, ``B_r s_r`` and ``B_r``
travel in one bucketed all-reduce (:func:`bdlkit.core.distributed.all_reduce_sum`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bdlkit.core.distributed import Topology, all_reduce_sum
from bdlkit.core.tree import TensorTree, tree_flatten_with_path, tree_unflatten


class ShardReducer:
    """``value, score = reducer(value, score, rows)``: the minibatch estimate of the
    whole step from this rank's estimate on its ``rows`` rows (module docstring).

    Args:
        topology: this rank's place (:class:`~bdlkit.core.distributed.Topology`); the
            sums run over its chain's data-parallel group.
    """

    def __init__(self, topology: Topology) -> None:
        if not topology.data_parallel:
            raise ValueError("a ShardReducer combines several data-parallel ranks; this "
                             f"topology has {topology.data_size}")
        self.topology = topology

    def __repr__(self) -> str:
        return f"ShardReducer(ranks={self.topology.data_size})"

    def __call__(self, value: Tensor, score: TensorTree, rows: int
                 ) -> tuple[Tensor, TensorTree]:
        _, leaves, spec = tree_flatten_with_path(score)
        weight = float(rows)
        # the value and the row count travel in float64 on every rank (an empty shard's
        # zeros must pack exactly like a full shard's parts)
        head = torch.stack([value.detach().reshape(()).double() * weight,
                            value.new_tensor(weight, dtype=torch.float64)])
        summed = all_reduce_sum([head, *(x * weight for x in leaves)], self.topology.group)
        total = summed[0][1]
        return ((summed[0][0] / total).to(value.dtype).reshape(value.shape),
                tree_unflatten(spec, [s / total.to(s.dtype) for s in summed[1:]]))
