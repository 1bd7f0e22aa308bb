"""Variational inference: score_vi (proximal score-based VI), ADVI, Fisher VI, GSM, BaM,
and the Laplace start of VI on a Target."""
