"""Run every benchmark and gather their tables and plots into one report.

    python benchmarks/run.py --quick          # minutes: checks that all runs
    python benchmarks/run.py                  # the full profile (an hour or more)
    python benchmarks/run.py --only kfed rkhs --out my-report

Each ``bench_*.py`` script in this folder runs in its own process (``--quick``
is passed on) and writes its markdown tables and PNG plots to a scratch
folder of the run (``$SKFED_BENCH_RESULTS``, see ``_results.py``). Whatever a
script wrote while it ran is copied into
``<out>/<script>/`` and stitched into ``<out>/report.md``, headed by the
machine, the library versions and the git commit, so that two reports can be
compared run to run. ``<out>`` defaults to a folder under
``skfed-benchmarks`` in the system's temporary folder, outside the
repository. The exit code is non-zero if any benchmark failed.
"""

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_ENV = "SKFED_BENCH_RESULTS"
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


def _snapshot(results, exclude):
    """Modification times of the collectable files under ``results`` (the
    report folder excluded)."""
    if not results.is_dir():
        return {}
    return {
        p: p.stat().st_mtime_ns
        for p in results.rglob("*")
        if p.is_file() and p.suffix in COLLECTED and exclude not in p.parents
    }


def _written(before, after):
    """Files created or rewritten between two snapshots."""
    return sorted(p for p, mtime in after.items() if before.get(p) != mtime)


def _inline_markdown(text, folder):
    """A script's markdown, fitted into the report: headings one level down,
    relative image links pointing into the script's folder."""
    text = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.MULTILINE)
    return re.sub(r"\]\(([^/):]+\.png)\)", rf"]({folder}/\1)", text)


def run_benchmark(script, *, quick, results, out, timeout):
    """Run one script, writing to ``results``; copy what it wrote; return a
    summary dict."""
    name = script.stem.removeprefix("bench_")
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    before = _snapshot(results, out)
    start = time.time()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=script.parent,
            env={**os.environ, RESULTS_ENV: str(results)},
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
    for path in _written(before, _snapshot(results, out)):
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
        inlined = [_inline_markdown(f.read_text().strip(), s["name"]) for f in tables]
        for text in inlined:
            lines += [text, ""]
        for f in (f for f in s["files"] if f.suffix == ".png"):
            link = f.relative_to(out).as_posix()
            if not any(f"]({link})" in text for text in inlined):
                lines += [f"![{f.stem}]({link})", ""]
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
        "--out",
        type=Path,
        help="report folder (default: skfed-benchmarks/report-* in the system's "
        "temporary folder)",
    )
    parser.add_argument(
        "--bench-dir", type=Path, default=HERE, help="folder of bench_*.py scripts"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per benchmark"
    )
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.timezone.utc)
    profile = "quick" if args.quick else "full"
    default_out = Path(tempfile.gettempdir()) / "skfed-benchmarks"
    out = args.out or default_out / f"report-{started:%Y%m%d-%H%M%S}-{profile}"
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The scripts' own folder for this run: what they write is collected
    # into ``out``, and nothing lands in the repository.
    results = Path(tempfile.mkdtemp(prefix="skfed-bench-"))
    scripts = sorted(args.bench_dir.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.only]
    if not scripts:
        parser.error("no benchmark selected")
    timeout = args.timeout or (1800 if args.quick else 4 * 3600)
    summaries = []
    try:
        for script in scripts:
            print(f"running {script.name} ...", end="", flush=True)
            summary = run_benchmark(
                script, quick=args.quick, results=results, out=out, timeout=timeout
            )
            print(f" {summary['status']} in {summary['seconds']:.0f} s")
            summaries.append(summary)
    finally:
        shutil.rmtree(results, ignore_errors=True)
    report = write_report(summaries, out, quick=args.quick, started=started)
    print(f"report: {report}")
    return 0 if all(s["status"] == "ok" for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
