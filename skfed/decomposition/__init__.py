"""skfed.decomposition"""

from ._kernel_pca import DistributedKernelPCA

__all__ = ["DistributedKernelPCA"]
