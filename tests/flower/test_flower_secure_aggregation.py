"""A Flower node that goes away in a masked round: the others' shares
rebuild its masks, and the fit goes on without it (on an in-process grid
that hands each message to the real ClientApp)."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

import skfed
from skfed._testing import InProcessGrid
from skfed.privacy import _secure_aggregation as secagg

pytest.importorskip("flwr")

from skfed.flower import NodeData, client_app  # noqa: E402
from skfed.flower._records import from_records  # noqa: E402


class _LeavesInAMaskedRound(InProcessGrid):
    """Node ``node`` leaves the grid when it is asked for its first masked
    upload, as a SuperNode that dies mid-round."""

    def __init__(self, app, data, node):
        super().__init__(app, data)
        self.node = node

    def push_messages(self, messages):
        for message in messages:
            request = from_records(message.content)
            masked = request["op"] == "step" and secagg.MASK_OPTION in (
                request.get("options") or {}
            )
            if masked and message.metadata.dst_node_id == self.node:
                self.gone.add(self.node)
        return super().push_messages(messages)


@pytest.fixture
def identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    # Messages are created outside any Flower run here.
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)


def test_a_node_lost_in_a_masked_round_is_recovered_and_left_out(identity):
    data = {
        node: make_blobs(80, n_features=3, centers=3, random_state=node)[0]
        for node in (10, 20, 30, 40)
    }
    app = client_app(lambda context: data[context.node_id])
    grid = _LeavesInAMaskedRound(app, data, node=20)
    params = {"n_clusters": 3, "random_state": 0, "on_client_error": "drop"}
    nodes = NodeData(grid, n_nodes=4, round_timeout=0.5)
    km = skfed.DistributedKMeans(secure_aggregation=True, **params).fit(nodes.X)
    assert list(km.failed_clients_) == [20]
    # It was lost in the first masked round, whose sum of the three others
    # the unmasking recovered before the fit ran again without it.
    assert "'lloyd refinement'" in km.failed_clients_[20]
    assert "secure aggregation unmasking" in km.communication_.floats_by_name()
    kept = [10, 30, 40]
    expected = skfed.DistributedKMeans(**params).fit(
        np.vstack([data[n] for n in kept]), partitions=np.repeat(kept, 80)
    )
    # The same centers (the nodes' streams may number them otherwise).
    got, want = km.cluster_centers_, expected.cluster_centers_
    np.testing.assert_allclose(
        got[np.argsort(got[:, 0])], want[np.argsort(want[:, 0])], rtol=0, atol=1e-8
    )
