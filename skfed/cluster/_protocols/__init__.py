"""The protocols of :mod:`skfed.cluster`: each module holds one protocol's
declared rounds, its driver (run by an estimator on an open federation),
its client steps and its server steps.

- :mod:`._coreset`: distributed k-means on a coreset (``DistributedKMeans``,
  and the clustering step of kernel k-means);
- :mod:`._kfed`: k-FED's driver and server steps (``KFed``, and
  ``DistributedKMeans`` under ``raw_rows="refuse"``), with the client side
  in :mod:`._kfed_local`, its split-and-merge moves in :mod:`._kfed_moves`
  and its differentially private local step in :mod:`._kfed_private`;
- :mod:`._row_free_kmeans`: k-means from k-FED's local centers and Lloyd
  sums, sending no row (``DistributedKMeans`` and kernel k-means under
  ``raw_rows="refuse"``);
- :mod:`._kernel_kmeans`: kernel k-means by DSPGD;
  :mod:`._kernel_kmeans_one_shot`: by one round of random-feature
  statistics; :mod:`._kernel_kmeans_landmarks`: by Nyström features on the
  clients' local centers; :mod:`._kernel_kmeans_private`: its private
  Lloyd.
"""
