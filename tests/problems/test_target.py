import pytest
import torch

import bdlkit
import bdlkit.problems.target as target_module
from bdlkit.core.errors import InputError


def gaussian_target():
    return bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3, dtype=torch.float64)


def test_score_is_the_analytic_gradient():
    t = gaussian_target()
    theta = torch.randn(5, 3, dtype=torch.float64)
    value, score = t.value_and_score(theta)
    assert torch.allclose(score, -theta)
    assert torch.allclose(value, (-0.5 * theta**2).sum())
    assert t.log_prob(theta[0]).shape == ()
    assert t.log_prob(theta).shape == (5,)


def test_init_params_shapes_and_reproducibility():
    t = gaussian_target()
    a = t.init_params(torch.Generator().manual_seed(1), chains=4)
    b = t.init_params(torch.Generator().manual_seed(1), chains=4)
    assert a.shape == (4, 3) and torch.equal(a, b)
    assert t.init_params(torch.Generator().manual_seed(1)).shape == (3,)


@pytest.mark.parametrize("bad", [torch.zeros(2), torch.zeros(2, 2), torch.zeros(1, 1, 3)])
def test_wrong_theta_shape_names_the_expected_shape(bad):
    with pytest.raises(ValueError, match=r"dim=3"):
        gaussian_target().log_prob(bad)


def test_log_prob_with_wrong_output_shape_is_reported():
    t = bdlkit.Target(lambda th: th, dim=2)
    with pytest.raises(ValueError, match="must map"):
        t.log_prob(torch.zeros(4, 2))


def test_bad_construction():
    with pytest.raises(ValueError, match="dim"):
        bdlkit.Target(lambda th: th.sum(-1), dim=0)
    with pytest.raises(TypeError, match="callable"):
        bdlkit.Target("not a function", dim=2)


def test_data_for_a_target_is_refused():
    with pytest.raises(ValueError, match="no data"):
        gaussian_target().validate_data((torch.zeros(2), torch.zeros(2)))


# ---------------------------------------------------------------------- dtype mismatch
def _float64_data_target(dtype=torch.float32):
    data = torch.eye(2, dtype=torch.float64)  # float64 data, e.g. from numpy
    return bdlkit.Target(lambda th: -0.5 * ((th @ data) ** 2).sum(-1), dim=2, dtype=dtype)


@pytest.mark.parametrize("method", ["sgld", "map"])
def test_float64_data_in_a_float32_target_says_to_set_dtype(method):
    from bdlkit.core.errors import InputError

    with pytest.raises(InputError) as info:
        bdlkit.infer(_float64_data_target(), method, steps=2)
    message = str(info.value)
    assert "dtype=torch.float64" in message and "Target(" in message
    assert "theta is torch.float32" in message and ".float()" in message
    assert "\n" not in message


def test_float32_data_in_a_float64_target_says_the_reverse():
    from bdlkit.core.errors import InputError

    data = torch.eye(2)
    target = bdlkit.Target(lambda th: -(th @ data).sum(-1), dim=2, dtype=torch.float64)
    with pytest.raises(InputError, match=r"dtype=torch\.float32.*\.double\(\)"):
        target.value_and_score(torch.zeros(2, dtype=torch.float64))


def test_matching_dtypes_run_and_other_runtime_errors_propagate():
    result = bdlkit.infer(_float64_data_target(torch.float64), "sgld", steps=2)
    assert result.params.dtype == torch.float64

    def broken(theta):
        raise RuntimeError("something else went wrong")

    with pytest.raises(RuntimeError, match="something else"):
        bdlkit.Target(broken, dim=2).log_prob(torch.zeros(2))


def test_autograd_path_equals_torch_func_and_composes_with_transforms():
    """The plain-autograd oracle gives torch.func's value and score; inside a torch.func
    transform (vmap) the torch.func path runs."""
    prec = torch.tensor([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)
    target = bdlkit.Target(lambda th: -0.5 * ((th @ prec) * th).sum(-1), dim=3, dtype=torch.float64)
    theta = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    value, score = target.value_and_score(theta)
    ref_score, ref_value = torch.func.grad_and_value(lambda t: target.log_prob(t).sum())(theta)
    torch.testing.assert_close(value, ref_value)
    torch.testing.assert_close(score, ref_score)
    torch.testing.assert_close(score, -theta @ prec)
    vmapped = torch.func.vmap(lambda t: target.value_and_score(t)[1])(theta)
    torch.testing.assert_close(vmapped, score)
    # a density constant in θ by design declares its zero score (without it, it is refused
    # as detached: tests/problems/test_target_contracts.py)
    flat = bdlkit.Target(lambda th: torch.zeros(th.shape[0]), dim=3,
                         score=torch.zeros_like)
    assert torch.equal(flat.score(torch.ones(3)), torch.zeros(3))


def test_an_analytic_score_replaces_autograd():
    calls = []

    def score(th):
        calls.append(th.shape)
        return -th

    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3, score=score)
    theta = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    value, s = target.value_and_score(theta)
    torch.testing.assert_close(s, -theta)
    torch.testing.assert_close(value, -0.5 * (theta**2).sum())
    assert calls == [(2, 3)]
    res = bdlkit.infer(target, "sgld", steps=2000, seed=0, progress=False)
    draws = res.sample(1000)
    assert abs(float(draws.mean())) < 0.3 and 0.6 < float(draws.std()) < 1.4
    bad = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3, score=lambda th: th.sum(-1))
    with pytest.raises(ValueError, match=r"score must map \(n, 3\) to \(n, 3\)"):
        bad.value_and_score(theta)
    with pytest.raises(TypeError, match="score must be callable"):
        bdlkit.Target(lambda th: th.sum(-1), dim=3, score=3)


def test_an_analytic_score_stays_differentiable_inside_a_transform():
    target = bdlkit.Target(lambda th: -(th**4).sum(-1), dim=2, dtype=torch.float64,
                           score=torch.zeros_like)  # deliberately wrong
    theta = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert torch.equal(target.score(theta), torch.zeros(2, dtype=torch.float64))  # trusted
    jac = torch.func.jacrev(target.log_prob)(theta)
    torch.testing.assert_close(jac, -4 * theta**3)  # log_prob itself is differentiable
    vm = torch.func.vmap(lambda t: target.value_and_score(t)[1])(theta[None])
    torch.testing.assert_close(vm[0], -4 * theta**3)  # inside a transform: autodiff


def _graph_nodes(monkeypatch, target, theta):
    """The autograd nodes of the output ``value_and_score`` differentiates."""
    seen = []
    grad = target_module._gradient

    def spy(out, leaf):
        seen.append(out)
        return grad(out, leaf)

    monkeypatch.setattr(target_module, "_gradient", spy)
    target.value_and_score(theta)
    monkeypatch.undo()
    (out,) = seen
    names, todo = [], [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None:
            names.append(type(node).__name__)
            todo.extend(n for n, _ in node.next_functions)
    return sorted(names)


def test_the_autograd_score_differentiates_log_prob_alone(monkeypatch):
    """A step's score by autograd puts nothing but log_prob in the graph: no reshape of θ
    or of the output, and no sum, even over several chains (the rows' outputs seed the
    backward); the value and score are those of the reshaped-and-summed density, bit for
    bit."""
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3)
    own = ["AccumulateGrad", "MulBackward0", "PowBackward0", "SumBackward1"]
    one, chains = torch.tensor([0.3, -1.2, 2.0]), torch.randn(4, 3)
    assert _graph_nodes(monkeypatch, target, one) == own
    assert _graph_nodes(monkeypatch, target, chains) == own
    for theta in (one, chains):
        value, score = target.value_and_score(theta)
        leaf = theta.clone().requires_grad_(True)
        ref = target.log_prob(leaf).sum()
        (ref_score,) = torch.autograd.grad(ref, leaf)
        assert value.shape == () and score.shape == theta.shape
        assert torch.equal(value, ref.detach()) and torch.equal(score, ref_score)


@pytest.mark.parametrize("engine", ["direct", "wrapper"])
def test_the_engine_call_is_autograd_grad_bit_for_bit(monkeypatch, engine):
    """The score by autograd's engine directly (target._gradient) equals
    torch.autograd.grad's, for one point, several chains and float64; a density that
    leaves some coordinates out has zeros there, and one connected to a parameter but not
    to θ at all (autograd's None) a zero score; without the engine where torch keeps it,
    the wrapper runs."""
    if engine == "wrapper":
        monkeypatch.setattr(target_module, "_ENGINE", None)
    cases = [(lambda th: -0.5 * (th**2).sum(-1), torch.float32),
             (lambda th: torch.logsumexp(torch.stack([-(th - 1)**2, -(th + 1)**2]).sum(-1), 0),
              torch.float64)]
    g = torch.Generator().manual_seed(3)
    for fn, dtype in cases:
        target = bdlkit.Target(fn, dim=4, dtype=dtype)
        for theta in (torch.randn(4, generator=g, dtype=dtype),
                      torch.randn(5, 4, generator=g, dtype=dtype)):
            value, score = target.value_and_score(theta)
            leaf = theta.clone().requires_grad_(True)
            ref = target.log_prob(leaf).sum()
            (ref_score,) = torch.autograd.grad(ref, leaf)
            assert torch.equal(value, ref.detach()) and torch.equal(score, ref_score)
    # the output is connected to θ but not to every coordinate: zeros there, as autograd
    half = bdlkit.Target(lambda th: -(th[:, :2]**2).sum(-1), dim=4)
    _, score = half.value_and_score(torch.ones(4))
    assert torch.equal(score, torch.tensor([-2.0, -2.0, 0.0, 0.0]))
    weight = torch.nn.Parameter(torch.tensor(2.0))
    beside = bdlkit.Target(lambda th: weight * th.detach().sum(-1), dim=4)
    for theta in (torch.ones(4), torch.ones(3, 4)):
        value, score = beside.value_and_score(theta)
        assert torch.equal(score, torch.zeros_like(theta))
        assert value.item() == 8.0 * (theta.shape[0] if theta.ndim == 2 else 1)


def test_a_score_under_inference_mode_says_what_to_do():
    """torch.inference_mode() switches autograd off: the message says so and names the
    ways out, instead of calling the density disconnected."""
    target = bdlkit.Target(lambda th: -(th**2).sum(-1), dim=3)
    with torch.inference_mode(), pytest.raises(InputError, match="inference_mode"):
        target.value_and_score(torch.zeros(3))
    with torch.no_grad():  # no_grad is fine: the score enables grad itself
        _, score = target.value_and_score(torch.ones(3))
    assert torch.equal(score, torch.full((3,), -2.0))
