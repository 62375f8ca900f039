"""Empirical lower bounds on epsilon for every private release.

For each release of :data:`skfed._dp_audit.RELEASES` (KFed's DP Lloyd
upload, DistributedKernelPCA's and FederatedKernelKMeans' random-feature
statistics, FederatedKernelKMeans' private cells and Lloyd sums,
FederatedStandardScaler's sums, the row-free FederatedRKHSClassifier's
statistics), the
audit of ``skfed._dp_audit``: one client, D and D' differing by one row
replaced by a canary at the clipping bound, ``--trials`` runs of the
release on each with fresh noise, a threshold test on the release's
projection on the canary's direction, and Clopper-Pearson bounds (each at
97.5%) on its false-positive and false-negative rates. Each release is
audited with its calibrated noise, and with a tenth of it to show what
the audit can detect.

Usage::

    python benchmarks/privacy_audit.py [--trials 20000] [--epsilon 1]
        [--only NAME ...] [--out privacy_audit.md]

Prints a table and writes it to ``privacy_audit.md`` (or ``--out``) in the
results folder (``_results.py``), outside the repository.
"""

import argparse
import time
from pathlib import Path

from _results import results_dir

from skfed._dp_audit import RELEASES, audit

RESULTS = results_dir()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "privacy_audit.md")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(RELEASES), help="audit these releases"
    )
    args = parser.parse_args(argv)

    lines = [
        f"Empirical audit: {args.trials:,} trials on each of D and D' per "
        f"release, fits at epsilon = {args.epsilon:g}, delta = 1e-5.",
        "",
        "| release | claimed epsilon | lower bound | lower bound, noise / 10 |",
        "|---|---|---|---|",
    ]
    start = time.perf_counter()
    for name, make in RELEASES.items():
        if args.only and name not in args.only:
            continue
        release = make(epsilon=args.epsilon)
        full = audit(release, args.trials)
        weak = audit(release, args.trials, noise_scale=0.1)
        lines.append(
            f"| {release.name} | {full.claimed:.3f} | {full.lower_bound:.3f} "
            f"| {weak.lower_bound:.3f} |"
        )
        print(lines[-1], flush=True)
    lines += ["", f"{time.perf_counter() - start:.0f} s."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:4] + lines[-1:]))


if __name__ == "__main__":
    main()
