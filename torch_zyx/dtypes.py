"""zyx data types: the dtype vocabulary shared by the lazy graph, codegen and the runtimes.

Only the recording stage (record/tensor.py ``TORCH_TO_ZYX``) converts between these and
``torch.dtype``; later stages never import torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class DType:
    """One dtype; the module constants below are the only instances, so identity is equality
    (and hashing stays in C: dtypes are part of every graph node's key)."""

    name: str
    itemsize: int
    kind: str  # "f" float, "i" signed int, "u" unsigned int, "b" bool, "c" complex

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    def __repr__(self) -> str:
        return self.name


float16 = DType("float16", 2, "f")
bfloat16 = DType("bfloat16", 2, "f")
float32 = DType("float32", 4, "f")
float64 = DType("float64", 8, "f")
int8 = DType("int8", 1, "i")
int16 = DType("int16", 2, "i")
int32 = DType("int32", 4, "i")
int64 = DType("int64", 8, "i")
uint8 = DType("uint8", 1, "u")
# torch's "barebones" unsigned dtypes (CPU torch has few kernels for them: ops/unsigned.py); uint64
# is also what the random number hashing computes in.
uint16 = DType("uint16", 2, "u")
uint32 = DType("uint32", 4, "u")
uint64 = DType("uint64", 8, "u")
bool_ = DType("bool", 1, "b")

ALL = (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool_)
BY_NAME = {dtype.name: dtype for dtype in ALL}

# Complex dtypes are a storage's and a tensor's, never a graph node's: a complex value is held as a
# node of its part dtype with a trailing axis of 2 (real, imaginary), the pairs interleaved in
# memory as PyTorch stores them (record/complex.py), so the kernelizer, codegen and the runtimes
# see real dtypes only. Not in ``ALL`` for that reason.
complex64 = DType("complex64", 8, "c")
complex128 = DType("complex128", 16, "c")
complex32 = DType("complex32", 4, "c")  # (torch.chalf: pairs of float16, CPU torch's few kernels)
COMPLEX_PART = {complex64: float32, complex128: float64, complex32: float16}


def python_value(dtype: DType, value):
    """The Python scalar a constant of ``dtype`` holds (ints wrap like the machine type)."""
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind == "f":
        return float(value)
    value = int(value)
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


_packed: dict[tuple, bytes] = {}


def pack_scalars(dtype: DType, values: list[float]) -> bytes:
    """``values`` as the bytes of an array of the floating ``dtype`` (memoized: a training loop
    packs the same constants every step)."""
    key = (dtype, tuple(values))
    data = _packed.get(key)
    if data is None:
        if len(_packed) >= 1024:
            _packed.clear()
        data = _packed[key] = _pack_scalars(dtype, values)
    return data


def _pack_scalars(dtype: DType, values: list[float]) -> bytes:
    """``values`` as the bytes of an array of the floating ``dtype``, rounded to nearest even
    (out-of-range values become infinities, as a cast does)."""
    import numpy as np

    with np.errstate(over="ignore"):
        if dtype.name != "bfloat16":
            return np.asarray(values, dtype=np.dtype(dtype.name)).tobytes()
        single = np.asarray(values, dtype=np.float32)
    bits = single.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(single)] = 0x7FC0
    return rounded.tobytes()
