"""FederatedRKHSClassifier against SVC on the paper's synthetic experiment.

In one run, on the same data and the same partitions:

1. Growth (paper Figure 2): federated (PF) and centralized (PC) accuracy,
   and SVC's, as the training size grows; share of samples sent.
2. Sparsity sweep (paper Figures 5-6): accuracy, number of kernels and
   communication (samples and floats sent) as γ rises, PF and PC.
3. Side by side with SVC at N = 2k, 5k, 10k: accuracy, fit and predict time
   as ratios to SVC's, kernels against SVC's support vectors, share of
   samples sent, peak traced memory of the fit.
4. Dual solvers on the centralized problem: the active-set solver, FISTA
   and the paper's fixed-step projected ascent — iterations, time, dual
   value reached on the whole dictionary, primal value of the refitted
   support, kernels and accuracy.

Data (the paper's set-up, its constants lost in extraction): x uniform on
[0, 1]², y = 1 if x₂ > 0.5 + 0.25 sin(2π x₁), 8 clients on overlapping
vertical strips (each strip overlaps half of its neighbours), each sample
given to one of the clients whose strip holds it, then Gaussian noise
(σ = 0.05) added to the features.

BLAS is pinned to one thread; the machine is shared, so wall times are
noisy and only their ratios to SVC's, measured in the same run, mean
something.

Usage::

    python benchmarks/bench_rkhs.py [--quick] [--repeats R] [--versus-svc]

``--versus-svc`` runs only section 3 (the tables of the RKHS design notes'
"Measured against SVC" and the fit-time figures of the user guide).
"""

import argparse
import os
import platform
import time
import tracemalloc
import warnings

import numpy as np
from _results import results_dir
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from skfed import FederatedRKHSClassifier
from skfed._testing import rkhs_paper_data
from skfed.classification._solvers._active_set import active_set_dual
from skfed.classification._solvers._dual import dual_value
from skfed.classification._solvers._fista import solve_sparse_dual
from skfed.classification._solvers._svm import dense_dual
from skfed.kernel._multiwidth import AtomDictionary, gaussian_atoms

RESULTS = results_dir()
N_CLIENTS = 8


def paper_data(n, *, seed):
    return rkhs_paper_data(n, n_clients=N_CLIENTS, seed=seed)


def timed(fn, repeats=1):
    best, out = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def table(rows, columns):
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def fit_rkhs(X, y, partitions, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = FederatedRKHSClassifier(random_state=0, **params)
        return clf.fit(X, y, partitions=partitions)


def growth(sizes, repeats, X_test, y_test):
    rows = []
    for n in sizes:
        acc = {"PF": [], "PC": [], "SVC": []}
        sent = []
        for rep in range(repeats):
            X, y, parts = paper_data(n, seed=100 + rep)
            pf = fit_rkhs(X, y, parts)
            pc = fit_rkhs(X, y, None)
            acc["PF"].append(pf.score(X_test, y_test))
            acc["PC"].append(pc.score(X_test, y_test))
            acc["SVC"].append(SVC().fit(X, y).score(X_test, y_test))
            sent.append(pf.n_samples_sent_ / n)
        rows.append(
            {
                "N": n,
                "per client": n // N_CLIENTS,
                "PF acc": f"{np.mean(acc['PF']):.4f}",
                "PC acc": f"{np.mean(acc['PC']):.4f}",
                "SVC acc": f"{np.mean(acc['SVC']):.4f}",
                "PF - PC": f"{np.mean(acc['PF']) - np.mean(acc['PC']):+.4f}",
                "sent": f"{np.mean(sent):.1%}",
                "_acc": {k: float(np.mean(v)) for k, v in acc.items()},
            }
        )
    return rows


def sparsity_sweep(n, gammas, X_test, y_test):
    X, y, parts = paper_data(n, seed=7)
    svc = SVC().fit(X, y)
    rows = []
    for gamma in gammas:
        pf = fit_rkhs(X, y, parts, sparsity=gamma)
        pc = fit_rkhs(X, y, None, sparsity=gamma)
        rows.append(
            {
                "γ": gamma,
                "PF acc": f"{pf.score(X_test, y_test):.4f}",
                "PC acc": f"{pc.score(X_test, y_test):.4f}",
                "PF kernels": pf.n_kernels_,
                "PC kernels": pc.n_kernels_,
                "PF sent": f"{pf.n_samples_sent_} ({pf.n_samples_sent_ / n:.0%})",
                "PF floats up": pf.communication_.upload_floats,
                "PF floats down": pf.communication_.download_floats,
                "PC floats up": pc.communication_.upload_floats,
                "_plot": (
                    gamma,
                    pf.score(X_test, y_test),
                    pc.score(X_test, y_test),
                    pf.n_kernels_,
                    pc.n_kernels_,
                    pf.n_samples_sent_ / n,
                ),
            }
        )
    return rows, svc.score(X_test, y_test), int(svc.n_support_.sum())


def versus_svc(sizes, pc_max, repeats, X_test, y_test):
    rows = []
    for n in sizes:
        X, y, parts = paper_data(n, seed=11)
        svc_fit, svc = timed(lambda X=X, y=y: SVC().fit(X, y), repeats)
        svc_pred, _ = timed(lambda svc=svc: svc.predict(X_test), repeats)
        svc_acc = svc.score(X_test, y_test)
        n_sv = int(svc.n_support_.sum())
        rows.append(
            {
                "N": n,
                "model": "SVC",
                "acc": f"{svc_acc:.4f}",
                "Δacc vs SVC": "",
                "kernels": n_sv,
                "SV / kernels": "",
                "fit s": f"{svc_fit:.3f}",
                "fit / SVC": "1",
                "predict s": f"{svc_pred:.4f}",
                "predict speed-up": "1",
                "sent": "100%",
                "peak MB": "",
            }
        )
        for name, parts_ in (("PF", parts), ("PC", None)):
            if name == "PC" and n > pc_max:
                continue
            fit_time, clf = timed(lambda X=X, y=y, p=parts_: fit_rkhs(X, y, p), repeats)
            pred_time, _ = timed(lambda clf=clf: clf.predict(X_test), repeats)
            acc = clf.score(X_test, y_test)
            tracemalloc.start()
            fit_rkhs(X, y, parts_)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            rows.append(
                {
                    "N": n,
                    "model": name,
                    "acc": f"{acc:.4f}",
                    "Δacc vs SVC": f"{acc - svc_acc:+.4f}",
                    "kernels": clf.n_kernels_,
                    "SV / kernels": f"{n_sv / max(clf.n_kernels_, 1):.1f}",
                    "fit s": f"{fit_time:.3f}",
                    "fit / SVC": f"{fit_time / svc_fit:.1f}",
                    "predict s": f"{pred_time:.4f}",
                    "predict speed-up": f"{svc_pred / pred_time:.1f}",
                    "sent": f"{clf.n_samples_sent_ / n:.1%}",
                    "peak MB": f"{peak:.0f}",
                }
            )
    return rows


def solvers(n, X_test, y_test, ascent_iter):
    """The server's sparse solve on the centralized problem, solver by solver.

    D is evaluated on the whole dictionary at the λ each solver returns
    (FISTA's own trace holds values of restricted candidate problems); P is
    the sparse primal of the refitted model on the selected atoms.
    """
    X, y, _ = paper_data(n, seed=13)
    ypm = np.where(y == 1, 1.0, -1.0)
    clf = fit_rkhs(X, y, None, refinement_rounds=0)  # for the widths
    gamma, beta, upper = clf.sparsity, 1 - clf.sparsity, clf.C
    dictionary = AtomDictionary(X, X, clf.widths_)
    common = {"gamma": gamma, "epsilon": 0.0, "upper": upper}
    runs = {
        "active-set": lambda: active_set_dual(
            dictionary, ypm, max_iter=1000, tol=1e-4, **common
        ),
        "fista (1/L, restart)": lambda: solve_sparse_dual(
            dictionary, ypm, bias=True, max_iter=ascent_iter, tol=1e-6, **common
        ),
        "projected ascent (1/L)": lambda: solve_sparse_dual(
            dictionary,
            ypm,
            bias=True,
            max_iter=ascent_iter,
            tol=1e-6,
            accelerate=False,
            **common,
        ),
    }
    rows = []
    for name, run in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            seconds, result = timed(run)
        c = dictionary.rmatvec(ypm * result["lam"])
        value = dual_value(result["lam"], c, gamma=gamma, beta=beta, epsilon=0.0)
        atoms = result["atoms"]
        Phi = dictionary.columns(atoms)
        fit = dense_dual(
            Phi,
            ypm,
            beta=beta,
            epsilon=0.0,
            upper=upper,
            bias=True,
            max_iter=1000,
            tol=1e-4,
        )
        f = Phi.astype(np.float64) @ fit["coef"] + fit["intercept"]
        primal = (
            gamma * len(atoms)
            + 0.5 * beta * fit["coef"] @ fit["coef"]
            + upper * np.maximum(1 - ypm * f, 0).sum()
        )
        test = (
            gaussian_atoms(
                X_test, dictionary.atom_centers(atoms), dictionary.atom_widths(atoms)
            ).astype(np.float64)
            @ fit["coef"]
            + fit["intercept"]
        )
        rows.append(
            {
                "solver": name,
                "iterations": result["n_iter"],
                "converged": result["converged"],
                "time s": f"{seconds:.2f}",
                "D(λ) (full dictionary)": f"{value:.3f}",
                "P of refitted support": f"{primal:.3f}",
                "kernels": len(atoms),
                "acc": f"{np.mean((test > 0) == (y_test == 1)):.4f}",
            }
        )
    return rows


def plots(growth_rows, sweep_rows, svc_acc, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ns = [r["N"] for r in growth_rows]
    for key, style in (("PF", "o-"), ("PC", "s--"), ("SVC", "^:")):
        ax.plot(ns, [r["_acc"][key] for r in growth_rows], style, label=key)
    ax.set_xscale("log")
    ax.set_xlabel("training samples N")
    ax.set_ylabel("test accuracy")
    ax.legend()
    ax.set_title("Federated vs centralized (8 clients)")
    fig.tight_layout()
    fig.savefig(out / "bench_rkhs_growth.png", dpi=120)
    plt.close(fig)

    data = np.array([r["_plot"] for r in sweep_rows])
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    axes[0].plot(data[:, 0], data[:, 1], "o-", label="PF")
    axes[0].plot(data[:, 0], data[:, 2], "s--", label="PC")
    axes[0].axhline(svc_acc, color="gray", ls=":", label="SVC")
    axes[0].set_ylabel("test accuracy")
    axes[0].legend()
    axes[1].plot(data[:, 0], data[:, 3], "o-", label="PF")
    axes[1].plot(data[:, 0], data[:, 4], "s--", label="PC")
    axes[1].set_ylabel("kernels")
    axes[1].legend()
    axes[2].plot(data[:, 0], 100 * data[:, 5], "o-")
    axes[2].set_ylabel("samples sent (%)")
    for ax in axes:
        ax.set_xlabel("sparsity γ")
    fig.tight_layout()
    fig.savefig(out / "bench_rkhs_sparsity.png", dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--versus-svc", action="store_true", help="only section 3 (against SVC)"
    )
    args = parser.parse_args()
    if args.quick:
        sizes, reps, sweep_n, svc_sizes, pc_max = [250, 500, 1000], 1, 500, [1000], 1000
        gammas, solver_n, ascent_iter = [0.2, 0.5, 0.8], 300, 500
    else:
        sizes, reps, sweep_n = [250, 500, 1000, 2000, 4000], 3, 2000
        svc_sizes, pc_max = [2000, 5000, 10000], 5000
        gammas, solver_n, ascent_iter = [0.1, 0.3, 0.5, 0.7, 0.9], 1000, 3000
    repeats = args.repeats or (1 if args.quick else 2)
    X_test, y_test, _ = paper_data(10000, seed=1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = []
    if args.versus_svc:
        with threadpool_limits(1):
            start = time.perf_counter()
            load = os.getloadavg()[0]
            versus = versus_svc(svc_sizes, pc_max, repeats, X_test, y_test)
        text = "\n".join(
            [
                "# bench_rkhs --versus-svc: section 3, side by side with SVC",
                "",
                f"Profile: {'quick' if args.quick else 'full'}; BLAS pinned to 1 "
                f"thread; load average {load:.1f} before, "
                f"{os.getloadavg()[0]:.1f} after. "
                f"Total {time.perf_counter() - start:.0f} s.",
                "",
                table(versus, list(versus[0])),
            ]
        )
        path = RESULTS / "bench_rkhs_versus_svc.md"
        path.write_text(text + "\n")
        print(text)
        print(f"\nwrote {path}")
        return
    with threadpool_limits(1):
        start = time.perf_counter()
        grow = growth(sizes, reps, X_test, y_test)
        cols = ["N", "per client", "PF acc", "PC acc", "SVC acc", "PF - PC", "sent"]
        out += [
            f"## 1. Accuracy as N grows (mean of {reps} draws)",
            "",
            table(grow, cols),
        ]
        print(out[-1])
        sweep, svc_acc, n_sv = sparsity_sweep(sweep_n, gammas, X_test, y_test)
        cols = [c for c in sweep[0] if not c.startswith("_")]
        out += [
            "",
            f"## 2. Sparsity sweep, N = {sweep_n} (SVC: accuracy {svc_acc:.4f}, "
            f"{n_sv} support vectors)",
            "",
            table(sweep, cols),
        ]
        print(out[-1])
        versus = versus_svc(svc_sizes, pc_max, repeats, X_test, y_test)
        out += [
            "",
            f"## 3. Side by side with SVC (8 clients; best of {repeats} timings; "
            f"predict on {len(y_test)} samples; PC only up to N = {pc_max})",
            "",
            table(versus, list(versus[0])),
        ]
        print(out[-1])
        solver_rows = solvers(solver_n, X_test, y_test, ascent_iter)
        out += [
            "",
            f"## 4. Dual solvers, centralized, N = {solver_n} (γ = 0.5)",
            "",
            table(solver_rows, list(solver_rows[0])),
        ]
        print(out[-1])
        elapsed = time.perf_counter() - start
    plots(grow, sweep, svc_acc, RESULTS)
    header = [
        "# bench_rkhs: FederatedRKHSClassifier vs SVC",
        "",
        f"Profile: {'quick' if args.quick else 'full'}; {platform.machine()}, "
        f"{platform.python_version()}, BLAS pinned to 1 thread; shared machine, "
        f"timings noisy. Total {elapsed:.0f} s.",
        "",
    ]
    path = RESULTS / "bench_rkhs.md"
    path.write_text("\n".join(header + out) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
