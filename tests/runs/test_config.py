"""RunConfig validation, hyperparameter resolution and the YAML helpers."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from bdlkit import algorithms
from bdlkit.runs.config import (
    RunConfig,
    check_keys,
    method_hyperparameters,
    resolved_hyper,
)
from bdlkit.runs.yaml_files import load_yaml, save_yaml


def _build_defaults(method: str) -> dict:
    params = list(inspect.signature(algorithms.get_method(method).build).parameters.values())[1:]
    return {p.name: p.default for p in params}


# ---------------------------------------------------------------------- validation
def test_minimal_config_has_documented_defaults():
    cfg = RunConfig(method="sgld", steps=10)
    assert (cfg.model, cfg.data, cfg.seed, cfg.batch_size) == ("mlp", "digits", 0, 128)
    assert cfg.epochs is None and cfg.hyper == {} and cfg.model_kwargs == {}
    assert RunConfig(method="map", epochs=2).epochs == 2


def test_every_field_but_hyper_has_help():
    for f in dataclasses.fields(RunConfig):
        assert f.metadata.get("help"), f.name


def test_unknown_method_lists_valid_names():
    with pytest.raises(ValueError, match="unknown method 'sgdl'") as info:
        RunConfig(method="sgdl", steps=10)
    for name in algorithms.METHODS:
        assert name in str(info.value)


def test_exactly_one_of_steps_and_epochs_with_a_default_length():
    with pytest.raises(ValueError, match="exactly one of steps or epochs"):
        RunConfig(method="sgld", steps=10, epochs=1)
    assert RunConfig(method="sgld").steps == 1000


@pytest.mark.parametrize(
    "field, value",
    [
        ("steps", 0),
        ("steps", -5),
        ("steps", 2.5),
        ("batch_size", 0),
        ("burnin", -1),
        ("thin", 0),
        ("max_samples", -1),
        ("eval_every", 0),
        ("log_every", 0),
        ("checkpoint_every", -10),
        ("eval_samples", 0),
    ],
)
def test_integer_fields_reject_bad_values(field, value):
    kwargs = {"steps": 10, field: value}
    with pytest.raises(ValueError, match=rf"{field} must be an integer >= \d, got {value!r}"):
        RunConfig(method="sgld", **kwargs)


def test_epochs_rejects_negative():
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        RunConfig(method="sgld", epochs=-1)


def test_burnin_zero_is_allowed():
    assert RunConfig(method="sgld", steps=10, burnin=0).burnin == 0


@pytest.mark.parametrize(
    "field, value",
    [("prior_scale", -1.0), ("prior_scale", 0.0), ("temperature", 0.0), ("temperature", -0.5),
     ("checkpoint_minutes", 0.0), ("checkpoint_minutes", -3.0)],
)
def test_positive_float_fields(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a finite number > 0"):
        RunConfig(method="sgld", steps=10, **{field: value})


def test_unknown_hyperparameter_suggests_close_one():
    with pytest.raises(ValueError) as info:
        RunConfig(method="sgld", steps=10, hyper={"lrr": 0.1})
    message = str(info.value)
    assert "'lrr'" in message and "did you mean 'lr'?" in message
    assert "method 'sgld'" in message


def test_unknown_hyperparameter_of_another_method():
    with pytest.raises(ValueError, match="did you mean 'momentum'"):
        RunConfig(method="map", steps=10, hyper={"momentun": 0.5})
    # a valid key of one method is not valid for another
    with pytest.raises(ValueError, match="unknown key 'optimizer'"):
        RunConfig(method="sgld", steps=10, hyper={"optimizer": "adam"})


def test_valid_hyperparameters_are_accepted():
    cfg = RunConfig(method="map", steps=10, hyper={"lr": 0.01, "optimizer": "sgd"})
    assert cfg.hyper == {"lr": 0.01, "optimizer": "sgd"}


def test_check_keys_without_close_match_lists_valid_keys():
    with pytest.raises(ValueError) as info:
        check_keys({"zzzzzz": 1}, ["alpha", "beta"], "somewhere")
    message = str(info.value)
    assert "did you mean" not in message
    assert "somewhere" in message and "alpha, beta" in message
    check_keys({"alpha": 1}, ["alpha", "beta"], "somewhere")  # no error


# ---------------------------------------------------------------------- from_dict
def test_from_dict_round_trips_to_dict():
    cfg = RunConfig(method="map", steps=7, seed=3, hyper={"lr": 0.01})
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_from_dict_misspelled_key_is_named_with_suggestion():
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict({"method": "sgld", "setps": 10}, source="exp.yaml")
    message = str(info.value)
    assert "unknown key 'setps'" in message
    assert "did you mean 'steps'?" in message
    assert "exp.yaml" in message


def test_from_dict_needs_method_and_a_mapping():
    with pytest.raises(ValueError, match="does not set 'method'"):
        RunConfig.from_dict({"steps": 10}, source="exp.yaml")
    with pytest.raises(ValueError, match="must be a mapping"):
        RunConfig.from_dict(["method", "sgld"])  # type: ignore[arg-type]


# ---------------------------------------------------------------------- hyperparameters
@pytest.mark.parametrize("method", sorted(algorithms.METHODS))
def test_method_hyperparameters_are_build_keywords(method):
    assert list(method_hyperparameters(method)) == list(_build_defaults(method))


def test_resolved_hyper_fills_build_defaults():
    assert resolved_hyper("sgld", {}) == _build_defaults("sgld")
    assert "lr" in resolved_hyper("sgld", {})
    full = resolved_hyper("map", {"lr": 0.05})
    assert full["lr"] == 0.05
    defaults = _build_defaults("map")
    assert set(full) == set(defaults)
    for name, value in defaults.items():
        if name != "lr":
            assert full[name] == value
    # the input is not modified
    hyper = {"lr": 0.2}
    resolved_hyper("sgld", hyper)
    assert hyper == {"lr": 0.2}


# ---------------------------------------------------------------------- YAML
def test_yaml_round_trip(tmp_path):
    cfg = RunConfig(
        method="map", steps=7, seed=3, prior_scale=0.5, temperature=0.1, burnin=0,
        model_kwargs={"hidden": [20, 10]}, data_kwargs={"train_size": 100},
        hyper={"lr": 1e-5, "optimizer": "sgd"},
    )
    path = tmp_path / "sub" / "config.yaml"
    save_yaml(path, cfg.to_dict())
    assert path.read_text().startswith("method: map\n")  # field order is kept
    values = load_yaml(path)
    assert values == cfg.to_dict()
    assert isinstance(values["hyper"]["lr"], float)
    assert RunConfig.from_dict(values, str(path)) == cfg
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temp files left


def test_load_yaml_empty_file_is_empty_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_yaml(path) == {}


def test_load_yaml_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("method: sgld\nhyper: {lr: [1, 2\n")
    with pytest.raises(ValueError, match="not valid YAML") as info:
        load_yaml(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text", ["- method\n- sgld\n", "just a string\n", "42\n"])
def test_load_yaml_non_mapping(tmp_path, text):
    path = tmp_path / "list.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="must hold a mapping") as info:
        load_yaml(path)
    assert str(path) in str(info.value)


def test_load_yaml_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        load_yaml(path)
    assert str(path) in str(info.value)


def test_load_yaml_constructs_no_python_objects(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("method: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_yaml(path)


def test_unknown_or_missing_device_is_a_clear_error():
    with pytest.raises(ValueError, match="not a torch device"):
        RunConfig(method="sgld", steps=5, device="cpux")
    if not __import__("torch").cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            RunConfig(method="sgld", steps=5, device="cuda")


# ---------------------------------------------------------------------- bad values (F8, F9)
@pytest.mark.parametrize("key, kwargs", [
    ("seed", {"seed": -1}),
    ("seed", {"seed": 2**63}),
    ("seed", {"seed": "1e23"}),
    ("seed", {"seed": 1e23}),
    ("steps", {"steps": True}),
    ("steps", {"steps": 10**30}),
    ("batch_size", {"batch_size": "abc"}),
    ("prior_scale", {"prior_scale": float("nan")}),
    ("temperature", {"temperature": float("inf")}),
    ("temperature", {"temperature": "inf"}),
    ("checkpoint_minutes", {"checkpoint_minutes": 10**400}),
    ("prior_scale", {"prior_scale": [1]}),
    ("prior_scale", {"prior_scale": None}),
    ("model_kwargs", {"model_kwargs": 3}),
    ("data_kwargs", {"data_kwargs": {1: 2}}),
    ("model", {"model": ["mlp"]}),
    ("device", {"device": 0}),
    ("device", {"device": "meta"}),
    ("dtype", {"dtype": "float16"}),
    ("hyper.lr", {"hyper": {"lr": float("nan")}}),
    ("hyper.lr", {"hyper": {"lr": "inf"}}),
    ("hyper.lr", {"hyper": {"lr": None}}),
    ("hyper.lr", {"hyper": {"lr": True}}),
    ("hyper.lr", {"hyper": {"lr": 10**40}}),
])
def test_bad_values_name_their_key(key, kwargs):
    from bdlkit.runs.config import ConfigValueError

    with pytest.raises(ConfigValueError) as info:
        RunConfig(method="sgld", **{"steps": 10, **kwargs})
    assert info.value.key == key
    assert str(info.value).startswith(key + " ")
    assert info.value.option == "--" + key.split(".")[-1].replace("_", "-")


@pytest.mark.parametrize("method, hyper, key", [
    ("ensemble", {"members": 2.5}, "hyper.members"),
    ("l2e", {"noise_mode": 3}, "hyper.noise_mode"),
    ("map", {"optimizer": [1]}, "hyper.optimizer"),
    ("nuts", {"adapt_mass_matrix": "maybe"}, "hyper.adapt_mass_matrix"),
])
def test_hyperparameters_of_the_wrong_type_are_refused(method, hyper, key):
    from bdlkit.runs.config import ConfigValueError

    with pytest.raises(ConfigValueError) as info:
        RunConfig(method=method, steps=10, hyper=hyper)
    assert info.value.key == key


def test_accepted_values_keep_working():
    cfg = RunConfig(method="score_vi", steps="10", seed=str(2**63 - 1), prior_scale=2,
                    hyper={"max_step": "inf", "lr": 1, "num_samples": None})
    assert (cfg.steps, cfg.seed, cfg.prior_scale) == (10, 2**63 - 1, 2)
    assert cfg.hyper["max_step"] == float("inf") and cfg.hyper["lr"] == 1
    assert RunConfig(method="sgld", steps=10, model_kwargs=None).model_kwargs == {}
    assert RunConfig(method="l2e", steps=3, hyper={"meta_params": "inf"}).hyper == {
        "meta_params": "inf"}  # a string option keeps its text (a file may be named inf)


@pytest.mark.parametrize("text, default, message", [
    ("nan", 0.1, "finite"), ("inf", 0.1, "finite"), ("-inf", None, "finite"),
    ("abc", 0.1, "must be a number"), ("1e3", 5, "must be an integer"),
    ("2.5", 5, "must be an integer"), ("yes", True, "true or false"),
])
def test_parse_value_refuses_with_the_option_name(text, default, message):
    from bdlkit.core.errors import InputError
    from bdlkit.runs.config import parse_value

    with pytest.raises(InputError, match=f"^lr .*{message}"):
        parse_value(text, default, "lr")


def test_device_meta_and_other_backends_are_refused():
    from bdlkit.runs.config import check_device

    for device in ("meta", "xpu", "cpux", "cuda:-1"):
        with pytest.raises(ValueError, match=r"device .*cpu, cuda, cuda:N"):
            check_device(device)
    check_device("cpu")


def test_cuda_index_out_of_range_names_the_visible_gpus(monkeypatch):
    import torch

    from bdlkit.runs.config import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device("cuda")
    check_device("cuda:1")
    with pytest.raises(ValueError, match=r"'cuda:2': only 2 GPU\(s\) visible, cuda:0 to cuda:1"):
        check_device("cuda:2")


def test_from_dict_names_the_file_and_the_key():
    with pytest.raises(ValueError, match=r"^exp\.yaml: key 'steps' must be an integer >= 1"):
        RunConfig.from_dict({"method": "sgld", "steps": [1]}, "exp.yaml")
    with pytest.raises(ValueError, match=r"^exp\.yaml: unknown method 'nope'"):
        RunConfig.from_dict({"method": "nope"}, "exp.yaml")


def test_binary_yaml_is_corrupt_in_a_run_directory_and_bad_input_elsewhere(tmp_path):
    from bdlkit.core.errors import CorruptFileError, InputError

    path = tmp_path / "exp.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(InputError, match="not UTF-8 text") as info:
        load_yaml(path)
    assert str(path) in str(info.value) and "--overwrite" not in str(info.value)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".bdlkit-run").write_text("")
    (run / "config.yaml").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CorruptFileError, match="--overwrite") as info:
        load_yaml(run / "config.yaml")
    assert str(run / "config.yaml") in str(info.value)
    (run / "config.yaml").write_text("- a list\n")
    with pytest.raises(CorruptFileError, match="must hold a mapping"):
        load_yaml(run / "config.yaml")


def test_yaml_date_or_folder_is_bad_input(tmp_path):
    from bdlkit.core.errors import InputError

    path = tmp_path / "exp.yaml"
    path.write_text("method: sgld\nseed: 2001-13-45\n")  # month 13: datetime refuses it
    with pytest.raises(InputError, match="not valid YAML"):
        load_yaml(path)
    with pytest.raises(InputError, match="is a folder"):
        load_yaml(tmp_path)


def test_the_recorded_hyperparameters_are_those_of_the_problems_kind():
    """config.yaml records what the run used: on a regression model sghmc's lr is its
    regression default (problem_defaults), so "reproduce exactly" replays 0.002, not the
    classification default 0.01."""
    import torch

    import bdlkit
    from bdlkit.problems import Gaussian
    from bdlkit.runs.config import resolved_hyper

    net = torch.nn.Linear(1, 2)
    regression = bdlkit.BayesianModel(net, likelihood=Gaussian(heteroscedastic=True),
                                      num_data=10)
    classification = bdlkit.BayesianModel(net, likelihood="categorical", num_data=10)
    assert resolved_hyper("sghmc", {}, regression)["lr"] == pytest.approx(0.002)
    assert resolved_hyper("sghmc", {}, classification)["lr"] == 0.01
    assert resolved_hyper("sghmc", {"lr": 0.05}, regression)["lr"] == 0.05
