"""Reading a time-series CSV: the header, numeric columns, time stamps, and every refusal.

Used by :mod:`bdlkit.data.timeseries` (forecasting windows) and :mod:`bdlkit.data.files`
(tabular CSVs). Every error is a :class:`~bdlkit.core.errors.DataError` naming the file,
the column or the data row with its CSV line number, and the fix. Read with the :mod:`csv`
module (no pandas dependency).
"""

from __future__ import annotations

import csv
import difflib
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bdlkit.core.errors import DataError


def _where(i: int, lines: list[int] | None) -> str:
    """``data row R (CSV line N)`` for the 0-based data row ``i``."""
    return f"data row {i + 1}" + (f" (CSV line {lines[i]})" if lines else "")


def numeric_columns(
    path: Path, header: list[str], rows: list[list[str]], columns: list[int],
    lines: list[int] | None = None,
) -> np.ndarray:
    """The given columns of CSV rows as a float64 array (empty cells become NaN)."""
    values = np.empty((len(rows), len(columns)), dtype=np.float64)
    for i, row in enumerate(rows):
        for k, j in enumerate(columns):
            cell = row[j].strip()
            try:
                values[i, k] = float(cell) if cell else np.nan
            except ValueError:
                raise DataError(
                    f"{path}: non-numeric value {cell!r} in column {header[j]!r}, "
                    f"{_where(i, lines)}. Fix: make every cell of the column a number, or "
                    f"drop the column (only the time-stamp column may hold text)"
                ) from None
    return values


def _parse_lines(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, non-blank data rows and their CSV line numbers (no checks)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataError(f"{path}: empty CSV file; it needs a header and data rows") from None
        rows, lines = [], []
        for row in reader:
            if row and any(cell.strip() for cell in row):
                rows.append(row)
                lines.append(reader.line_num)
    return header, rows, lines


def _read_lines(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, data rows (blank lines skipped) and each row's 1-based CSV line number."""
    try:
        header, rows, lines = _parse_lines(path)
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}). Fix: save the CSV "
            f"as UTF-8"
        ) from None
    except csv.Error as err:
        raise DataError(f"{path}: not a readable CSV file ({err})") from None
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise DataError(
                f"{path}: {_where(i, lines)} has {len(row)} fields, the header has "
                f"{len(header)}. Fix: give every row one value per header column"
            )
    return header, rows, lines


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and data rows of a comma-separated file (blank lines skipped)."""
    header, rows, _ = _read_lines(path)
    return header, rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _unknown_column(path: Path, what: str, name: str, names: list[str], fix: str) -> DataError:
    """A missing-column error listing ``names`` and the closest match."""
    lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.5)
    hint = f" (did you mean {lower[close[0]]!r}?)" if close else ""
    listing = ", ".join(repr(n) for n in names)
    return DataError(
        f"{path}: {what} {name!r} not found{hint}; available columns: {listing}. Fix: {fix}"
    )


def _check_dates(
    path: Path, column: str, dates: list[str], lines: list[int], allow_gaps: bool | None
) -> str | None:
    """Refuse empty, repeated, backward or (unless ``allow_gaps``) skipped time stamps.

    Returns the most common time step as text, or None when the column is not ISO dates.
    """
    empty = [i for i, d in enumerate(dates) if not d]
    if empty:
        raise DataError(
            f"{path}: {len(empty)} missing time stamp(s) in column {column!r}, the first at "
            f"{_where(empty[0], lines)}. Fix: fill in the time stamps or remove those rows"
        )
    try:
        parsed = [datetime.fromisoformat(d) for d in dates]
    except ValueError:
        return None  # not ISO dates: no ordering check
    if len({p.tzinfo is None for p in parsed}) > 1:
        return None  # naive and aware time stamps mixed: not comparable
    steps = [b - a for a, b in zip(parsed, parsed[1:])]
    bad = [i for i, s in enumerate(steps) if s.total_seconds() <= 0]
    if bad:
        i, prev, cur = bad[0], dates[bad[0]], dates[bad[0] + 1]
        if steps[i].total_seconds() == 0:
            problem, fix = f"duplicate time stamp {cur!r}", "remove or merge the duplicate rows"
        else:
            problem, fix = f"{cur!r} goes backwards", "sort the rows by time stamp, oldest first"
        raise DataError(
            f"{path}: column {column!r} must be strictly increasing but has {len(bad)} "
            f"non-increasing step(s); the first: {problem} at {_where(i + 1, lines)}, after "
            f"{prev!r} in row {i + 1}. Fix: {fix}"
        )
    if not steps:
        return None
    step = Counter(steps).most_common(1)[0][0]
    gaps = [i for i, s in enumerate(steps) if s != step]
    if gaps and not allow_gaps and all(steps[i] % step == step * 0 for i in gaps):
        missing, i = sum(steps[i] // step - 1 for i in gaps), gaps[0]
        raise DataError(
            f"{path}: {missing} missing time stamps, first after row {i + 1} ({dates[i]}) "
            f"(CSV line {lines[i]}; the next is {dates[i + 1]!r}) in column {column!r}, "
            f"whose regular step is {step}. Fix: fill in the missing "
            f"rows (e.g. interpolate them) so that the series is evenly spaced"
            + ("" if allow_gaps is None else ", or pass allow_gaps=True to accept the gaps")
        )
    return str(step)


def parse_series(
    path: Path, target: str | None, date_column: str | None = "date",
    allow_gaps: bool | None = None,
) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Numeric columns (others first, target last), values ``(T, C)`` float64, date meta.

    ``date_column=None``: no time stamps; ``"date"``, when absent: a non-numeric first column.
    """
    header, rows, lines = _read_lines(path)
    if not rows:
        raise DataError(f"{path}: no data rows below the header")
    lower = [h.lower() for h in header]
    date_idx: int | None = None
    if date_column is not None and date_column.lower() in lower:
        date_idx = lower.index(date_column.lower())
    elif date_column not in (None, "date"):
        fix = "pass date_column= one of these, or date_column=None for no time stamps"
        raise _unknown_column(path, "date column", date_column, header, fix)
    elif date_column is not None and not _is_number(rows[0][0]):
        date_idx = 0  # a non-numeric first column is taken as the time stamp
    numeric = [j for j in range(len(header)) if j != date_idx]
    if not numeric:
        raise DataError(f"{path}: no numeric columns besides the time stamp {header[0]!r}")
    if target is None:
        tgt = numeric[-1]
    elif target in header:
        tgt = header.index(target)
    else:
        names = [header[j] for j in numeric]
        raise _unknown_column(path, "target column", target, names, "pass target= one of these")
    if tgt == date_idx:
        raise DataError(
            f"{path}: the target column {target!r} is the time-stamp column; pick a numeric "
            f"target, or pass date_column=None if the column is not a time stamp"
        )
    order = [j for j in numeric if j != tgt] + [tgt]
    values = numeric_columns(path, header, rows, order, lines)
    bad = ~np.isfinite(values)
    if bad.any():
        i, k = (int(v) for v in np.argwhere(bad)[0])
        cell = rows[i][order[k]].strip()
        kind = "an empty cell" if not cell else f"{cell!r}"
        raise DataError(
            f"{path}: {int(bad.sum())} empty or NaN/inf cell(s) in {int(bad.any(1).sum())} "
            f"row(s); the first is {kind} in column {header[order[k]]!r}, {_where(i, lines)}. "
            f"Fix: fill or interpolate the missing values, or drop those rows or columns"
        )
    meta: dict[str, Any] = dict.fromkeys(("date_column", "time_step", "first_date", "last_date"))
    if date_idx is not None:
        dates = [row[date_idx].strip() for row in rows]
        meta.update(date_column=header[date_idx], first_date=dates[0], last_date=dates[-1])
        meta["time_step"] = _check_dates(path, header[date_idx], dates, lines, allow_gaps)
    return [header[j] for j in order], values, meta
