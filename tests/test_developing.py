"""DEVELOPING.md stays true: its map names what the tree holds, and its
worked example of adding an estimator runs and is right."""

import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.neighbors import NearestCentroid

from skfed._testing import assert_runs_its_declared_rounds, blobs

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "DEVELOPING.md").read_text()


def _section(title):
    start = PAGE.index(f"## {title}\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start : end if end != -1 else None]


def _map_paths():
    """``(path, listed)``: every file or folder the map names, relative to
    the repository, from the tree's indentation."""
    (tree,) = re.findall(r"```\n(skfed/\n.*?)```", _section("The map"), re.S)
    parents = {0: ROOT / "skfed"}
    for line in tree.splitlines()[1:]:
        indent = len(line) - len(line.lstrip())
        head = re.split(r"\s{2,}", line.strip())[0]
        tokens = [t for t in head.split(" ") if t.endswith((".py", "/"))]
        if not tokens or indent // 2 - 1 not in parents:
            continue  # a description carried over to the next line
        parent = parents[indent // 2 - 1]
        for token in tokens:
            path = parent / token.rstrip("/")
            yield path
            if token.endswith("/"):
                parents[indent // 2] = path
                for deeper in [k for k in parents if k > indent // 2]:
                    del parents[deeper]


def test_the_map_names_only_what_exists():
    paths = list(_map_paths())
    assert len(paths) > 30
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
    assert missing == []


def test_the_map_names_every_top_level_entry_of_the_package():
    named = {p for p in _map_paths() if p.parent == ROOT / "skfed"}
    entries = {
        p
        for p in (ROOT / "skfed").iterdir()
        if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py")
    }
    assert entries - named == set()


@pytest.fixture(scope="module")
def example():
    """The worked example's two code blocks, run as one module."""
    code = re.findall(r"```python\n(.*?)```", _section(_EXAMPLE), re.S)
    assert len(code) == 2
    namespace = {"__name__": "skfed_worked_example"}
    exec(compile("\n".join(code), "DEVELOPING.md", "exec"), namespace)
    return namespace


_EXAMPLE = "Adding an estimator: a worked example"


def _data():
    X, y = blobs(300, d=3, centers=3, cluster_std=1.0, seed=0)
    return X, y, np.arange(len(X)) % 4


@pytest.mark.parametrize("secure_aggregation", [False, True])
def test_the_worked_example_is_scikit_learns_nearest_centroid(
    example, secure_aggregation
):
    X, y, ids = _data()
    est = example["FederatedNearestCentroid"](
        secure_aggregation=secure_aggregation
    ).fit(X, y, partitions=ids)
    reference = NearestCentroid().fit(X, y)
    # Masked sums are rounded to 2^-32.
    np.testing.assert_allclose(est.centroids_, reference.centroids_, atol=1e-8)
    np.testing.assert_array_equal(est.predict(X), reference.predict(X))
    assert est.communication_.raw_rows == 0


def test_the_worked_example_runs_the_rounds_it_declares(example, rounds_run):
    X, y, ids = _data()
    est = example["FederatedNearestCentroid"]().fit(X, y, partitions=ids)
    assert_runs_its_declared_rounds(est, rounds_run)


def test_the_worked_example_keeps_a_lone_row_under_refuse(example, received):
    X, y, ids = _data()
    X, y, ids = np.r_[X, [[50.0, 50.0, 50.0]]], np.r_[y, 1], np.r_[ids, 9]
    est = example["FederatedNearestCentroid"](raw_rows="refuse")
    est.fit(X, y, partitions=ids)
    (upload,) = [u for name, c, u in received["uploads"] if c == 9 and "sums" in name]
    sums, counts = upload
    # The client of one row left its class out: nothing of the row went.
    assert not sums.any() and not counts.any()
    assert est.get_params()["raw_rows"] == "refuse"
    assert "What the fit does when a client" not in type(est).__doc__
    assert "Number of clients run in parallel" in type(est).__doc__


def test_the_contributor_pages_estimator_runs():
    # doc/contributing.rst builds a federated mean in three blocks (client
    # step, driver, estimator): together they fit, masked or not.
    page = (ROOT / "doc" / "contributing.rst").read_text()
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+)", page)
    code = [
        "\n".join(line[4:] for line in block.split("\n"))
        for block in blocks
        if re.search(r"def _local_sums|def run_mean|class FederatedMean", block)
    ]
    assert len(code) == 3
    namespace = {"__name__": "skfed_contributor_example"}
    exec(compile("\n".join(code), "contributing.rst", "exec"), namespace)
    X, _ = blobs(120, d=3)
    for secure_aggregation in (False, True):
        est = namespace["FederatedMean"](
            random_state=0, secure_aggregation=secure_aggregation
        ).fit(X, partitions=np.arange(len(X)) % 4)
        np.testing.assert_allclose(est.mean_, X.mean(axis=0), atol=1e-8)
        assert "sums" in [r.name for r in est.communication_]
