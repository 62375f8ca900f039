"""DistributedKernelPCA's protocols: the drivers of its rounds, their
client steps and server steps, each module's rounds declared at its top.

* :mod:`._representatives` (``solver="representatives"``, disKPCA): the
  driver, the low-rank rounds and the error round;
  :mod:`._sampling` draws its representatives, :mod:`._basis` holds what
  its clients and server compute alike.
* :mod:`._random_features` (``solver="random_features"``): one summed
  upload of random-feature statistics per client.
* :mod:`._kernel_width`: γ, and the median heuristic's round (either
  solver).
"""
