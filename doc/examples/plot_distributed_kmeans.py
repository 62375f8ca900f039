"""
Distributed k-means through a coreset
=====================================

:class:`skfed.DistributedKMeans` clusters data spread over clients in three
rounds (Balcan, Ehrlich & Liang, 2013): every client sends the cost of its
own local k-means solution, the server splits a budget of ``coreset_size``
sample points between the clients in proportion to those costs, and each
client uploads that many points drawn by D² sampling, with weights, plus its
local centers. The server runs weighted k-means on this small summary, the
*coreset*, and the clients label their own points. The upload depends on the
coreset size, not on the number of samples.

We compare its k-means cost with :class:`~sklearn.cluster.KMeans` on the
pooled data, on blobs split very unevenly over ten clients.
"""

# %%
# Blobs split with label skew
# ---------------------------
#
# 20,000 points in 10 dimensions from 8 Gaussian blobs.
# :func:`skfed.partition.label_dirichlet` with ``alpha=0.3`` gives each client
# a skewed mix: a few blobs dominate, others are nearly or wholly missing, and
# the clients' sizes differ by a factor of three. The figure shows which blobs
# each client holds (one color per blob).

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skfed import DistributedKMeans, partition

k = 8
X, y = make_blobs(20_000, n_features=10, centers=k, cluster_std=1.5, random_state=0)
ids = partition.label_dirichlet(y, 10, alpha=0.3, random_state=0)

counts = np.array([np.bincount(y[ids == c], minlength=k) for c in range(10)])
fig, ax = plt.subplots(figsize=(6, 3))
bottom = np.zeros(10)
for blob in range(k):
    ax.bar(np.arange(10), counts[:, blob], bottom=bottom)
    bottom += counts[:, blob]
ax.set_xlabel("client")
ax.set_ylabel("points (stacked by blob)")
fig.tight_layout()
plt.show()

# %%
# One fit against pooled k-means
# ------------------------------
#
# The reference is :class:`~sklearn.cluster.KMeans` with 10 restarts on the
# pooled data. ``inertia_`` of the federated fit is its exact k-means cost on
# all 20,000 points (each client adds its share in the labelling round), so
# the ratio of the two costs measures what the coreset summary lost.

reference = KMeans(k, n_init=10, random_state=0).fit(X)
est = DistributedKMeans(k, coreset_size=300, random_state=0).fit(X, partitions=ids)
log = est.communication_
print(f"cost ratio to pooled KMeans: {est.inertia_ / reference.inertia_:.4f}")
print(
    f"uploaded {log.upload_floats:,} floats in {log.n_upload_rounds} rounds; "
    f"raw data: {X.size:,} floats"
)
print(log.summary())

# %%
# Coreset size against cost
# -------------------------
#
# A larger coreset is a more faithful summary and a larger upload. We sweep
# ``coreset_size``, with and without one round of distributed Lloyd
# (``refine_iter=1``: each client sends its per-cluster sums and counts,
# k(d + 1) floats, and the server moves every center to the exact mean of its
# cluster). Read the figure from left to right: the cost ratio falls towards
# 1 as the upload grows, and one refinement round brings it to 1 for a small
# extra upload. The dotted line is the size of the raw data.

sizes = [50, 100, 300, 1000, 3000]
fig, ax = plt.subplots(figsize=(6, 4))
for refine_iter, marker in [(0, "o"), (1, "s")]:
    uploads, ratios = [], []
    for size in sizes:
        fit = DistributedKMeans(
            k, coreset_size=size, refine_iter=refine_iter, random_state=0
        ).fit(X, partitions=ids)
        uploads.append(fit.communication_.upload_floats)
        ratios.append(fit.inertia_ / reference.inertia_)
    # One line per coreset size, so the output reads in a narrow column.
    print(f"refine_iter={refine_iter}:")
    for u, r in zip(uploads, ratios):
        print(f"  {u:>7,} floats up -> cost ratio {r:.4f}")
    ax.plot(uploads, ratios, marker=marker, label=f"refine_iter={refine_iter}")
ax.axvline(X.size, ls=":", color="k", label="raw data size")
ax.axhline(1, color="k", lw=0.5)
ax.set_xscale("log")
ax.set_xlabel("floats uploaded")
ax.set_ylabel("cost / pooled KMeans cost")
ax.legend()
fig.tight_layout()
plt.show()
