"""bench l2e-precision: the float32 row is its own reference, the bfloat16 row is measured
against it, and the verdict follows the rule the suite states."""

import json

from bdlkit.bench import l2e_precision


def test_the_suite_measures_both_precisions_and_states_a_verdict(tmp_path):
    rows = l2e_precision.run(tmp_path, quick=True, echo=False, rounds=1, warmup=2)
    fp32, bf16 = rows
    assert fp32["case"] == "float32" and fp32["vs_float32"] == 1.0
    assert fp32["alpha_rel_rms_error"] == 0 and fp32["beta_rel_rms_error"] == 0
    assert 0 < bf16["beta_rel_rms_error"] < 0.2 and 0 < bf16["alpha_rel_rms_error"] < 0.2
    assert bf16["within_tolerance"] == (max(bf16["alpha_rel_rms_error"],
                                            bf16["beta_rel_rms_error"])
                                        <= l2e_precision.TOLERANCE)
    saved = json.loads((tmp_path / "results.json").read_text())
    faster = bf16["vs_float32"] < 0.9
    expected = ("bfloat16 pays" if faster and bf16["within_tolerance"] else
                "bfloat16 does not pay" if not faster else "inconclusive")
    assert saved["verdict"].split(":")[0] == expected
    assert "bdlkit bench l2e-precision --quick" in (tmp_path / "results.md").read_text()
