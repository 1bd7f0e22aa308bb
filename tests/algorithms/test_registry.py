"""Registering a method: one file (``toy_method``) plus one ``register`` line, checked once."""

import dataclasses
import types

import pytest
import torch
import toy_method

import bdlkit
from bdlkit import algorithms
from bdlkit.algorithms import options
from bdlkit.cli import main

F64 = torch.float64


@pytest.fixture
def toy():
    algorithms.register("toy", toy_method, "gradient ascent (a test method)")
    yield toy_method
    algorithms.unregister("toy")


def _gaussian():
    mean = torch.tensor([1.0, -2.0], dtype=F64)
    return bdlkit.Target(lambda t: -0.5 * ((t - mean) ** 2).sum(-1), dim=2, dtype=F64), mean


def test_a_registered_toy_method_runs_through_infer_and_the_cli(toy, capsys):
    target, mean = _gaussian()
    result = bdlkit.infer(target, "toy", steps=200, lr=0.1)
    assert result.kind == "optimizer" and result.method == "toy"
    assert torch.allclose(result.params, mean, atol=1e-6)  # 0.9^200 of the start is left
    assert torch.equal(result.sample(3)[0], result.params)  # an optimiser's draw is its point
    with pytest.raises(SystemExit):
        main(["fit", "--method", "toy", "--help"])
    out = capsys.readouterr().out
    assert "step size per datum (default 0.1)" in out
    assert "one of ascent, descent" in out


def test_every_registered_method_documents_every_option():
    for name, module in algorithms.METHODS.items():
        assert options.undocumented(module.ALGORITHM) == [], name
        assert module.KIND == module.ALGORITHM.kind, name


def test_registration_checks_the_declarations(toy):
    with pytest.raises(ValueError, match="already registered"):
        algorithms.register("toy", toy_method, "again")

    @dataclasses.dataclass(frozen=True)
    class Undocumented(toy_method.GradientAscent):
        """No Args: section here."""

        momentum: float = 0.5

    bad = types.ModuleType("bad")
    bad.ALGORITHM, bad.KIND = Undocumented, "optimizer"
    bad.build = options.builder(Undocumented)
    with pytest.raises(TypeError, match="without a line in Undocumented's Args"):
        algorithms.register("bad", bad, "")
    bad.ALGORITHM, bad.KIND = toy_method.GradientAscent, "sampler"
    with pytest.raises(TypeError, match="KIND='sampler' must be 'optimizer'"):
        algorithms.register("bad", bad, "")
    bad.ALGORITHM = object
    with pytest.raises(TypeError, match="ALGORITHM must be a class deriving"):
        algorithms.register("bad", bad, "")
    assert "bad" not in algorithms.METHODS


def test_options_come_from_the_fields_and_the_docstring():
    opts = {o.name: o for o in options.options(toy_method.GradientAscent)}
    assert list(opts) == ["lr", "direction"]
    assert opts["direction"].choices == ("ascent", "descent")
    assert opts["lr"].default == 0.1 and opts["lr"].help == "step size per datum."
    target, _ = _gaussian()
    with pytest.raises(ValueError, match="direction must be one of 'ascent', 'descent'"):
        toy_method.build(target, direction="sideways")
    with pytest.raises(TypeError, match="no option 'momentum'"):
        toy_method.build(target, momentum=0.9)
    assert toy_method.build(target, 0.5).lr == 0.5  # positional, in field order


@pytest.mark.parametrize("method", ["score_vi", "l2e", "csgld", "ensemble"])
def test_fit_help_shows_every_options_help_line(method, capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--method", method, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for option in options.options(algorithms.get_method(method).ALGORITHM):
        assert f"--{option.name.replace('_', '-')}" in out, option.name
        words = " ".join(option.help.replace("``", "").split()[:4]).rstrip(".")
        assert words and words in out, (option.name, words)


def test_a_step_without_log_prob_is_refused_by_the_runner(toy, monkeypatch):
    target, _ = _gaussian()
    inner = toy_method.GradientAscent.step
    monkeypatch.setattr(toy_method.GradientAscent, "step",
                        lambda self, state, batch: (inner(self, state, batch)[0], {}))
    with pytest.raises(TypeError, match="info without 'log_prob'"):
        bdlkit.infer(target, "toy", steps=3)


def test_registered_methods_are_attributes_and_module_paths(toy):
    import importlib

    from bdlkit.algorithms import map as map_module  # the old flat names still work

    assert map_module is algorithms.METHODS["map"]
    assert importlib.import_module("bdlkit.algorithms.sgld") is algorithms.METHODS["sgld"]
    assert importlib.import_module("bdlkit.algorithms.toy") is toy_method
    from bdlkit.algorithms.sghmc import SGHMC

    assert SGHMC is algorithms.METHODS["sghmc"].ALGORITHM


def test_the_runner_refuses_objects_that_are_not_algorithms_and_mixed_store_settings():
    target, _ = _gaussian()

    class Duck:
        problem = target

    with pytest.raises(TypeError, match="is not a bdlkit algorithm"):
        bdlkit.Runner(Duck())
    algorithm = algorithms.get_method("sgld").build(target)
    with pytest.raises(ValueError, match="either store= or burnin"):
        bdlkit.Runner(algorithm, store=bdlkit.collect.MemoryStore(), burnin=3)


def test_a_declared_capability_without_its_method_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Gated(toy_method.GradientAscent):
        chooses_draws = True  # says keep(t) picks the draws, but defines no keep

    bad = types.ModuleType("gated")
    bad.ALGORITHM, bad.KIND, bad.build = Gated, "optimizer", options.builder(Gated)
    with pytest.raises(TypeError, match="needs keep.. but does not define it"):
        algorithms.register("toy", bad, "")


def test_flat_storage_is_a_declared_capability_with_its_method():
    from bdlkit.core.protocol import Algorithm

    assert "flat_storage" in Algorithm.__annotations__  # declared, so nothing probes for it
    target, _ = _gaussian()
    assert algorithms.get_method("hmc").build(target).flat_storage is False  # the default
    assert algorithms.get_method("sgld").build(target).flat_storage is True
    assert algorithms.get_method("sgld").build(target, storage="tree").flat_storage is False

    @dataclasses.dataclass(frozen=True)
    class Flat(toy_method.GradientAscent):
        flat_storage = True  # says it steps on flat buffers, but has no flat_twin

    bad = types.ModuleType("flat")
    bad.ALGORITHM, bad.KIND, bad.build = Flat, "optimizer", options.builder(Flat)
    with pytest.raises(TypeError, match="declares flat_storage but does not define flat_twin"):
        algorithms.register("toy", bad, "")


def test_defaults_by_kind_of_problem_are_declared_applied_checked_and_shown(capsys):
    """problem_defaults: the toy's lr on a Target differs from its field default; build
    applies it unless lr is given, options() and fit --help show it, and register refuses an
    unknown kind or option."""
    from bdlkit.core.protocol import PROBLEM_KINDS

    @dataclasses.dataclass(frozen=True)
    class ByKind(toy_method.GradientAscent):
        """Gradient ascent with a smaller lr on Targets.

        Args:
            lr: step size per datum.
        """

        problem_defaults = {"target": {"lr": 0.02}, "regression": {"direction": "descent"}}
        name: str = "bykind"

    target, _ = _gaussian()
    build = options.builder(ByKind)
    assert build(target).lr == 0.02 and build(target, lr=0.3).lr == 0.3
    assert build(target).direction == "ascent"  # another kind's default does not apply
    assert options.problem_kind(target) == "target" and "target" in PROBLEM_KINDS
    assert options.problem_defaults(ByKind, object()) == {}  # not a Target nor a model
    by_name = {o.name: o for o in options.options(ByKind)}
    assert by_name["lr"].default == 0.1 and by_name["lr"].by_kind == {"target": 0.02}
    module = types.ModuleType("bykind")
    module.ALGORITHM, module.KIND, module.build = ByKind, "optimizer", build
    algorithms.register("bykind", module, "")
    try:
        with pytest.raises(SystemExit):
            main(["fit", "--method", "bykind", "--help"])
        assert "(default 0.1; on a Target 0.02)" in " ".join(capsys.readouterr().out.split())
    finally:
        algorithms.unregister("bykind")
    for declared, match in (({"targets": {"lr": 0.02}}, "unknown kind 'targets'"),
                            ({"target": {"momentum": 0.9}}, "has no option 'momentum'")):
        bad = dataclasses.make_dataclass("Bad", [], bases=(ByKind,), frozen=True)
        bad.problem_defaults = declared
        module.ALGORITHM, module.build = bad, options.builder(bad)
        with pytest.raises(TypeError, match=match):
            algorithms.register("bykind", module, "")
    assert "bykind" not in algorithms.METHODS
