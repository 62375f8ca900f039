import argparse
import csv
import io

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits

from skfed import _demo
from skfed.__main__ import build_parser, main


@pytest.mark.parametrize("scheme", _demo.PARTITIONS)
@pytest.mark.parametrize("loader", [load_digits, load_breast_cancer])
def test_every_partition_scheme_fits_the_demo_data(scheme, loader):
    _, y = loader(return_X_y=True)
    ids = _demo.make_partition(scheme, y, 10, 0)
    assert ids.shape == y.shape
    assert np.bincount(ids).min() >= 1


@pytest.mark.slow
def test_demo_runs_every_estimator_and_compares_with_sklearn(tmp_path, capsys):
    table, figure = tmp_path / "table.csv", tmp_path / "trade-off.png"
    main(["demo", "--format", "csv", "--output", str(table), "--figure", str(figure)])
    printed = capsys.readouterr()
    assert "[5/5] FederatedRKHSClassifier ... done" in printed.err
    rows = {r["estimator"]: r for r in csv.DictReader(io.StringIO(table.read_text()))}
    assert list(rows) == list(_demo.ESTIMATORS)
    for r in rows.values():
        assert int(r["floats_sent"]) > 0
        assert float(r["floats_ratio"]) == pytest.approx(
            int(r["floats_sent"]) / int(r["raw_floats"])
        )
    # Quality beside the centralized counterpart (loose: the demo's split is
    # strongly non-IID; the estimators' own tests hold the tight bounds).
    gap = {name: float(r["sklearn"]) - float(r["skfed"]) for name, r in rows.items()}
    assert gap["DistributedKMeans"] < 0.05
    assert gap["FederatedKernelKMeans"] < 0.05
    assert gap["FederatedRKHSClassifier"] < 0.05
    assert 0.5 < float(rows["DistributedKernelPCA"]["skfed"]) <= 1.0 + 1e-9
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("fmt", ["text", "markdown", "csv"])
def test_table_formats(fmt):
    row = _demo.Row("KFed", "KMeans", "digits", "NMI", 0.5, 0.7, 1.0, 2.0, 10, 100)
    text = _demo.format_table([row], fmt)
    if fmt == "csv":
        (parsed,) = csv.DictReader(io.StringIO(text))
        assert parsed["estimator"] == "KFed"
        assert float(parsed["floats_ratio"]) == pytest.approx(0.1)
        return
    assert "KFed" in text and "0.10x" in text
    if fmt == "markdown":
        assert text.splitlines()[1].startswith("|---")


def test_cli_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    for option in ("--clients", "--partition", "--seed", "--estimators", "--figure"):
        assert option in out


def test_cli_rejects_bad_options():
    with pytest.raises(SystemExit):
        main(["demo", "--clients", "0"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--estimators", "NotAnEstimator"])
    assert isinstance(build_parser(), argparse.ArgumentParser)
