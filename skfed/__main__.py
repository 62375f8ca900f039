"""Command line: ``python -m skfed demo`` (also installed as ``skfed``)."""

import argparse
import sys

from . import __version__
from ._demo import ESTIMATORS, PARTITIONS, run


def build_parser():
    parser = argparse.ArgumentParser(
        prog="skfed",
        description="Federated and distributed kernel methods with a scikit-learn API.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run every estimator beside its centralized scikit-learn counterpart",
        description=(
            "Fit each skfed estimator and its centralized scikit-learn "
            "counterpart on the same data, in the regime where it is the one "
            "to pick (synthetic data of 10,000 to 200,000 rows over 4 to 100 "
            "clients; about a minute on 2 cores), or with --small on data that ships "
            "with scikit-learn (digits, breast_cancer). Prints quality, wall "
            "time, and the floats the federated fit uploaded and downloaded "
            "(from its ledger) against the floats of the raw data."
        ),
    )
    demo.add_argument(
        "--small",
        action="store_true",
        help="small data that ships with scikit-learn instead (clients of a "
        "few hundred rows)",
    )
    demo.add_argument(
        "--clients",
        type=int,
        default=None,
        help="number of clients (default: each estimator's own, 10 to 100; "
        "10 with --small)",
    )
    demo.add_argument(
        "--partition",
        choices=PARTITIONS,
        default=None,
        help="how samples are split over clients (default: each case's own: "
        "with --small, dirichlet, label skew with alpha=0.3; on the large "
        "data, KFed's clients hold 4 of its 16 clusters each, kernel "
        "k-means' rings are split iid, the others dirichlet)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument(
        "--estimators",
        nargs="+",
        choices=ESTIMATORS,
        metavar="NAME",
        help=f"which estimators to run (default: all of {', '.join(ESTIMATORS)})",
    )
    demo.add_argument(
        "--format",
        choices=("text", "markdown", "csv"),
        default="text",
        help="table format (default: text)",
    )
    demo.add_argument("--output", metavar="FILE", help="also write the table to FILE")
    demo.add_argument(
        "--figure",
        metavar="PNG",
        help="write a PNG: quality beside scikit-learn per estimator, and "
        "uploads against the raw data (needs matplotlib)",
    )
    demo.add_argument(
        "--quiet", action="store_true", help="do not show progress on stderr"
    )
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.clients is not None and args.clients < 1:
        build_parser().error("--clients must be at least 1")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
