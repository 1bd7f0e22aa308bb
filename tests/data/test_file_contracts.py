"""Property tests of the user-file contracts (issue 19, item 4).

Whatever ``.npz`` or ``.csv`` file :func:`load_file` is given, it either returns a
:class:`Dataset` that keeps the contracts (finite float32 inputs, int64 labels in
``[0, num_classes)`` or finite float32 regression targets, non-empty train and test splits,
the same per-example shapes in every split) or raises an :class:`InputError` with a message;
it never raises another exception type and warns only with :class:`DataWarning`.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bdlkit.core.errors import DataWarning, InputError
from bdlkit.data.dataset import Dataset
from bdlkit.data.files import MAX_CLASSES, load_file

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = [np.int8, np.int64, np.uint64, np.float16, np.float32, np.float64, np.bool_,
          np.complex128, np.dtype("<U3")]
LAYOUTS = {
    "xy": ["x", "y"],
    "splits": ["x_train", "y_train", "x_test", "y_test"],
    "splits+val": ["x_train", "y_train", "x_test", "y_test", "x_val", "y_val"],
}
ALL_KEYS = [k for keys in LAYOUTS.values() for k in keys] + ["x_val", "other"]
HUGE = [1e30, 1e39, -1e300, float("nan"), float("inf"), 2.0**63 + 5, 65504.0, 1e-40]
OPTIONS = {
    "task": st.sampled_from([None, None, "classification", "regression"]),
    "num_classes": st.sampled_from([None, None, None, 1, 3, 20_000, 0, True]),
}


def _elements(dtype: np.dtype, style: str) -> st.SearchStrategy | None:
    """Element values: small and tame, the dtype's full range, or tame with extremes."""
    if dtype.kind not in "iuf" or style == "wild":
        return None  # hypothesis' default for the dtype (extremes, NaN, inf included)
    if dtype.kind in "iu":
        tame = hnp.from_dtype(dtype, min_value=0, max_value=4)
        extreme = st.sampled_from([int(np.iinfo(dtype).max), 2**63 + 5 if dtype.kind == "u"
                                   else int(np.iinfo(dtype).min)])
    else:
        tame = hnp.from_dtype(dtype, min_value=-10, max_value=10, allow_nan=False)
        with np.errstate(over="ignore", invalid="ignore"):
            extreme = st.sampled_from([np.asarray(v).astype(dtype).item() for v in HUGE])
    return tame if style == "tame" else st.one_of(tame, tame, tame, extreme)


@st.composite
def _array(draw: st.DrawFn, key: str, n: int, trailing: tuple, wild: bool) -> np.ndarray:
    """One array for ``key``: ``n`` rows of shape ``trailing`` with tame values, or
    (``wild``) any dtype, 0-d or other shapes and row counts, extreme values."""
    real = [np.int8, np.int64, np.uint64, np.float16, np.float64, np.bool_]
    dtype = np.dtype(draw(st.sampled_from(DTYPES if wild else real)))
    if key.startswith("y") and draw(st.booleans()):
        dtype = np.dtype(draw(st.sampled_from([np.int64, np.uint64, np.bool_, np.float64])))
    if wild:
        n = draw(st.sampled_from([n, n, 0, 1, n + 1]))
        trailing = draw(st.sampled_from([trailing, trailing, (), (0,), (2, 2)]))
    shape = () if wild and draw(st.integers(0, 9)) == 0 else (n, *trailing)
    style = draw(st.sampled_from(["tame", "mixed", "wild"] if wild else ["tame", "tame", "mixed"]))
    return draw(hnp.arrays(dtype, shape, elements=_elements(dtype, style)))


@st.composite
def npz_arrays(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """The arrays of an npz file: one of the layouts load_file reads, or random keys;
    half the files are tame (consistent shapes), the rest have wild arrays."""
    layout = draw(st.sampled_from([*LAYOUTS, *LAYOUTS, "random"]))
    if layout == "random":
        keys = sorted(draw(st.sets(st.sampled_from(ALL_KEYS), max_size=5)))
    else:
        keys = LAYOUTS[layout]
    tame = draw(st.booleans())
    shapes = {"x": draw(st.sampled_from([(3,), (2,), (), (2, 2), (3, 1)])),
              "y": draw(st.sampled_from([(), (), (), (1,), (2,)]))}
    n, arrays = draw(st.integers(2, 10) if tame else st.integers(0, 10)), {}
    for k in keys:
        wild = not tame and draw(st.integers(0, 2)) == 0
        arrays[k] = draw(_array(k, n, shapes[k[0]] if k[0] in shapes else (), wild))
    return arrays


CELLS = st.one_of(
    st.integers(-3, 5).map(str),
    st.floats(-100, 100).map(repr),
    st.floats().map(repr),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e39", "1e400", "-2e308", "abc", "1_000",
                     "0x10", "3.5", "2", " 7 ", "1e7", "٣"]),
    st.text(max_size=4),
)
NAMES = st.one_of(st.sampled_from(["a", "b", "target", "label", "", " x "]), st.text(max_size=3))


@st.composite
def _tame_csv(draw: st.DrawFn) -> str:
    """A header and rows of numbers with one cell per column (odd cells in some files)."""
    k = draw(st.integers(2, 4))
    named = st.permutations(["a", "b", "c", "target"]).map(lambda names: names[:k])
    header = draw(st.one_of(named, st.lists(NAMES, min_size=k, max_size=k)))
    ints = st.integers(0, 4).map(str)
    numbers = ints if draw(st.booleans()) else st.one_of(ints, st.floats(-5, 5).map(repr))
    cell = st.one_of(numbers, numbers, numbers, CELLS) if draw(st.booleans()) else numbers
    rows = draw(st.lists(st.lists(cell, min_size=k, max_size=k), max_size=12,
                         min_size=draw(st.sampled_from([0, 2, 5]))))
    return "\n".join(",".join(r) for r in [header, *rows]) + "\n"


@st.composite
def _wild_csv(draw: st.DrawFn) -> str:
    """Random headers, ragged rows, blank lines and line endings."""
    lines = [",".join(draw(st.lists(NAMES, max_size=4)))] if draw(st.booleans()) else []
    for row in draw(st.lists(st.lists(CELLS, max_size=5), max_size=10)):
        lines += [""] * draw(st.integers(0, 1)) + [",".join(row)]
    return draw(st.sampled_from(["\n", "\r\n", "\r"])).join(lines)


def csv_bytes() -> st.SearchStrategy[bytes]:
    """CSV file contents: mostly well-formed tables, some chaos, some non-UTF-8 bytes."""
    text = st.one_of(_tame_csv(), _tame_csv(), _wild_csv())
    return st.one_of(text.map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.binary(max_size=40))


def _load(path: Path, **options: Any) -> Dataset | None:
    """load_file's Dataset, or None after an InputError; any other exception propagates."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ds = load_file(path, **{k: v for k, v in options.items() if v is not None})
        except InputError as err:
            assert str(err).strip(), "an InputError without a message"
            event(f"{type(err).__name__}: {str(err).replace(str(path), '<file>')[:45]}")
            ds = None
        else:
            event(f"loaded {ds.task}")
    others = [f"{w.category.__name__}: {w.message}" for w in caught
              if not issubclass(w.category, DataWarning)]
    assert not others, others
    return ds


def _check_dataset(ds: Dataset, options: dict[str, Any]) -> None:
    """The contracts every loaded Dataset keeps."""
    splits = {p: (getattr(ds, f"x_{p}"), getattr(ds, f"y_{p}")) for p in ("train", "test", "val")}
    splits = {p: xy for p, xy in splits.items() if xy[0] is not None}
    x_tr, y_tr = splits["train"]
    assert len(x_tr) > 0 and len(splits["test"][0]) > 0
    for x, y in splits.values():
        assert x.dtype == torch.float32 and torch.isfinite(x).all()
        assert len(x) == len(y) and x.ndim >= 2 and x.shape[1:] == x_tr.shape[1:]
        assert y.shape[1:] == y_tr.shape[1:]
        if ds.task == "classification":
            assert y.dtype == torch.int64 and y.ndim == 1
            assert bool((y >= 0).all()) and bool((y < ds.num_classes).all())
        else:
            assert ds.task == "regression" and ds.num_classes is None
            assert y.dtype == torch.float32 and torch.isfinite(y).all()
    if ds.task == "classification":
        declared = options.get("num_classes")
        assert ds.num_classes == declared or (declared is None and ds.num_classes <= MAX_CLASSES)


@SETTINGS
@given(arrays=npz_arrays(), task=OPTIONS["task"], num_classes=OPTIONS["num_classes"])
def test_any_npz_loads_cleanly_or_raises_input_error(arrays, task, num_classes) -> None:
    options = {"task": task, "num_classes": num_classes}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npz"
        np.savez(path, **arrays)
        ds = _load(path, **options)
    if ds is not None:
        _check_dataset(ds, options)


@SETTINGS
@given(content=csv_bytes(), task=OPTIONS["task"], num_classes=OPTIONS["num_classes"],
       target=st.sampled_from([None, None, None, "target", "a", "zz"]))
def test_any_csv_loads_cleanly_or_raises_input_error(content, task, num_classes, target) -> None:
    options = {"task": task, "num_classes": num_classes, "target": target}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.csv"
        path.write_bytes(content)
        ds = _load(path, **options)
    if ds is not None:
        _check_dataset(ds, options)
