"""Learning to Explore (L2E, Kim et al., ICML 2024): the meta-learned kinetic energy,
its meta-training and the meta-parameters that ship with bdlkit.

* :mod:`.kinetic`: the kinetic energies and one update (shared by the sampler and
  training); :mod:`.features`: the features and the MLP over them, by chunks;
* :mod:`.pretrained`: meta-parameter files and :func:`load_pretrained`;
* :mod:`.tasks`, :mod:`.es`, :mod:`.meta_train`: the task distribution, the antithetic ES
  gradient and the outer loop of ``bdlkit meta-train l2e``.

The sampler itself is :mod:`bdlkit.algorithms.sgmcmc.l2e` (``bdlkit fit --method l2e``).
"""

from bdlkit.l2e.kinetic import (
           Constants,
           IdentityKinetic,
           LearnedKinetic,
           init_meta_params,
           l2e_update,
)
from bdlkit.l2e.pretrained import Pretrained, load_meta_params, load_pretrained, save_meta_params

__all__ = ["Constants", "IdentityKinetic", "LearnedKinetic", "Pretrained", "init_meta_params",
           "l2e_update", "load_meta_params", "load_pretrained", "save_meta_params"]
