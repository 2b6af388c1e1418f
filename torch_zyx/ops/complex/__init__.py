"""Lowerings of ops on complex64 / complex128 values (real pairs, record/complex.py): ``base``
holds the table dispatch consults for them and the pair arithmetic, ``creation`` factories,
copies, casts and views, ``math`` elementwise math, reductions and matmul."""

from . import creation, functions, linalg, math, prims, reductions, selection  # noqa: F401  (registration)
from .base import COMPLEX, involved, wrap_pairs  # noqa: F401
