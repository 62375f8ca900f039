"""
How the partition helpers split a dataset
=========================================

The same 1,797 digits split over 10 clients by each helper in
:mod:`skfed.partition`: the share of each label on each client.
"""

# %%
# Five splits of the same labels
# ------------------------------
#
# Every helper returns one client id per sample, ready to pass as
# ``partitions=`` to any skfed estimator's ``fit``. Only the labels are needed
# to build a split, so we load them alone.
#
# * :func:`~skfed.partition.iid`: uniformly at random, equal sizes.
# * :func:`~skfed.partition.label_dirichlet`: each client's label mix drawn
#   from a Dirichlet distribution; smaller ``alpha`` means more skew.
# * :func:`~skfed.partition.power_law`: client sizes fall off as a power of
#   their rank, with labels mixed at random.
# * :func:`~skfed.partition.labels_per_client`: each group of clients sees
#   only a fixed number of labels (here 2 labels per group of 2 clients).
# * :func:`~skfed.partition.shards`: sort by label, cut into shards and deal
#   two shards to each client, so a client sees about two labels.

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from skfed import partition

_, y = load_digits(return_X_y=True)
splits = {
    "iid": partition.iid(len(y), 10, random_state=0),
    "label_dirichlet(alpha=0.3)": partition.label_dirichlet(
        y, 10, alpha=0.3, random_state=0
    ),
    "power_law(exponent=2)": partition.power_law(len(y), 10, random_state=0),
    "labels_per_client(2)": partition.labels_per_client(
        y, 2, clients_per_group=2, random_state=0
    ),
    "shards(2)": partition.shards(y, 10, random_state=0),
}

# %%
# Label counts per client
# -----------------------
#
# One panel per helper, one bar per client; each bar is stacked by label (one
# color per digit), so its height is the client's size and its colors are its
# label mix. Look for equal, multicolored bars (IID), bars of very different
# heights (power law), and bars of one or two colors (label skew).

fig, axes = plt.subplots(1, len(splits), figsize=(16, 3.5), sharey=True)
for ax, (name, ids) in zip(axes, splits.items()):
    counts = np.array(
        [np.bincount(y[ids == c], minlength=10) for c in range(ids.max() + 1)]
    )
    bottom = np.zeros(counts.shape[0])
    for label in range(10):
        ax.bar(np.arange(counts.shape[0]), counts[:, label], bottom=bottom)
        bottom += counts[:, label]
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("client")
axes[0].set_ylabel("samples (stacked by label)")
fig.tight_layout()
plt.show()
