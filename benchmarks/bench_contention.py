"""Fit times on a busy machine: each estimator alone and beside CPU burners.

Every estimator of the demo (``python -m skfed demo``: its data, its
parameters and its scikit-learn counterpart, see ``skfed/_demo.py``) is
fitted in a fresh process, once on an otherwise idle machine ("quiet") and
once while two processes spin in pure Python for the whole fit
("contended"): on 2 cores, another program that keeps both cores busy.
BLAS keeps its default threads (one per core), as a user's would: that is
the setting under test, so this benchmark does not pin BLAS as the others
do.

For each estimator: the skfed fit's quiet and contended times, its
slowdown (contended / quiet), the scikit-learn counterpart's slowdown in the
same processes, and the ratio of the two slowdowns (target: at most 1.5).
Each figure is the median of ``--repeats`` runs (3), the runs of one
estimator alternating quiet and contended. With ``--baseline PATH`` the
same runs are made with skfed imported from PATH (another checkout, e.g.
the commit before a change), alternating with this one's, so that "before"
and "after" share the machine's conditions.

Other programs on the machine add to the contention and make the absolute
times noisy; the ratios are measured within one run. The report records
the load average before and after, the BLAS library and its kernel
(threadpoolctl), and ``OPENBLAS_CORETYPE``, which some machines set and
which changes the kernel OpenBLAS runs.

``--quick`` runs the demo's small data (``demo --small``: digits,
breast_cancer; a few seconds a fit) instead of its large data (about a
minute for the five estimators on a quiet 2-core machine).

Usage::

    python benchmarks/bench_contention.py [--quick] [--repeats 3]
        [--only KFed ...] [--baseline PATH]
"""

import argparse
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _results import results_dir
from run import _git_commit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = results_dir()
ESTIMATORS = (
    "KFed",
    "DistributedKMeans",
    "FederatedKernelKMeans",
    "DistributedKernelPCA",
    "FederatedRKHSClassifier",
)
# The number of burner processes: one per core of the 2-core machine this
# was written on; ``--burners`` changes it.
BURNERS = 2
TARGET = 1.5


def _spin(stop, parent):
    """Pure-Python work until ``stop`` is set, or the benchmark is gone: a
    program that holds a core."""
    x = 0
    while not stop.is_set() and os.getppid() == parent:
        for i in range(100_000):
            x += i


class Burners:
    """``n`` processes spinning for as long as the ``with`` block runs."""

    def __init__(self, n):
        self.n = n
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._procs = [
            context.Process(target=_spin, args=(self._stop, os.getpid()), daemon=True)
            for _ in range(n)
        ]

    def __enter__(self):
        for proc in self._procs:
            proc.start()
        time.sleep(0.5)  # let them start spinning before the fit starts
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        for proc in self._procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()


def case(name, quick):
    """Run the demo's case for ``name`` in this process; its times."""
    import skfed
    from skfed._demo import CASES

    args = argparse.Namespace(small=quick, partition="dirichlet", clients=None, seed=0)
    row = CASES[name](args)
    return {
        "skfed": row.skfed_seconds,
        "sklearn": row.sklearn_seconds,
        "quality": [row.skfed, row.sklearn],
        "skfed_from": str(Path(skfed.__file__).parent.parent),
    }


def measure(name, quick, code, contended, burners):
    """One case in a fresh process with skfed imported from ``code``,
    beside ``burners`` spinning processes when ``contended``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    command = [sys.executable, __file__, "--case", name]
    if quick:
        command.append("--quick")

    def run():
        out = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False
        )
        if out.returncode:
            raise RuntimeError(f"{name} failed under {code}:\n{out.stderr}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if Path(result["skfed_from"]).resolve() != Path(code).resolve():
            raise RuntimeError(f"skfed came from {result['skfed_from']}, not {code}")
        return result

    if not contended:
        return run()
    with Burners(burners):
        return run()


def _load():
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def _blas():
    """The BLAS libraries numpy and scipy load here, their kernel and
    default threads."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_info

    return "; ".join(
        f"{lib['internal_api']} {lib.get('version')} "
        f"({lib.get('architecture')}, {lib['num_threads']} threads)"
        for lib in threadpool_info()
        if lib["user_api"] == "blas"
    )


def _cpu():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def summarise(runs):
    """Medians per estimator from ``runs``: (estimator, contended) ->
    list of measurements."""
    rows = {}
    for (name, contended), values in runs.items():
        row = rows.setdefault(name, {})
        key = "contended" if contended else "quiet"
        row[f"skfed_{key}"] = statistics.median(v["skfed"] for v in values)
        row[f"sklearn_{key}"] = statistics.median(v["sklearn"] for v in values)
    for row in rows.values():
        row["skfed_slowdown"] = row["skfed_contended"] / row["skfed_quiet"]
        row["sklearn_slowdown"] = row["sklearn_contended"] / row["sklearn_quiet"]
        row["ratio"] = row["skfed_slowdown"] / row["sklearn_slowdown"]
    return rows


def table(rows, names):
    lines = [
        "| estimator | skfed quiet s | skfed contended s | skfed slowdown "
        "| sklearn quiet s | sklearn contended s | sklearn slowdown "
        f"| ratio (target <= {TARGET}) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        r = rows[name]
        mark = "" if r["ratio"] <= TARGET else " (over)"
        lines.append(
            f"| {name} | {r['skfed_quiet']:.2f} | {r['skfed_contended']:.2f} "
            f"| {r['skfed_slowdown']:.2f}x | {r['sklearn_quiet']:.2f} "
            f"| {r['sklearn_contended']:.2f} | {r['sklearn_slowdown']:.2f}x "
            f"| {r['ratio']:.2f}{mark} |"
        )
    return "\n".join(lines)


def comparison(after, before, names):
    """This code against the baseline: quiet and contended skfed times."""
    lines = [
        "| estimator | quiet s before | quiet s after | after / before "
        "| contended s before | contended s after | after / before "
        "| ratio before | ratio after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        a, b = after[name], before[name]
        lines.append(
            f"| {name} | {b['skfed_quiet']:.2f} | {a['skfed_quiet']:.2f} "
            f"| {a['skfed_quiet'] / b['skfed_quiet']:.2f} "
            f"| {b['skfed_contended']:.2f} | {a['skfed_contended']:.2f} "
            f"| {a['skfed_contended'] / b['skfed_contended']:.2f} "
            f"| {b['ratio']:.2f} | {a['ratio']:.2f} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the demo's small data")
    parser.add_argument("--only", nargs="+", choices=ESTIMATORS, default=ESTIMATORS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--burners", type=int, default=BURNERS)
    parser.add_argument(
        "--baseline", type=Path, help="a checkout of skfed to compare with"
    )
    parser.add_argument("--out", type=Path, help="the report (markdown)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Stopped from outside, leave through the burners' __exit__.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.case:
        print(json.dumps(case(args.case, args.quick)))
        return
    codes = {"after": ROOT}
    if args.baseline is not None:
        codes = {"before": args.baseline.resolve(), "after": ROOT}
    profile = "quick (demo --small data)" if args.quick else "full (demo data)"
    load_before = _load()
    start = time.perf_counter()
    runs = {label: {} for label in codes}
    for repeat in range(args.repeats):
        for name in args.only:
            for label, code in codes.items():
                for contended in (False, True):
                    result = measure(name, args.quick, code, contended, args.burners)
                    runs[label].setdefault((name, contended), []).append(result)
                    print(
                        f"[{repeat + 1}/{args.repeats}] {name:24s} {label:6s} "
                        f"{'contended' if contended else 'quiet':9s} "
                        f"skfed {result['skfed']:7.2f} s  "
                        f"sklearn {result['sklearn']:7.2f} s",
                        flush=True,
                    )
    summaries = {label: summarise(r) for label, r in runs.items()}
    coretype = os.environ.get("OPENBLAS_CORETYPE", "not set")
    parts = [
        "# bench_contention: fit times beside CPU burners",
        f"Profile: {profile}; {args.repeats} repeats, medians; "
        f"{args.burners} burner processes (pure Python) for each contended "
        f"fit. {_cpu()}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}. BLAS: {_blas()}; "
        f"OPENBLAS_CORETYPE {coretype}; BLAS threads left at their default. "
        f"Load average (1/5/15 min) {load_before} before, {_load()} after; "
        f"total {time.perf_counter() - start:.0f} s.",
        "Slowdown: contended time over quiet time, both medians. Ratio: "
        "skfed's slowdown over its scikit-learn counterpart's, measured in "
        "the same processes. Other programs on the machine add to the "
        "contention, so quiet times are only quiet relative to the "
        "contended ones.",
    ]
    for label, code in codes.items():
        parts += [
            f"## {label}: skfed from {code} (commit {_git_commit(code)})",
            table(summaries[label], args.only),
        ]
    if args.baseline is not None:
        parts += [
            "## after against before (skfed fit times, same run)",
            comparison(summaries["after"], summaries["before"], args.only),
        ]
    text = "\n\n".join(parts) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / (
        "bench_contention_quick.md" if args.quick else "bench_contention.md"
    )
    out.write_text(text)
    print(text)
    print(f"report written to {out}")


if __name__ == "__main__":
    main()
