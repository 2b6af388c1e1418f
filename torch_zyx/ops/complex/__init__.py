"""Lowerings of ops on complex64 / complex128 values (real pairs, record/complex.py): ``base``
holds the table dispatch consults for them and the pair arithmetic, ``creation`` factories,
copies, casts and views, ``math`` elementwise math, reductions and matmul, ``linalg`` LU,
solves and Cholesky, ``decompositions`` QR, eigh and SVD, ``eig``
the general eigendecomposition,
``spectral`` pinv, lstsq and matrix_exp built on them, ``ldl`` the LDL
factorization (symmetric and Hermitian) and its solve."""

from . import (  # noqa: F401  (registration)
    creation,
    decompositions,
    eig,
    functions,
    ldl,
    linalg,
    math,
    prims,
    reductions,
    selection,
    spectral,
)
from .base import COMPLEX, involved, wrap_pairs  # noqa: F401
