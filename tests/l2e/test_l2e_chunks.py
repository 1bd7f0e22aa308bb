"""L2E's kinetic MLP by chunks of the flat vector (bdlkit.core.chunks): the same outputs as
on all coordinates at once, and a transient memory bounded by the chunk, not by d."""

import pytest
import torch

from bdlkit.core.chunks import CHUNK_FLOATS
from bdlkit.l2e import kinetic as K
from memory_helpers import largest_allocation, peak_allocated

F64 = torch.float64
#: leaf sizes: an empty leaf, leaves inside one chunk and leaves across chunk boundaries
SIZES = (13, 0, 40, 1, 29, 7)


def _inputs(sizes=SIZES, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    leaves = [[r(n) * scale for n in sizes] for scale in (1e-3, 1.0, 30.0)]
    return leaves + [[r(len(K.DECAYS), n) for n in sizes]]


def _meta(dtype=F64):
    return {k: v.to(dtype) for k, v in
            K.init_meta_params(torch.Generator().manual_seed(3)).items()}


@pytest.mark.parametrize("chunk", [2, 3, 16, 89, 90, 1000])
def test_chunked_mlp_equals_the_mlp_on_all_features_at_once(chunk):
    """Every chunk size, with leaves split across chunk boundaries, gives the MLP of the
    whole (d, 9) feature matrix to float64 rounding."""
    grad, params, mom, moments = _inputs()
    meta = _meta()
    x = K.FlatInputs.of(grad, params, mom, moments)
    assert x.grad.shape == (90,)
    whole = K.mlp(meta, K.features(grad, params, mom, moments))
    torch.testing.assert_close(K.chunked_mlp(meta, x, K.feature_scales(x), chunk), whole,
                               rtol=1e-12, atol=1e-14)


def test_features_are_normalised_per_leaf_also_where_a_chunk_spans_leaves():
    """The chunked features of one leaf do not depend on its neighbours: the same leaf alone
    gives the same MLP rows."""
    grad, params, mom, moments = _inputs()
    meta = _meta()
    x = K.FlatInputs.of(grad, params, mom, moments)
    out = K.chunked_mlp(meta, x, K.feature_scales(x), chunk=16)
    alone = K.FlatInputs.of(grad[2:3], params[2:3], mom[2:3], moments[2:3])
    torch.testing.assert_close(out[13:53], K.chunked_mlp(meta, alone,
                                                         K.feature_scales(alone), chunk=16),
                               rtol=1e-12, atol=1e-14)


def test_momentum_scales_replace_the_r_column_only():
    """(The empty leaf's scales are NaN, 0/0, and scale no row.)"""
    grad, params, mom, moments = _inputs()
    x = K.FlatInputs.of(grad, params, mom, moments)
    y = x._replace(momentum=x.momentum * 3 + 1)
    torch.testing.assert_close(K.momentum_scales(y, K.feature_scales(x)), K.feature_scales(y),
                               rtol=1e-12, atol=0.0, equal_nan=True)


def test_chunked_mlp_transient_memory_scales_with_the_chunk_not_with_d():
    """Peak memory allocated while the MLP runs on d = 1 040 float32 coordinates: by chunks
    of 64 or 256 at most the outputs (4 floats per coordinate: the chunks' rows and their
    concatenation) plus about 80 floats per row of a chunk (9 features, two hidden layers
    of 32, 2 outputs); on all coordinates at once, above two hidden layers of d × 32."""
    sizes = (300, 37, 700, 3)
    d, itemsize = sum(sizes), 4
    x = K.FlatInputs.of(*_inputs(sizes, torch.float32))
    kin = K.LearnedKinetic(_meta(torch.float32))
    meta, scales = kin.on(x.grad), K.feature_scales(x)
    for chunk in (64, 256):
        peak = peak_allocated(lambda c=chunk: K.chunked_mlp(meta, x, scales, c))
        assert peak <= itemsize * (4 * d + 100 * chunk), (chunk, peak)
        assert largest_allocation(lambda c=chunk: K.chunked_mlp(meta, x, scales, c)) \
            <= itemsize * max(2 * d, K.HIDDEN * chunk)
    unchunked = peak_allocated(lambda: K.chunked_mlp(meta, x, scales, d))
    assert unchunked >= itemsize * 2 * K.HIDDEN * d  # what the bound above rules out


def test_an_update_allocates_no_hidden_layer_of_all_coordinates():
    """One L2E update (both kinetic forms) on d = 2·CHUNK coordinates: the largest tensor it
    allocates is a hidden layer of one chunk (CHUNK_FLOATS = CHUNK × 32) or the new rolling
    means (6 × d),
    never a hidden layer of all coordinates, d × 32 (before the chunks, one per layer and
    MLP pass)."""
    sizes = (K.CHUNK + 7, 5, K.CHUNK - 12)
    d = sum(sizes)
    grad, params, mom, moments = _inputs(sizes, torch.float32)
    noise = _inputs(sizes, torch.float32, seed=1)[0]
    for form in K.KINETIC_FORMS:
        c = K.Constants(kinetic_form=form)
        kin = K.learned_kinetic(_meta(torch.float32), c)
        biggest = largest_allocation(
            lambda c=c, kin=kin: K.l2e_update(kin, c, params, mom, moments, grad, noise))
        assert biggest <= 4 * max(len(K.DECAYS) * d, CHUNK_FLOATS) < 4 * K.HIDDEN * d, \
            (form, biggest)
