"""Layer 5, runs: :class:`~bdlkit.runs.config.RunConfig`, run directories (``bdlkit fit``
and ``bdlkit evaluate``), their reports and figures, HMC reference runs, and
``bdlkit.load``."""
