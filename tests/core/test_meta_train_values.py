"""Issue 45, item 1 for ``bdlkit meta-train``: its float options (L2E's and Meta-SGMCMC's
outer and sampler constants) obey bdlkit's range of float values
(:mod:`bdlkit.core.value_range`). Before, ``--lr 1e308`` or ``--sigma 1e-320`` ended in
"meta-parameter w0 is not finite" and ``--eps 1e308`` meta-trained to a NaN meta-loss
with exit 0; now each is one line naming the option and the range, before any task is
loaded."""

from __future__ import annotations

import pytest

from bdlkit.core.value_range import SPAN
from bdlkit.l2e.kinetic import Constants as L2EConstants
from bdlkit.meta_sgmcmc.dynamics import Constants as MetaConstants
from test_cli_errors import _assert_one_error_line, _run

CASES = {
    "l2e-lr-1e308": (["l2e", "--lr", "1e308"], "lr"),
    "l2e-sigma-1e-320": (["l2e", "--sigma", "1e-320"], "sigma"),
    "l2e-eps-1e308": (["l2e", "--eps", "1e308"], "eps"),
    "l2e-grad-scale-1e308": (["l2e", "--grad-scale", "1e308"], "grad_scale"),
    "l2e-friction-1e308": (["l2e", "--friction", "1e308"], "friction"),
    "l2e-noise-mult-1e-300": (["l2e", "--noise-mult", "1e-300"], "noise_mult"),
    "meta-sgmcmc-step-mult-1e308": (["meta-sgmcmc", "--step-mult", "1e308"], "step_mult"),
    "meta-sgmcmc-init-std-1e-320": (["meta-sgmcmc", "--init-std", "1e-320"], "init_std"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_extreme_meta_train_option_is_one_line_naming_it_and_the_range(case, tmp_path,
                                                                          capsys):
    argv, name = CASES[case]
    rc = _run(["meta-train", *argv, "--out", str(tmp_path / "meta"), "--outer-steps", "1"]
              if argv[0] == "l2e" else
              ["meta-train", *argv, "--out", str(tmp_path / "meta"), "--epochs", "1"])
    _assert_one_error_line(rc, capsys.readouterr().err, [name, SPAN])
    assert not (tmp_path / "meta").exists()  # refused before anything was written


def test_zero_stays_allowed_where_the_constant_may_be_zero():
    assert L2EConstants(friction=0.0, noise_mult=0.0).friction == 0.0
    assert MetaConstants(d_q_mult=0.0).d_q_mult == 0.0
