"""skfed.classification"""

__all__ = []
