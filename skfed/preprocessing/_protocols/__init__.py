"""The preprocessing estimators' protocols: the drivers of their rounds and
their client steps, each module's rounds declared at its top
(:mod:`._scaler`: FederatedStandardScaler's)."""
