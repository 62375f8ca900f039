"""Run every benchmark and gather their tables and plots into one report.

    python benchmarks/run.py --quick          # minutes: checks that all runs
    python benchmarks/run.py                  # the full profile (an hour or more)
    python benchmarks/run.py --only kfed rkhs --out my-report

Each ``bench_*.py`` script in this folder runs in its own process (``--quick``
is passed on) and writes its markdown tables and PNG plots to
``benchmarks/results/``. Whatever a script wrote while it ran is copied into
``<out>/<script>/`` and stitched into ``<out>/report.md``, headed by the
machine, the library versions and the git commit, so that two reports can be
compared run to run. The exit code is non-zero if any benchmark failed.
"""

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLLECTED = (".md", ".png", ".csv")


def _versions():
    import importlib.metadata as md

    names = ("skfed", "scikit-learn", "numpy", "scipy", "joblib")
    found = {}
    for name in names:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _git_commit(cwd):
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _new_files(results, since, exclude):
    """Files a benchmark wrote under ``results`` (not in the report folder)."""
    if not results.is_dir():
        return []
    return sorted(
        p
        for p in results.rglob("*")
        if p.is_file()
        and p.suffix in COLLECTED
        and p.stat().st_mtime >= since
        and exclude not in p.parents
    )


def run_benchmark(script, *, quick, results, out, timeout):
    """Run one script; copy what it wrote; return a summary dict."""
    name = script.stem.removeprefix("bench_")
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    start = time.time()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=script.parent
        )
        status = "ok" if proc.returncode == 0 else f"failed ({proc.returncode})"
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        status = f"timed out after {timeout} s"
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else ""
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else ""
    seconds = time.time() - start
    dest = out / name
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in _new_files(results, start - 1, out.resolve()):
        target = dest / path.relative_to(results)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(target)
    (dest / "stdout.txt").write_text(stdout)
    (dest / "stderr.txt").write_text(stderr)
    return {
        "name": name,
        "command": " ".join([Path(cmd[0]).name, *cmd[1:]]),
        "status": status,
        "seconds": seconds,
        "files": copied,
        "stdout": stdout,
        "stderr": stderr,
    }


def write_report(summaries, out, *, quick, started):
    """Stitch the scripts' outputs into ``out/report.md``."""
    lines = [
        f"# skfed benchmarks — {'quick' if quick else 'full'} profile",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        f"- git commit: {_git_commit(HERE)}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()),
        "",
        "| benchmark | status | seconds |",
        "|---|---|---|",
    ]
    lines += [
        f"| {s['name']} | {s['status']} | {s['seconds']:.0f} |" for s in summaries
    ]
    for s in summaries:
        lines += ["", f"## {s['name']}", "", f"`{s['command']}` — {s['status']}", ""]
        tables = [f for f in s["files"] if f.suffix == ".md"]
        for f in tables:
            lines += [f.read_text().strip(), ""]
        for f in (f for f in s["files"] if f.suffix == ".png"):
            lines += [f"![{f.stem}]({f.relative_to(out).as_posix()})", ""]
        if not tables:
            lines += ["```", s["stdout"].strip()[-5000:] or "(no output)", "```", ""]
        if not s["status"] == "ok":
            lines += ["stderr (last lines):", "```", s["stderr"].strip()[-3000:], "```"]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick profile")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these (e.g. kfed rkhs)"
    )
    parser.add_argument(
        "--out", type=Path, help="report folder (default: benchmarks/results/report-*)"
    )
    parser.add_argument(
        "--bench-dir", type=Path, default=HERE, help="folder of bench_*.py scripts"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per benchmark"
    )
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.timezone.utc)
    results = args.bench_dir.resolve() / "results"
    profile = "quick" if args.quick else "full"
    out = args.out or results / f"report-{started:%Y%m%d-%H%M%S}-{profile}"
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    scripts = sorted(args.bench_dir.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.only]
    if not scripts:
        parser.error("no benchmark selected")
    timeout = args.timeout or (1800 if args.quick else 4 * 3600)
    summaries = []
    for script in scripts:
        print(f"running {script.name} ...", end="", flush=True)
        summary = run_benchmark(
            script, quick=args.quick, results=results, out=out, timeout=timeout
        )
        print(f" {summary['status']} in {summary['seconds']:.0f} s")
        summaries.append(summary)
    report = write_report(summaries, out, quick=args.quick, started=started)
    print(f"report: {report}")
    return 0 if all(s["status"] == "ok" for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
