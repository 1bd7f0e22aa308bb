"""Chunked standard normals (bdlkit.core.noise): one stream whatever the thread count,
standard normal and independent, torch's own draw up to one chunk, resumable."""

import hashlib
import math
import threading

import pytest
import torch
from scipy import stats

from bdlkit.core import noise
from bdlkit.core.tree import randn_like

CHUNK = noise.CHUNK


@pytest.fixture
def threads():
    """Restore the thread count the test changes."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def draw(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return noise.standard_normal(shape, g, dtype, "cpu"), g.get_state()


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize("shape", [(3 * CHUNK + 17,), (2, 2 * CHUNK + 5)])
def test_the_draws_do_not_depend_on_the_thread_count(shape):
    """The numbers and the generator's next state are the same at 1, 2 and 3 threads
    (each chunk has its own stream, whoever fills it)."""
    results = []
    for count in (1, 2, 3):
        torch.set_num_threads(count)
        results.append(draw(shape))
    for values, state in results[1:]:
        assert torch.equal(values, results[0][0])
        assert torch.equal(state, results[0][1])


def test_a_draw_of_at_most_one_chunk_is_torchs_own():
    """Small draws (a Target's, a small network's) keep the serial stream."""
    for shape in [(5,), (CHUNK,), (2, CHUNK // 2)]:
        g = torch.Generator().manual_seed(4)
        ref = torch.randn(shape, generator=torch.Generator().manual_seed(4))
        assert torch.equal(noise.standard_normal(shape, g, torch.float32, "cpu"), ref)
    values, _ = draw((CHUNK + 1,))
    assert not torch.equal(values, torch.randn(CHUNK + 1,
                                               generator=torch.Generator().manual_seed(0)))


def test_randn_like_draws_a_network_in_chunks_the_same_for_a_dict_and_its_vector():
    tree = {"w": torch.zeros(300, 500), "b": torch.zeros(300)}
    z = randn_like(tree, torch.Generator().manual_seed(2), 2)
    flat, _ = draw((2, 300 * 500 + 300), seed=2)
    assert torch.equal(torch.cat([z["w"].reshape(2, -1), z["b"]], dim=1), flat)


def test_the_draws_are_standard_normal_and_independent():
    """2.4 M float64 draws in 8 calls of 300 000 (5 chunks each): mean and variance within
    4 standard errors, Kolmogorov-Smirnov against N(0, 1), no correlation between the
    chunks of one call or the same chunk of two calls, and no chunk repeated."""
    g = torch.Generator().manual_seed(7)
    calls = torch.stack([noise.standard_normal((300_000,), g, torch.float64, "cpu")
                         for _ in range(8)])
    values = calls.reshape(-1)
    n = values.numel()
    assert abs(values.mean().item()) * math.sqrt(n) < 4
    assert abs(values.var().item() - 1) / math.sqrt(2 / n) < 4
    assert stats.kstest(values[:500_000].numpy(), "norm").pvalue > 1e-3
    chunks = calls[:, :4 * CHUNK].reshape(8, 4, CHUNK)  # the full chunks
    pairs = [(chunks[c, i], chunks[c, i + 1]) for c in range(8) for i in range(3)]  # within
    pairs += [(chunks[c, i], chunks[c + 1, i]) for c in range(7) for i in range(4)]  # across
    for a, b in pairs:
        r = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
        assert abs(r) * math.sqrt(CHUNK) < 4.5
    firsts = chunks[:, :, :4].reshape(-1, 4)
    assert len({tuple(row.tolist()) for row in firsts}) == firsts.shape[0]


def test_a_saved_generator_state_draws_the_same_numbers_again():
    g = torch.Generator().manual_seed(3)
    noise.standard_normal((2 * CHUNK,), g, torch.float32, "cpu")
    saved = g.get_state()
    first = noise.standard_normal((2 * CHUNK,), g, torch.float32, "cpu")
    again = torch.Generator()
    again.set_state(saved)
    assert torch.equal(noise.standard_normal((2 * CHUNK,), again, torch.float32, "cpu"), first)
    assert torch.equal(again.get_state(), g.get_state())


def test_a_draw_starts_no_thread():
    """The chunks are filled on the calling thread: a pool of threads made every other
    operation of the process slower (the module docstring's measurements)."""
    before = threading.active_count()
    draw((3 * CHUNK,))
    assert threading.active_count() == before


def test_the_stream_is_the_one_checkpoints_were_written_with():
    """The draw of 3 chunks and 5 values from seed 0, and the generator's next state, are
    those of the threaded version that wrote earlier checkpoints (sha256 recorded from it):
    filling the chunks serially kept the stream, so no version changed."""
    values, state = draw((3 * CHUNK + 5,))
    assert hashlib.sha256(values.numpy().tobytes()).hexdigest() == (
        "def34af2e8c2fee9676494f0c9f39c80aade9eabae612f20e067a046729824d9")
    assert hashlib.sha256(state.numpy().tobytes()).hexdigest().startswith("7e046b0d7b245391")
