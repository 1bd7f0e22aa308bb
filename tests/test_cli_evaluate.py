"""`bdlkit evaluate` on the console: the compact summary (main metrics, OOD with its base
rate, shift per severity, run health), the progress bar's redraw interval and the checks of
--num-draws / --max-test. A whole evaluate with its estimate line and bar:
``tests/evaluation/test_summary.py``."""

import io

import pytest

from bdlkit.cli import main
from bdlkit.runs.console import NON_TTY_MININTERVAL, bar_interval, health_lines, summary_lines


@pytest.mark.parametrize("flag", ["--num-draws", "--max-test"])
def test_a_count_below_one_is_refused_in_one_line(tmp_path, capsys, flag):
    assert main(["evaluate", str(tmp_path), flag, "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{flag} must be an integer >= 1, got 0" in err


def test_summary_of_a_regression_run_and_of_passed_health():
    lines = summary_lines({"rmse": 1.5, "nll": 2.25, "mae": 1.0, "num_test": 1200,
                           "num_draws": 32, "health": {}})
    assert lines[0].startswith("  test      rmse 1.5000  nll 2.2500  mae 1.0000")
    assert "(1,200 test rows, 32 draws)" in lines[0]
    assert lines[-1] == "  run health: all checks passed"


def test_summary_shows_the_reference_agreement():
    lines = summary_lines({"accuracy": 0.9, "agreement": 0.875, "total_variation": 0.125,
                           "reference_rows": 1500})
    assert "  reference agreement 0.8750  total_variation 0.1250   (1,500 rows)" in lines


def test_failed_checks_are_listed_with_their_fix():
    lines = health_lines({"rhat": "R-hat 1.4. Fix: more steps", "ess": "ESS 3. Fix: thin"})
    assert lines == ["  run health: 2 checks failed", "  ! rhat: R-hat 1.4. Fix: more steps",
                     "  ! ess: ESS 3. Fix: thin"]
    assert health_lines(None) == []


def test_bar_redraws_rarely_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)
    assert bar_interval(io.StringIO()) == {"mininterval": NON_TTY_MININTERVAL}
    tty = type("Tty", (), {"isatty": lambda self: True})()
    assert bar_interval(tty) == {}
    monkeypatch.setenv("TQDM_MININTERVAL", "1")
    assert bar_interval(io.StringIO()) == {}


def test_summary_lists_information_after_the_health_verdict():
    """A network sampler's one-chain R-hat: information, printed apart from the failures."""
    lines = summary_lines({"accuracy": 0.9, "health": {},
                           "health_notes": {"rhat": "mean split R-hat 1.4 (information)"}})
    assert lines[-2:] == ["  run health: all checks passed",
                          "  i rhat: mean split R-hat 1.4 (information)"]
