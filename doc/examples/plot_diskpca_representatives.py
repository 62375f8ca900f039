"""
disKPCA: error against the number of representative points
===========================================================

:class:`skfed.DistributedKernelPCA` finds the principal subspace of the
kernel matrix in the span of a few representative points Y, sampled from the
clients by generalized leverage scores and adaptively. We fit it with a
growing number of representatives ``|Y|`` and compare its error
‖φ(A) − LLᵀφ(A)‖² with the optimum (the sum of the kernel matrix's trailing
eigenvalues, computed exactly on this small data), for leverage + adaptive
sampling and for uniform sampling, together with the floats each fit sent.
The data has clusters of very different sizes and a polynomial kernel, where
the sampling scheme matters.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics.pairwise import polynomial_kernel

from skfed import DistributedKernelPCA, partition

rng = np.random.RandomState(0)
sizes, scales = [1200, 300, 60, 15], [0.3, 1.0, 3.0, 8.0]
X = np.vstack(
    [
        s * rng.standard_normal((n, 10)) + rng.standard_normal(10)
        for n, s in zip(sizes, scales)
    ]
)
ids = partition.power_law(len(X), 8, random_state=0)
k, kernel = 5, {"kernel": "poly", "degree": 2, "gamma": 1.0 / X.shape[1], "coef0": 1}

K = polynomial_kernel(X, **{p: kernel[p] for p in ("degree", "gamma", "coef0")})
optimum = np.linalg.eigvalsh(K)[::-1][k:].sum()

sizes_Y = [20, 40, 80, 160]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for sampling, marker in [("leverage+adaptive", "o"), ("uniform", "s")]:
    ratios, floats = [], []
    for m in sizes_Y:
        est = DistributedKernelPCA(
            n_components=k,
            n_representatives=m,
            sampling=sampling,
            random_state=0,
            **kernel,
        ).fit(X, partitions=ids)
        ratios.append(est.approximation_error_ / optimum)
        floats.append(est.communication_.total_floats)
    print(sampling, [f"{r:.3f}" for r in ratios])
    axes[0].plot(sizes_Y, ratios, marker=marker, label=sampling)
    axes[1].plot(floats, ratios, marker=marker, label=sampling)
axes[0].set_xlabel("representative points |Y|")
axes[1].set_xlabel("floats communicated")
axes[1].set_xscale("log")
for ax in axes:
    ax.set_ylabel("error / optimum")
    ax.axhline(1, color="k", lw=0.5)
    ax.legend()
fig.tight_layout()
plt.show()
