"""Where the benchmarks write their results: outside the repository.

A script writes its tables and plots to ``$SKFED_BENCH_RESULTS`` when it is
set (``run.py`` sets it to a scratch folder per run), else to
``skfed-benchmarks`` in the system's temporary folder. The reports kept in
git (``benchmarks/reports/``) are copied there by hand, from a quiet
machine's run.
"""

import os
import tempfile
from pathlib import Path

ENV = "SKFED_BENCH_RESULTS"


def results_dir():
    """The folder the benchmarks write to (not created here)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / "skfed-benchmarks"
