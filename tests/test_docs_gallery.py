"""The gallery's text says what its scripts produce.

The gallery runs when the documentation builds, but its prose is not
checked there: each test below runs one script and asserts the sentences
of its text, so that a change of defaults or figures that makes a
sentence false fails here.
"""

import runpy
from pathlib import Path

import matplotlib
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "doc" / "examples"


@pytest.fixture(scope="module")
def tradeoff():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        return runpy.run_path(str(EXAMPLES / "plot_communication_tradeoff.py"))
    finally:
        plt.close("all")


def test_the_tradeoff_sweeps_the_default_solvers_knob(tradeoff):
    from skfed import FederatedKernelKMeans

    # The kernel k-means sweep turns the knob of the default solver's random
    # features: three different costs, and D = 300 is what their default
    # chooses here.
    kernel = tradeoff["sweeps"]["FederatedKernelKMeans (features D)"]
    assert all(est.algorithm_ == "one_shot" for est in kernel)
    floats = [f for f, _ in tradeoff["results"]["FederatedKernelKMeans (features D)"]]
    assert floats == sorted(floats) and len(set(floats)) == 3
    default = FederatedKernelKMeans(10, features="random", random_state=0)
    default.fit(tradeoff["X"], partitions=tradeoff["ids"])
    assert default.n_random_features_ == kernel[-1].n_random_features == 300
    # "180 rows of 64 features on average"
    X = tradeoff["X"]
    assert X.shape[1] == 64 and round(X.shape[0] / 10) == 180


def test_the_tradeoff_text_reads_its_figure(tradeoff):
    raw, pooled = tradeoff["X"].size, tradeoff["pooled"]
    kfed, coreset, kernel = tradeoff["results"].values()
    # "k-FED is the cheapest, and from k' = 3 on it clusters within a few
    # hundredths of NMI of the pooled k-means"
    assert max(f for f, _ in kfed) < min(f for f, _ in coreset + kernel)
    assert min(q for _, q in kfed) > pooled - 0.03
    # "the coreset comes as close while communicating under the raw data"
    under = [q for f, q in coreset if f < raw]
    assert under and max(under) > pooled - 0.03
    # "at its default D, matches the pooled k-means, at the price of more
    # floats than the raw data"
    assert kernel[-1][1] > pooled - 0.01
    assert kernel[-1][0] > raw
