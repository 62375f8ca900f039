"""The federation engine: clients, rounds, transports and the ledger.

Read from the estimator down to a client step and back:

* ``_estimator``: :class:`FederatedMixin`, the estimator side of a fit
  (checks the privacy settings, opens the federation, records what the
  fit spent).
* ``_federation``: :class:`Federation`, the server side of one fit: the
  rounds (``run_round``, ``run_protocol``), the failure policy and the
  ledger's records; ``_collections``: what the server gathers of what the
  clients keep, after the rounds.
* ``_rounds``: the :class:`Round` declarations the protocols make and
  ``run_round`` takes (name, disclosure, sensitivity).
* ``_protocol``: the registry of client steps by name, the call of a step
  (:class:`StepCall`) and the collectable entries of a client's state.
* ``_mods``: what a client applies around every step it runs (raw-row
  refusal, secure aggregation's masking), from its own settings.
* ``_secure_aggregation``: the key exchange as client steps, and the call of
  a masked round (the cryptography is :mod:`skfed.privacy`'s).
* ``_client``: :class:`ClientData`, what one client holds, and how clients
  are made (cut from arrays here, or built where their rows live).
* ``_transports``: the joblib, process and dask transports, what every
  transport shares (``_transports._common``: running steps on the clients a
  process holds) and the factory that chooses one (Flower's is in
  :mod:`skfed.flower`).
* ``_remote``: data that stays where it lives (dask, Flower nodes).
* ``_ledger``, ``_codec``: what crossed the network, and how payloads
  travel without pickle.
* ``_validation``: ``partitions`` and the input checks the estimators share.
* ``_errors``: what a fit raises when a client or a worker fails.

The engine applies :mod:`skfed.privacy`; the privacy package imports
nothing of the engine.
"""
