"""The federation engine: clients, rounds, transports and the ledger."""
