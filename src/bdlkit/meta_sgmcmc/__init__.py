"""Meta-SGMCMC (NNSGHMC; Gong, Li & Hernández-Lobato, ICLR 2019): the learned curl and
diffusion networks, their meta-training and the meta-parameters that ship with bdlkit.

* :mod:`.dynamics`: Q_f, D_f, the correction Γ (autograd or finite differences) and one step;
* :mod:`.stein`: the Stein gradient estimator and the cross-chain KL surrogate;
* :mod:`.pretrained`: meta-parameter files and :func:`load_pretrained`;
* :mod:`.meta_train`: truncated-BPTT meta-training, ``bdlkit meta-train meta-sgmcmc``.

The sampler itself is :mod:`bdlkit.algorithms.sgmcmc.meta_sgmcmc` (``--method meta_sgmcmc``).
"""

from bdlkit.meta_sgmcmc.dynamics import Constants, init_meta_params
from bdlkit.meta_sgmcmc.pretrained import (
    Pretrained,
    load_meta_params,
    load_pretrained,
    save_meta_params,
)

__all__ = ["Constants", "Pretrained", "init_meta_params", "load_meta_params",
           "load_pretrained", "save_meta_params"]
