"""Re-evaluating a run keeps the parts it does not recompute (issue 43, item 10)."""

from bdlkit.runs.kept_metrics import KEPT, carry_over, describe, kept_figures

EARLIER = {"accuracy": 0.9, "num_draws": 100, "num_test": 540, "ood_auroc": 0.8,
           "ood_aupr": 0.7, "ood_aupr_base_rate": 0.5, "ood_data": "notmnist",
           "corruptions": {"mean": {"accuracy": 0.5}}, "agreement": 0.97,
           "total_variation": 0.03, "reference_rows": 540, "health": {}}


def test_an_evaluation_without_ood_keeps_the_earlier_ood_and_says_from_where():
    now = {"accuracy": 0.91, "num_draws": 20, "num_test": 540, "health": {}}
    merged = carry_over(EARLIER, now)
    assert merged["ood_auroc"] == 0.8 and merged["ood_data"] == "notmnist"
    assert merged["corruptions"] == EARLIER["corruptions"] and merged["agreement"] == 0.97
    assert merged["accuracy"] == 0.91 and merged["num_draws"] == 20  # recomputed ones win
    assert merged[KEPT] == {part: {"num_draws": 100, "num_test": 540}
                            for part in ("ood", "reference", "corruptions")}
    assert kept_figures(merged) == {"ood.png"}  # corruptions.png is redrawn from metrics
    assert "--ood" in describe(merged) and "100 draws" in describe(merged)
    assert KEPT not in now  # the evaluation's own dict is untouched


def test_a_recomputed_part_replaces_the_kept_one_and_provenance_survives_a_second_pass():
    once = carry_over(EARLIER, {"accuracy": 0.9, "num_draws": 20, "num_test": 540})
    twice = carry_over(once, {"accuracy": 0.9, "num_draws": 5, "num_test": 540,
                              "ood_auroc": 0.6, "ood_data": "digits"})
    assert twice["ood_auroc"] == 0.6 and "ood" not in twice[KEPT]
    assert "ood_aupr" not in twice  # nothing of the old OOD part mixes into the new one
    assert twice[KEPT]["corruptions"] == {"num_draws": 100, "num_test": 540}
    assert carry_over(None, {"accuracy": 1.0}) == {"accuracy": 1.0}
    assert describe({"accuracy": 1.0}) is None
