"""Tests for bdlkit's model zoo (shapes, parameter counts, inits, torch.func)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad
from torch.nn import functional as F

from bdlkit.models import (
    MLP,
    MODELS,
    ConvNet,
    FilterResponseNorm,
    ResNetFRN,
    ViT,
    build_model,
    resnet20_frn,
)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def n_convs(model: nn.Module, kernel: int) -> int:
    return sum(
        isinstance(m, nn.Conv2d) and m.kernel_size == (kernel, kernel) for m in model.modules()
    )


# (name, factory, input shape, num classes)
CASES = [
    ("mlp", lambda: MLP((1, 6, 6), 5, hidden=(16, 8), activation="tanh"), (3, 1, 6, 6), 5),
    ("cnn", lambda: ConvNet((1, 8, 8), 4, width=4, depth=2), (3, 1, 8, 8), 4),
    ("cnn_res", lambda: ConvNet((3, 8, 8), 4, width=4, depth=3, residual=True), (3, 3, 8, 8), 4),
    ("resnet", lambda: ResNetFRN(depth=8, num_classes=3, width=4), (2, 3, 8, 8), 3),
    (
        "vit",
        lambda: ViT(image_size=8, patch_size=4, dim=16, depth=1, heads=2, mlp_dim=8),
        (2, 3, 8, 8),
        10,
    ),
]


@pytest.mark.parametrize("name,factory,shape,k", CASES, ids=[c[0] for c in CASES])
def test_output_shape(name, factory, shape, k):
    torch.manual_seed(0)
    out = factory()(torch.randn(shape))
    assert out.shape == (shape[0], k)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name,factory,shape,k", CASES, ids=[c[0] for c in CASES])
def test_functional_call_grad(name, factory, shape, k):
    torch.manual_seed(0)
    model = factory()
    if isinstance(model, ResNetFRN):  # zero head: give it weights so every grad is non-zero
        nn.init.normal_(model.head.weight)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = torch.randn(shape), torch.randint(0, k, (shape[0],))

    def loss(p):
        return F.cross_entropy(functional_call(model, p, (x,)), y)

    g = grad(loss)(params)
    assert g.keys() == params.keys()
    for n in params:
        assert g[n].shape == params[n].shape and torch.isfinite(g[n]).all(), n
    # agrees with ordinary autograd
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(g[n], p.grad, msg=n)
    assert any(g[n].abs().sum() > 0 for n in params)


def test_mlp_flattens_and_validates():
    m = MLP(12, 2, hidden=(), activation="gelu")
    assert m(torch.randn(4, 12)).shape == (4, 2)
    assert MLP((3, 4), 2)(torch.randn(4, 3, 4)).shape == (4, 2)
    with pytest.raises(ValueError, match="activation"):
        MLP(3, 2, activation="sigmoid")


def test_mlp_dropout_goes_before_every_linear_and_is_off_in_eval_mode():
    torch.manual_seed(0)
    m = MLP(4, 1, hidden=(8, 8), dropout=0.2)
    kinds = [type(layer).__name__ for layer in m.net]
    assert kinds == ["Dropout", "Linear", "ReLU"] * 2 + ["Dropout", "Linear"]
    plain = MLP(4, 1, hidden=(8, 8))
    plain.load_state_dict({k.replace("net.1.", "net.0.").replace("net.4.", "net.2.")
                           .replace("net.7.", "net.4."): v for k, v in m.state_dict().items()})
    x = torch.randn(5, 4)
    assert torch.equal(m.eval()(x), plain.eval()(x))
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="dropout"):
            MLP(4, 1, dropout=bad)


def test_resnet20_frn_parameter_count():
    assert n_params(resnet20_frn()) == 271_098
    assert n_params(ResNetFRN(depth=20, num_classes=10, in_channels=3, width=16)) == 271_098


def test_resnet20_frn_structure_and_zero_logits():
    torch.manual_seed(0)
    m = resnet20_frn(num_classes=7, in_channels=3)
    assert n_convs(m, 3) == 19  # stem + 3 groups x 3 blocks x 2 convs; option-A shortcuts
    assert n_convs(m, 1) == 0
    assert torch.all(m.head.weight == 0) and torch.all(m.head.bias == 0)
    out = m(torch.randn(2, 3, 16, 16))
    assert out.shape == (2, 7)
    assert torch.all(out == 0)
    assert m.features(torch.randn(2, 3, 16, 16)).shape == (2, 64)


def test_resnet_depth_validation():
    with pytest.raises(ValueError, match="6n"):
        ResNetFRN(depth=21)


def test_frn_matches_naive_formula():
    torch.manual_seed(0)
    c = 5
    frn = FilterResponseNorm(c)
    with torch.no_grad():
        frn.gamma.copy_(torch.randn(c))
        frn.beta.copy_(torch.randn(c))
        frn.tau.copy_(torch.randn(c))
    x = torch.randn(3, c, 4, 6, dtype=torch.float64)
    frn = frn.double()
    expected = torch.empty_like(x)
    for i in range(3):
        for j in range(c):
            nu2 = (x[i, j] ** 2).sum() / (4 * 6)
            y = frn.gamma[j] * x[i, j] / math.sqrt(nu2 + 1e-6) + frn.beta[j]
            expected[i, j] = torch.clamp(y, min=frn.tau[j])
    torch.testing.assert_close(frn(x), expected.detach())
    # default init: gamma 1, beta 0, tau 0
    fresh = FilterResponseNorm(c)
    assert torch.all(fresh.gamma == 1) and torch.all(fresh.beta == 0) and torch.all(fresh.tau == 0)


@pytest.mark.parametrize("in_shape", [(1, 28, 28), (3, 28, 28)])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("depth", [1, 3, 5])
@pytest.mark.parametrize("residual", [False, True])
def test_cnn_variants(in_shape, width, depth, residual):
    m = ConvNet(in_shape, num_classes=10, width=width, depth=depth, residual=residual)
    assert n_convs(m, 3) == depth
    assert n_convs(m, 1) == (1 if residual else 0)
    assert all(c.out_channels == width for c in m.convs)
    assert m.convs[0].in_channels == in_shape[0]
    linears = [mod for mod in m.modules() if isinstance(mod, nn.Linear)]
    flat = width * 14 * 14
    if residual:
        assert [(lin.in_features, lin.out_features) for lin in linears] == [(flat, 10)]
    else:
        assert [(lin.in_features, lin.out_features) for lin in linears] == [(flat, 20), (20, 10)]
    assert m(torch.randn(2, *in_shape)).shape == (2, 10)


def test_cnn_non_residual_has_no_nonlinearity_between_linears():
    torch.manual_seed(0)
    m = ConvNet((1, 4, 4), 3, width=4, depth=1)
    lin1, lin2 = m.head[0], m.head[1]
    x = torch.randn(2, 1, 4, 4)
    h = F.max_pool2d(F.relu(m.convs[0](x)), 2, 2).flatten(1)
    torch.testing.assert_close(m(x), lin2(lin1(h)))


def test_cnn_residual_adds_projection_of_input():
    torch.manual_seed(0)
    m = ConvNet((2, 4, 4), 3, width=4, depth=2, residual=True)
    x = torch.randn(2, 2, 4, 4)
    h = m.convs[1](F.relu(m.convs[0](x)))
    h = F.max_pool2d(F.relu(h + m.proj(x)), 2, 2).flatten(1)
    torch.testing.assert_close(m(x), m.head(h))


@pytest.mark.parametrize("residual", [False, True])
def test_cnn_haiku_init(residual):
    torch.manual_seed(0)
    m = ConvNet((3, 28, 28), width=16, depth=3, residual=residual, init="haiku")
    layers = [mod for mod in m.modules() if isinstance(mod, (nn.Conv2d, nn.Linear))]
    assert len(layers) == (3 + 1 + 1 if residual else 3 + 2)
    for layer in layers:
        w = layer.weight
        fan_in = w.shape[1] * (w.shape[2] * w.shape[3] if w.ndim == 4 else 1)
        s = 1 / math.sqrt(fan_in)
        assert w.abs().max() <= 2 * s + 1e-7
        assert torch.all(layer.bias == 0)
    big = m.convs[1].weight  # 16*16*9 draws: the std is close to (a bit under) s
    assert 0.75 / math.sqrt(16 * 9) < big.std() < 1.0 / math.sqrt(16 * 9)


def test_cnn_validation():
    with pytest.raises(ValueError, match="depth"):
        ConvNet(depth=0)
    with pytest.raises(ValueError, match="width"):
        ConvNet(width=0)
    with pytest.raises(ValueError, match="init"):
        ConvNet(init="xavier")
    assert ConvNet((1, 6, 6), width=5, depth=6)(torch.randn(1, 1, 6, 6)).shape == (1, 10)


def test_registry_and_build_model():
    assert set(MODELS) == {"mlp", "cnn", "resnet20_frn", "vit", "koopa"}
    assert isinstance(build_model("cnn", width=4, depth=1), ConvNet)
    assert isinstance(build_model("mlp", in_features=4, out_features=2), MLP)
    assert isinstance(build_model("vit", dim=16, depth=1, heads=2), ViT)
    assert isinstance(build_model("resnet20_frn", num_classes=3), ResNetFRN)
    with pytest.raises(ValueError) as err:
        build_model("resnet18")
    for name in MODELS:
        assert name in str(err.value)


def test_no_torchvision_import():
    code = "import sys, bdlkit.models; sys.exit('torchvision' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("init", ["torch", "haiku"])
def test_reset_parameters_repeats_the_constructor_init(init):
    """A root reset_parameters redraws what the constructor drew (deep-ensemble members)."""
    torch.manual_seed(3)
    built = ConvNet((1, 8, 8), width=4, depth=2, init=init)
    again = ConvNet((1, 8, 8), width=4, depth=2, init=init)
    torch.manual_seed(3)
    again.reset_parameters()
    for (name, a), b in zip(built.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name
    net = resnet20_frn(num_classes=10)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    net.reset_parameters()
    assert torch.all(net.head.weight == 0) and torch.all(net.head.bias == 0)
    assert torch.all(net.stem_frn.gamma == 1) and torch.all(net.stem_frn.tau == 0)
    assert net.stem.weight.abs().max() < 1.0  # redrawn, not left at +1
