"""What a :class:`~bdlkit.Result` must agree with when it is used again: the inputs it
predicts at and the problem it is loaded with.

A result records, when it is built (:meth:`ResultContract.of`), the per-example shape and
dtype of the training inputs (:class:`~bdlkit.problems.inputs.InputContract`), the
problem's ``repr`` (likelihood, prior, N, temperature, which weights are random) and, for
a network, the module's ``str`` (its layers: activations, widths, dropout rates).
:meth:`Result.save <bdlkit.Result.save>` writes the record into ``result.json``
(``"contract"``); :func:`bdlkit.load` with ``problem=`` refuses a problem that differs
from it, naming the first differing field, since the saved draws would silently predict
with another prior or activation. A result saved before bdlkit wrote the record has
nothing to check against: its problem and inputs are not checked (the problem ``repr``
its config holds was written by an older bdlkit, whose ``repr`` may differ in form, so
comparing it could refuse the right problem).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdlkit.core.errors import InputError
from bdlkit.engine.resume import first_difference
from bdlkit.problems import BayesianModel
from bdlkit.problems.inputs import InputContract


@dataclass(frozen=True)
class ResultContract:
    """The record a result's boundary is checked against (module docstring).

    Attributes:
        inputs: the training inputs' per-example shape and dtype (None: not checked).
        problem: ``repr`` of the problem the result was fit on (None: not checked).
        network: ``str`` of a network posterior's module (None: not checked).
    """

    inputs: InputContract | None = None
    problem: str | None = None
    network: str | None = None

    @classmethod
    def of(cls, problem: Any) -> ResultContract:
        """The record of a live ``problem`` (empty for a result without one)."""
        if problem is None:
            return cls()
        if isinstance(problem, BayesianModel):
            return cls(problem.example_inputs, repr(problem), str(problem.module))
        return cls(None, repr(problem), None)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"problem": self.problem, "network": self.network}
        if self.inputs is not None:
            record["inputs"] = self.inputs.to_json()
        return {k: v for k, v in record.items() if v is not None}

    @classmethod
    def from_json(cls, record: Any) -> ResultContract:
        """The record in ``result.json`` (empty for a result saved without one)."""
        if not isinstance(record, dict):
            return cls()
        text = {k: record[k] if isinstance(record.get(k), str) else None
                for k in ("problem", "network")}
        return cls(InputContract.from_json(record.get("inputs")), **text)

    def check_problem(self, problem: Any, where: Path) -> None:
        """Refuse ``problem`` unless it is the one the result at ``where`` was fit on.

        Raises:
            InputError: naming the first field (or network layer) that differs.
        """
        fix = ("pass the problem it was fit on (the same network, likelihood, prior, "
               "num_data and temperature)")
        given = repr(problem)
        if self.problem is not None and given != self.problem:
            saved, now = first_difference(self.problem, given)
            if saved is None and now is None:
                saved, now = self.problem, given
            raise InputError(f"{where} was fit on another problem: {saved or 'nothing'} in "
                             f"the saved result, {now or 'nothing'} in the problem passed; {fix}")
        if self.network is not None and isinstance(problem, BayesianModel):
            saved, now = _first_line_difference(self.network, str(problem.module))
            if saved is not None or now is not None:
                raise InputError(
                    f"{where} was fit on another network: {saved or 'no layer'!r} in the "
                    f"saved result, {now or 'no layer'!r} in the problem's module; {fix}")


def _first_line_difference(saved: str, given: str) -> tuple[str | None, str | None]:
    """The first line in which two module printouts differ, stripped (``None`` on a side
    that has no such line); ``(None, None)`` when they are the same."""
    old, new = saved.splitlines(), given.splitlines()
    for i in range(max(len(old), len(new))):
        a = old[i].strip() if i < len(old) else None
        b = new[i].strip() if i < len(new) else None
        if a != b:
            return a, b
    return None, None
