"""skfed.decomposition"""

__all__ = []
