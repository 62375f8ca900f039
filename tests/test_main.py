import io
import re

import pytest

from skfed.__main__ import PARTITIONS, demo, main


@pytest.mark.parametrize("scheme", PARTITIONS)
def test_demo_runs_every_partition_scheme(scheme):
    out = io.StringIO()

    class Args:
        clients, partition, seed = 10, scheme, 0

    assert demo(Args, out=out) == 0
    text = out.getvalue()
    fed, central = re.search(r"gamma = (\S+) \(centralized: (\S+)\)", text).groups()
    assert float(fed) == pytest.approx(float(central), rel=1e-9)
    assert "uploaded" in text and "moments" in text


def test_cli_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--partition" in capsys.readouterr().out
