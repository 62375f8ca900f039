"""Differential privacy for federated fits: settings, clipping, noise, accounting.

An estimator that offers differential privacy takes ``privacy=None`` (off)
or a :class:`DifferentialPrivacy`. With it, every statistic a client
uploads is computed from rows whose influence is bounded (clipped to the
data bounds, or random features of bounded norm) and receives Gaussian
noise on the client, before it leaves the site; an accountant from Google's
``dp-accounting`` composes every noised release of the fit and the fitted
estimator reports what was spent in ``privacy_spent_``.

The guarantee is **sample-level, replace-one**: two data sets are
neighbours when one row of one client is replaced by any other row, every
client's size n_m unchanged (the sizes are public: the server learns them
before the first round). The whole fit, everything every client sends in
every round, is ``(epsilon, delta)``-differentially private for each row
under that adjacency. Each release's L2 sensitivity Δ is derived for it:

* a sum of rows clipped into a box of radius R (``box_radius``): 2R, the
  box's diameter; a row count: 0 (n_m is public; it is sent without noise);
* per-cluster sums and counts (one row moves from one cluster to another):
  max(2R, √(2(R² + c²))) with the counts scaled by c, which is 2R for
  c ≤ R (:func:`skfed.cluster._protocols._kfed_private.release_scales`);
* the upper triangle (diagonal included) of Σ z zᵀ over random features of
  norm at most R and coordinates of square at most m²: R √(R² + m²)
  (:func:`skfed.kernel._private_features.gram_sensitivity`).

Each client draws its noise from a generator seeded with fresh operating
system entropy for every release (:func:`noise_generator`), never from
``random_state``, from anything the server sends or from the data: the
server cannot recompute it, so a private fit is not reproducible (its
non-private parts still follow ``random_state``). Each client adds its own
noise, so the guarantee holds against the server and anyone who sees the
uploads. Under secure aggregation, a masked release's noise is added in
shares instead (:mod:`skfed.privacy._distributed`): the sum carries the
central mechanism's noise, and the guarantee assumes that at least
``DifferentialPrivacy.honest_clients`` clients of each sum keep their
shares from the server. Rows live on one client each,
so the clients' releases compose in parallel: the accountant composes the
releases of one client.

The package's modules: ``_mechanisms`` (the settings, the clipping box, the
noise), ``_accountant`` (calibration and composition), ``_budget`` (a budget
shared by several fits), ``_errors``, ``_secure_aggregation`` (pairwise
masks and sums over clients), ``_refusal`` (the minimum of distinct rows
behind a statistic under ``raw_rows="refuse"``). The federation engine
applies them to the rounds the protocols declare; nothing here imports the
engine. The empirical audit of the private releases, which runs the
estimators' steps, sits above the estimators (``skfed._dp_audit``).
"""

# Re-exports only. The names imported "as" themselves are not public API:
# the parts the estimators' protocols and the engine use, importable from
# the package.
from ._accountant import Accountant as Accountant
from ._budget import BudgetEntry, PrivacyBudget
from ._distributed import summed_noise_std as summed_noise_std
from ._errors import PrivacyBudgetError, PrivacyLeakWarning
from ._mechanisms import DifferentialPrivacy
from ._mechanisms import box_radius as box_radius
from ._mechanisms import check_privacy as check_privacy
from ._mechanisms import clip_to_box as clip_to_box
from ._mechanisms import concatenate_releases as concatenate_releases
from ._mechanisms import feature_bounds as feature_bounds
from ._mechanisms import gaussian_noise as gaussian_noise
from ._mechanisms import noise_generator as noise_generator

__all__ = [
    "BudgetEntry",
    "DifferentialPrivacy",
    "PrivacyBudget",
    "PrivacyBudgetError",
    "PrivacyLeakWarning",
]
