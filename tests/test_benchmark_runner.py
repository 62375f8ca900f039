"""The benchmark runner gathers every script's output into one report."""

import importlib.util
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"

FAKE = """
import os
import sys
from pathlib import Path
out = Path(os.environ["SKFED_BENCH_RESULTS"])
out.mkdir(exist_ok=True)
profile = "quick" if "--quick" in sys.argv else "full"
(out / "fake.md").write_text(
    f"# Fake\\n\\n| profile |\\n|---|\\n| {profile} |\\n\\n![plot](fake.png)\\n"
)
(out / "fake.png").write_bytes(b"\\x89PNG fake")
print("fake done")
"""

BROKEN = "raise SystemExit('no data')\n"


def _load_runner():
    spec = importlib.util.spec_from_file_location("skfed_bench_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runner_collects_tables_plots_and_failures(tmp_path):
    (tmp_path / "bench_fake.py").write_text(FAKE)
    (tmp_path / "bench_broken.py").write_text(BROKEN)
    out = tmp_path / "report"
    runner = _load_runner()

    code = runner.main(["--quick", "--bench-dir", str(tmp_path), "--out", str(out)])

    assert code == 1, "a failed benchmark must fail the run"
    report = (out / "report.md").read_text()
    assert "quick profile" in report
    assert "| fake | ok |" in report
    assert "| broken | failed (1) |" in report and "no data" in report
    assert "| quick |" in report, "the script's own table is inlined"
    assert "![plot](fake/fake.png)" in report, "the script's own links are fixed"
    assert report.count("(fake/fake.png)") == 1, "a linked plot is not repeated"
    assert "\n## Fake\n" in report, "the script's headings go one level down"
    assert (out / "fake" / "fake.png").exists()
    # The scripts wrote to the run's scratch folder, not beside themselves.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bench_broken.py",
        "bench_fake.py",
        "report",
    ]


def test_runner_only_selects_scripts(tmp_path):
    (tmp_path / "bench_fake.py").write_text(FAKE)
    (tmp_path / "bench_broken.py").write_text(BROKEN)
    out = tmp_path / "report"
    runner = _load_runner()
    code = runner.main(
        ["--only", "fake", "--bench-dir", str(tmp_path), "--out", str(out)]
    )
    assert code == 0
    report = (out / "report.md").read_text()
    assert "full profile" in report and "| full |" in report
    assert "broken" not in report


def test_runner_collects_only_what_each_script_wrote(tmp_path):
    (tmp_path / "bench_a.py").write_text(FAKE)
    (tmp_path / "bench_b.py").write_text("print('b writes nothing')\n")
    out = tmp_path / "report"
    runner = _load_runner()
    (tmp_path / "bench_c.py").write_text(
        "import os\n"
        "from pathlib import Path\n"
        "(Path(os.environ['SKFED_BENCH_RESULTS']) / 'c.png').write_bytes(b'png')\n"
    )
    assert runner.main(["--bench-dir", str(tmp_path), "--out", str(out)]) == 0
    assert "![c](c/c.png)" in (out / "report.md").read_text(), "unlinked plots shown"
    assert (out / "a" / "fake.md").exists()
    assert not (out / "b" / "fake.md").exists()


def test_results_go_outside_the_repository_by_default(tmp_path, monkeypatch):
    import tempfile

    repo = RUNNER.parents[1]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "bench_fake.py").write_text(FAKE)
    runner = _load_runner()
    assert runner.main(["--bench-dir", str(tmp_path / "bench")]) == 0
    (report,) = (tmp_path / "skfed-benchmarks").glob("report-*-full/report.md")
    assert "| fake | ok |" in report.read_text()
    # Only the report is left: the run's scratch folder is gone.
    assert [p.name for p in tmp_path.iterdir() if p.name != "bench"] == [
        "skfed-benchmarks"
    ]
    assert repo not in report.parents
    # A script run alone writes there too, unless told otherwise.
    spec = importlib.util.spec_from_file_location(
        "skfed_bench_results", repo / "benchmarks" / "_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv(module.ENV, raising=False)
    assert module.results_dir() == tmp_path / "skfed-benchmarks"
    monkeypatch.setenv(module.ENV, str(tmp_path / "mine"))
    assert module.results_dir() == tmp_path / "mine"
