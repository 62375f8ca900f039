"""Numerics any estimator may use: row hashing, order-free reduction,
Lanczos, BLAS threads, sign and shift conventions."""
