"""Property tests: whatever a config mapping or file holds, reading it either gives a
:class:`RunConfig` or raises :class:`InputError` with a message, never another exception
(issue 19, item 5). Keys are drawn among the real option and hyperparameter names and
junk; values among ints (huge ones too), floats (NaN, inf), text, bytes, lists, nested
mappings and None."""

from __future__ import annotations

import dataclasses
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bdlkit import algorithms
from bdlkit.core.errors import InputError
from bdlkit.runs.config import RunConfig, method_hyperparameters
from bdlkit.runs.yaml_files import load_yaml, save_yaml

FIELDS = [f.name for f in dataclasses.fields(RunConfig)]
HYPER_NAMES = sorted({n for m in algorithms.METHODS for n in method_hyperparameters(m)})
METHODS = sorted(algorithms.METHODS)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

junk_text = st.text(max_size=12)
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-3, max_value=3), st.integers(), st.integers(-2**80, 2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf", "-inf",
    "1e23", "2.5", "10", "-1", "true", "cpu", "meta", "cuda:7", "float64", "adam"]),
    junk_text, st.binary(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(junk_text, inner, max_size=3)), max_leaves=6)
hyper = st.dictionaries(st.one_of(st.sampled_from(HYPER_NAMES), junk_text), values,
                        max_size=3)
field_values = st.one_of(values, hyper)
configs = st.fixed_dictionaries(
    {"method": st.one_of(st.sampled_from(METHODS), values)},
    optional={
        **{name: field_values for name in FIELDS if name != "method"},
        "hyper": hyper,
        "nonsense": values,
    },
)


@st.composite
def near_valid(draw) -> dict:
    """A valid config with one or two keys (and hyperparameters of its method) drawn at
    random: these reach the checks behind the first bad key."""
    method = draw(st.sampled_from(METHODS))
    out = {"method": method, "steps": 2}
    for name in draw(st.lists(st.sampled_from(FIELDS[1:]), max_size=2)):
        out[name] = draw(values)
    names = sorted(method_hyperparameters(method))
    out["hyper"] = draw(st.dictionaries(st.sampled_from(names), values, max_size=3)
                        if names else st.just({}))
    return out


mappings = st.one_of(configs, near_valid(), st.dictionaries(
    st.one_of(st.sampled_from(FIELDS), junk_text), values, max_size=4))


def parse(values: object) -> RunConfig | None:
    """``RunConfig.from_dict(values)``, or None if it raised an InputError with a message."""
    try:
        return RunConfig.from_dict(values, "exp.yaml")  # type: ignore[arg-type]
    except InputError as err:
        assert str(err).strip()
        return None


def read(path) -> RunConfig | None:
    try:
        values = load_yaml(path)
    except InputError as err:
        assert str(err).strip() and str(path) in str(err)
        return None
    return parse(values)


def assert_sane(cfg: RunConfig) -> None:
    """What an accepted config guarantees to the code that runs it."""
    assert isinstance(cfg.method, str) and cfg.method in algorithms.METHODS
    for name in ("steps", "seed", "batch_size", "log_every", "eval_samples"):
        value = getattr(cfg, name)
        assert value is None or (type(value) is int and 0 <= value < 2**63), name
    for name in ("prior_scale", "temperature", "checkpoint_minutes"):
        assert math.isfinite(float(getattr(cfg, name))) and getattr(cfg, name) > 0, name
    for name in ("model_kwargs", "data_kwargs", "hyper"):
        assert isinstance(getattr(cfg, name), dict), name
    for value in cfg.hyper.values():
        assert not (isinstance(value, float) and math.isnan(value))


@SETTINGS
@given(mappings)
def test_from_dict_gives_a_config_or_an_input_error(values):
    cfg = parse(values)
    if cfg is not None:
        assert_sane(cfg)
        assert RunConfig.from_dict(cfg.to_dict()) == cfg


@SETTINGS
@given(mappings)
def test_yaml_files_give_a_config_or_an_input_error(tmp_path, values):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(values))
    cfg = read(path)
    if cfg is not None:
        assert_sane(cfg)
        save_yaml(path, cfg.to_dict())
        assert RunConfig.from_dict(load_yaml(path)) == cfg


@SETTINGS
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode),
                 st.text(alphabet="method: sgld\n[]{}-!&*|>'\"%@`#,?\t 0123456789.e",
                         max_size=60).map(str.encode)))
def test_any_bytes_in_a_config_file_give_a_config_or_an_input_error(tmp_path, raw):
    path = tmp_path / "exp.yaml"
    path.write_bytes(raw)
    cfg = read(path)
    if cfg is not None:
        assert_sane(cfg)


@SETTINGS
@given(st.binary(min_size=1, max_size=32).filter(lambda b: not _is_utf8(b)))
def test_a_binary_run_config_is_a_corrupt_file(tmp_path, raw):
    from bdlkit.core.errors import CorruptFileError

    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / ".bdlkit-run").write_text("")
    (run / "config.yaml").write_bytes(raw)
    try:
        load_yaml(run / "config.yaml")
    except CorruptFileError as err:
        assert "config.yaml" in str(err) and "--overwrite" in str(err)
    else:
        raise AssertionError("a binary config.yaml was read")


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
