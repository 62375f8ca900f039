"""skfed: federated and distributed kernel methods with a scikit-learn API.

Every estimator takes ``partitions`` in ``fit`` (which simulated client holds
which sample), runs its clients through joblib, and reports what crossed the
network as ``communication_`` (a :class:`CommunicationLog`).
"""

from . import partition
from ._engine._federation import ClientStepError, ClientValueError, WorkerLostError
from ._engine._ledger import CommunicationLog
from .classification import FederatedRKHSClassifier
from .cluster import DistributedKMeans, FederatedKernelKMeans, KFed
from .decomposition import DistributedKernelPCA
from .preprocessing import FederatedStandardScaler

__version__ = "0.1.0.dev0"

__all__ = [
    "ClientStepError",
    "ClientValueError",
    "CommunicationLog",
    "DistributedKMeans",
    "DistributedKernelPCA",
    "FederatedKernelKMeans",
    "FederatedRKHSClassifier",
    "FederatedStandardScaler",
    "KFed",
    "WorkerLostError",
    "partition",
]
