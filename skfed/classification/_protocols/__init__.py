"""The classifier's protocols: the drivers of its rounds, their client
steps and server steps, each protocol's rounds declared at its top.

* :mod:`._critical_samples` (``method="critical_samples"``): local sparse
  duals, the pooled critical samples, refinement rounds.
* :mod:`._random_features` (``method="random_features"``): one summed
  upload of random-feature statistics per client.
* :mod:`._data_scale`: the kernel widths an int ``widths`` derives from the
  federated data scale (either method).
"""
