"""Matmul and dense linear algebra: ``Lz`` helpers (lazymat.py), solves and factorizations
(dense.py), LDL^T (ldl.py), QR and the spectral decompositions (spectral.py)."""
