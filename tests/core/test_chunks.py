"""bdlkit.core.chunks: the pieces a flat vector is evaluated in, and their size."""

import pytest

from bdlkit.core.chunks import CHUNK_FLOATS, chunk_size, spans


@pytest.mark.parametrize("n", [0, 1, 7, 16, 17, 3 * 4096 + 5])
@pytest.mark.parametrize("chunk", [1, 4, 16, 4096])
def test_spans_cover_the_range_once_in_pieces_of_at_most_chunk(n, chunk):
    pieces = spans(n, chunk)
    covered = [i for a, b in pieces for i in range(a, b)]
    assert covered == list(range(n))
    assert all(0 <= b - a <= chunk for a, b in pieces)
    assert len(pieces) == max(1, -(-n // chunk))


@pytest.mark.parametrize("chunk", [0, -3, 2.5, True, "8"])
def test_a_chunk_that_is_not_a_positive_integer_is_refused(chunk):
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        spans(10, chunk)


@pytest.mark.parametrize("hidden", [1, 10, 32, 3 * CHUNK_FLOATS])
def test_a_chunk_holds_at_most_the_budget_of_hidden_activations(hidden):
    assert chunk_size(hidden) >= 1
    assert chunk_size(hidden) * hidden <= max(hidden, CHUNK_FLOATS)
    assert (chunk_size(hidden) + 1) * hidden > CHUNK_FLOATS
