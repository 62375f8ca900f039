"""Command line: ``python -m skfed demo``."""

import argparse
import sys
import time

import numpy as np

PARTITIONS = ("iid", "dirichlet", "power-law", "labels-per-client", "shards")


def _partition(name, y, n_clients, seed):
    from . import partition

    if name == "iid":
        return partition.iid(len(y), n_clients, random_state=seed)
    if name == "dirichlet":
        return partition.label_dirichlet(y, n_clients, alpha=0.3, random_state=seed)
    if name == "power-law":
        return partition.power_law(len(y), n_clients, random_state=seed)
    if name == "labels-per-client":
        k = len(np.unique(y))
        per_group = max(1, n_clients // -(-k // 2))
        return partition.labels_per_client(
            y, 2, clients_per_group=per_group, random_state=seed
        )
    return partition.shards(y, n_clients, random_state=seed)


def demo(args, out=sys.stdout):
    """Split digits over clients and run the federated kernel-width round."""
    from sklearn.datasets import load_digits
    from sklearn.metrics import euclidean_distances

    from ._federation import Federation
    from ._validation import check_partitions
    from .kernel import gamma_from_moments, moments_step

    X, y = load_digits(return_X_y=True)
    ids = _partition(args.partition, y, args.clients, args.seed)
    parts = check_partitions(ids, len(y))
    print(
        f"digits: {X.shape[0]} samples x {X.shape[1]} features over "
        f"{parts.n_clients} clients ({args.partition} split)",
        file=out,
    )
    print(f"client sizes: {parts.sizes.tolist()}", file=out)
    labels = [len(np.unique(y[idx])) for idx in parts.indices]
    print(f"labels per client: {labels}", file=out)

    start = time.perf_counter()
    with Federation.from_arrays(X, None, parts, random_state=args.seed) as fed:
        gamma = gamma_from_moments(fed.run_round("moments", moments_step))
    elapsed = time.perf_counter() - start
    exact = 1 / (2 * np.mean(euclidean_distances(X, squared=True)))
    print(
        f"\nfederated kernel width gamma = {gamma:.6g} "
        f"(centralized: {exact:.6g}) in {elapsed * 1e3:.1f} ms",
        file=out,
    )
    print(f"\n{fed.log.summary()}", file=out)
    raw = X.size
    print(
        f"\nuploaded {fed.log.upload_floats:,} floats instead of the "
        f"{raw:,} of the raw data ({fed.log.upload_floats / raw:.2%})",
        file=out,
    )
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="skfed", description="Federated kernel methods with a scikit-learn API."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="split a dataset over clients and run skfed")
    p.add_argument("--clients", type=int, default=10, help="number of clients")
    p.add_argument(
        "--partition", choices=PARTITIONS, default="dirichlet", help="client split"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
