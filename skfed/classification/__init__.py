"""skfed.classification"""

from ._rkhs import FederatedRKHSClassifier

__all__ = ["FederatedRKHSClassifier"]
