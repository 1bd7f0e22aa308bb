"""Layer 4, the engine: the :class:`~bdlkit.engine.runner.Runner` (the loop, logs,
checkpoints, bit-exact resume), minibatches, sample stores (``collect``), the
:class:`~bdlkit.engine.result.Result` of a run and the end-of-run VI checks."""
