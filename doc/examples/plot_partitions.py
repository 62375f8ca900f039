"""
How the partition helpers split a dataset
=========================================

The same 1,797 digits split over 10 clients by each helper in
:mod:`skfed.partition`: the share of each label on each client.
"""

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
