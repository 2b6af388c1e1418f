"""The complex lowerings' table and the pair arithmetic they share.

Stage 1 of the flow (dispatch → **lowerings** → tensor model). A complex value is a node of its
part dtype whose last axis holds (real, imaginary) (record/complex.py), so these lowerings build
real graph ops only and every renderer runs them unchanged. Once complex values are in use
(``transfer.complex_seen``), dispatch sends every op that involves one (``involved``: a complex
operand, a complex ``dtype`` argument or Python scalar, or a real view carrying PyTorch's lazy
negative bit) to ``COMPLEX`` here instead of the real lowerings, whose nodes would treat the pair
axis as data; an op it lacks takes its decomposition or the CPU, as any op zyx does not lower.

PyTorch's conjugate and negative bits are lazy views (``is_conj()``, ``is_neg()``): ``pairs``
and ``real_node`` apply them wherever a lowering reads a tensor, so a view keeps the bit and a
read sees the values PyTorch defines.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.complex import ComplexStorage
from ...record.pending import unsupported
from ...record.tensor import Storage, ZyxTensor, read, reinterpreted
from ...record.transfer import COMPLEX_TO_ZYX, TORCH_TO_ZYX, ZYX_TO_TORCH
from ..registry import LoweringTable, broadcast_shape, device_of  # noqa: F401  (re-exported)

COMPLEX = LoweringTable()
PROMOTE_DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
PROMOTE_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.COMPLEX_TO_FLOAT
PROMOTE_INT_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
PROMOTE_BOOL = ELEMENTWISE_TYPE_PROMOTION_KIND.ALWAYS_BOOL
PART = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
COMPLEX_OF = {dtypes.float32: torch.complex64, dtypes.float64: torch.complex128,
              dtypes.float16: torch.complex32}


def register_complex(*ops):
    """Register the decorated function as the complex lowering of every overload in ``ops``."""

    def wrapper(fn):
        for op in ops:
            COMPLEX[op] = fn
        return fn

    return wrapper


# ------------------------------------------------------------------------------ the gate


def _marked(t) -> bool:
    """Whether tensor ``t`` is complex or a real view with PyTorch's negative bit."""
    if t.__class__ is ZyxTensor or isinstance(t, ZyxTensor):
        return t._storage.__class__ is ComplexStorage or t.is_neg()
    return t.is_complex()


def _involves(a) -> bool:
    cls = a.__class__
    if cls is complex:
        return True
    if cls is torch.dtype:
        return a.is_complex
    if cls is list or cls is tuple:
        return any(_involves(b) for b in a)
    return isinstance(a, torch.Tensor) and _marked(a)


def involved(args, kwargs) -> bool:
    """Whether an op with these arguments involves complex values (see the module docstring)."""
    for a in args:
        if _involves(a):
            return True
    if kwargs:
        for a in kwargs.values():
            if _involves(a):
                return True
    return False


# ------------------------------------------------------------------------ reading and wrapping


def is_complex(x) -> bool:
    return isinstance(x, ZyxTensor) and x._storage.__class__ is ComplexStorage


def pairs(x: ZyxTensor) -> Node:
    """The values of complex ``x`` as pairs (shape (*x.shape, 2)), its conjugate and negative
    bits applied (``torch._neg_view`` of a complex tensor carries the latter)."""
    node = read(x)
    if x.is_neg():
        node = g.unary("neg", node)
    return conj(node) if x.is_conj() else node


def real_node(x: ZyxTensor) -> Node:
    """The values of real ``x``, its negative bit applied."""
    node = read(x)
    return g.unary("neg", node) if x.is_neg() else node


def part_of(dtype: torch.dtype):
    """The zyx part dtype of complex torch ``dtype``."""
    return dtypes.COMPLEX_PART[COMPLEX_TO_ZYX[dtype]]


def scalar_pair(value, part) -> Node:
    """A Python number as a pair constant, shape (2,)."""
    value = complex(value)
    return join(g.const(value.real, part), g.const(value.imag, part))


def as_pairs(x, part) -> Node:
    """Any operand (complex or real zyx tensor, 0-d CPU tensor, Python number) as pairs of zyx
    dtype ``part``."""
    if isinstance(x, ZyxTensor):
        if x._storage.__class__ is ComplexStorage:
            node = pairs(x)
        else:
            node = real_node(x)
            node = join(g.cast(node, part), g.const(0, part, node.shape))
        return g.cast(node, part) if node.dtype is not part else node
    if isinstance(x, torch.Tensor):
        if not x.is_cpu or x.dim() != 0:
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                               f"devices, zyx and {x.device}!")
        x = x.item()
    return scalar_pair(x, part)


def broadcast_pairs(*nodes: Node) -> list[Node]:
    """Pair nodes broadcast over their leading axes."""
    shape = broadcast_shape(*(n.shape[:-1] for n in nodes))
    return [n if n.shape[:-1] == shape else g.broadcast_to(n, (*shape, 2)) for n in nodes]


def wrap_pairs(node: Node, device) -> ZyxTensor:
    """A fresh contiguous complex tensor holding ``node`` (pairs of float32 or float64)."""
    root = Storage(None, device, node)
    storage = reinterpreted(root, COMPLEX_TO_ZYX[COMPLEX_OF[node.dtype]])
    shape = node.shape[:-1]
    return ZyxTensor(storage, shape, g.contiguous_strides(shape), 0)


def promote(*args, kind=PROMOTE_DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation, result) torch dtypes of elementwise ``args``, PyTorch's rules."""
    return elementwise_dtypes(*[a for a in args if a is not None], type_promotion_kind=kind)


def zpart(dtype: torch.dtype):
    """The zyx dtype a value of torch ``dtype`` computes in here: a complex dtype's part."""
    return part_of(dtype) if dtype.is_complex else TORCH_TO_ZYX[dtype]


def torch_of(part) -> torch.dtype:
    return ZYX_TO_TORCH[part]


# ------------------------------------------------------------------------------ pair arithmetic


def re(p: Node) -> Node:
    """The real parts of pairs ``p``."""
    *lead, _ = p.shape
    return g.reshape(g.shrink(p, (*((0, s) for s in lead), (0, 1))), tuple(lead))


def im(p: Node) -> Node:
    """The imaginary parts of pairs ``p``."""
    *lead, _ = p.shape
    return g.reshape(g.shrink(p, (*((0, s) for s in lead), (1, 2))), tuple(lead))


def join(real: Node, imag: Node) -> Node:
    """Pairs of ``real`` and ``imag`` (one shape, one dtype): a choice between two pads."""
    shape = real.shape
    n = len(shape)
    left = g.pad(g.reshape(real, (*shape, 1)), ((0, 0),) * n + ((0, 1),))
    right = g.pad(g.reshape(imag, (*shape, 1)), ((0, 0),) * n + ((1, 0),))
    return g.binary("add", left, right)


def conj(p: Node) -> Node:
    return join(re(p), g.unary("neg", im(p)))


def _b(op, x, y):
    return g.binary(op, x, y)


def _c(value, like: Node) -> Node:
    return g.const(value, like.dtype, like.shape)


def mul(p: Node, q: Node) -> Node:
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i."""
    a, b, c, d = re(p), im(p), re(q), im(q)
    return join(_b("sub", _b("mul", a, c), _b("mul", b, d)), _b("add", _b("mul", a, d), _b("mul", b, c)))


def div(p: Node, q: Node) -> Node:
    """(a + bi) / (c + di) as c10::complex divides (NumPy's scaled form: no overflow in c² + d²)."""
    a, b, c, d = re(p), im(p), re(q), im(q)
    abs_c, abs_d = g.unary("abs", c), g.unary("abs", d)
    c_bigger = _b("le", abs_d, abs_c)
    # |c| >= |d|: rat = d / c, scl = 1 / (c + d rat); re = (a + b rat) scl, im = (b - a rat) scl
    rat1 = _b("div", d, c)
    scl1 = _b("div", _c(1.0, c), _b("add", c, _b("mul", d, rat1)))
    re1 = _b("mul", _b("add", a, _b("mul", b, rat1)), scl1)
    im1 = _b("mul", _b("sub", b, _b("mul", a, rat1)), scl1)
    # else: rat = c / d, scl = 1 / (d + c rat); re = (a rat + b) scl, im = (b rat - a) scl
    rat2 = _b("div", c, d)
    scl2 = _b("div", _c(1.0, d), _b("add", d, _b("mul", c, rat2)))
    re2 = _b("mul", _b("add", _b("mul", a, rat2), b), scl2)
    im2 = _b("mul", _b("sub", _b("mul", b, rat2), a), scl2)
    # 0 / 0: a / |c| and b / |d| (infinities or NaNs, as c10 gives)
    zero = _b("and", _b("eq", abs_c, _c(0.0, c)), _b("eq", abs_d, _c(0.0, d)))
    real = g.where(zero, _b("div", a, abs_c), g.where(c_bigger, re1, re2))
    imag = g.where(zero, _b("div", b, abs_d), g.where(c_bigger, im1, im2))
    return join(real, imag)


def magnitude(p: Node) -> Node:
    """|a + bi| without overflow or underflow in the squares (hypot): the larger part times
    sqrt(1 + (smaller / larger)²); an infinite part gives inf even beside a NaN, as hypot."""
    a, b = g.unary("abs", re(p)), g.unary("abs", im(p))
    big = g.where(_b("lt", a, b), b, a)
    small = g.where(_b("lt", a, b), a, b)
    ratio = _b("div", small, big)
    scaled = _b("mul", big, g.unary("sqrt", _b("add", _c(1.0, big), _b("mul", ratio, ratio))))
    inf = _c(float("inf"), big)
    nan_free = g.where(_b("eq", big, _c(0.0, big)), _c(0.0, big), scaled)
    # (a NaN part makes ``big`` or ``small`` NaN through the comparisons: the sum is NaN then)
    nan = g.unary("isnan", _b("add", a, b))
    value = g.where(nan, _c(float("nan"), big), nan_free)
    return g.where(_b("or", _b("eq", a, inf), _b("eq", b, inf)), inf, value)


def exp(p: Node) -> Node:
    a, b = re(p), im(p)
    r = g.unary("exp", a)
    return join(_b("mul", r, g.unary("cos", b)), _b("mul", r, g.unary("sin", b)))


def log(p: Node) -> Node:
    return join(g.unary("log", magnitude(p)), _b("atan2", im(p), re(p)))


def sqrt(p: Node) -> Node:
    """The principal square root, without cancellation: t = sqrt((|a| + |z|) / 2) is the larger
    part of the result, the other is |b| / 2t; the imaginary part takes b's sign."""
    a, b = re(p), im(p)
    t = g.unary("sqrt", _b("mul", _b("add", g.unary("abs", a), magnitude(p)), _c(0.5, a)))
    other = _b("div", g.unary("abs", b), _b("mul", t, _c(2.0, t)))
    other = g.where(_b("eq", t, _c(0.0, t)), _c(0.0, t), other)
    nonneg = _b("le", _c(0.0, a), a)
    real = g.where(nonneg, t, other)
    imag = _b("copysign", g.where(nonneg, other, t), b)
    return join(real, imag)


def eq(p: Node, q: Node) -> Node:
    return _b("and", _b("eq", re(p), re(q)), _b("eq", im(p), im(q)))


# ------------------------------------------------------------------------------ complex32
# CPU torch (2.13) has ComplexHalf kernels for few ops: factories and fills, copies and casts,
# views and indexing, add/sub/mul, neg, abs, sgn, conj, eq/ne, isnan/isinf/isfinite, where,
# cat/stack, flip/roll/pad, masked_fill/masked_select/index_put/index_add, var/std, addcmul,
# allclose. The rest raise ``NotImplementedError: "div_cpu" not implemented for 'ComplexHalf'``
# while zyx's pair arithmetic would compute them all, so ``check_complex32`` raises CPU torch's
# error where CPU torch does, when the op is recorded (as ops/unsigned.py for uint16/32/64).
# The table maps an op's name (no overload, in-place ``_`` stripped) to its CPU kernel's name in
# the message and how the kernel's dtype is found: "self" the first tensor's, "common" the
# operands' promoted dtype (complex32 + float32 computes in complex64 and works), "reduce" the
# ``dtype=`` argument else the input's (sum(dtype=torch.complex64) works), "dtype" a factory's
# ``dtype=``. Measured on torch 2.13's CPU build, one call per op.

_CHALF_SELF = {
    "exp": "exp_vml_cpu", "log": "log_vml_cpu", "log10": "log10_vml_cpu", "log2": "log2_vml_cpu",
    "log1p": "log1p_vml_cpu", "expm1": "expm1_vml_cpu", "sin": "sin_vml_cpu", "cos": "cos_vml_cpu",
    "tan": "tan_vml_cpu", "asin": "asin_vml_cpu", "acos": "acos_vml_cpu", "atan": "atan_vml_cpu",
    "sinh": "sinh_cpu", "cosh": "cosh_cpu", "tanh": "tanh_vml_cpu", "asinh": "asinh_cpu",
    "acosh": "acosh_cpu", "atanh": "atanh_cpu", "sqrt": "sqrt_vml_cpu", "rsqrt": "rsqrt_cpu",
    "reciprocal": "reciprocal_cpu", "sigmoid": "sigmoid_cpu", "exp2": "exp2", "angle": "angle_cpu",
    "frac": "frac_cpu", "round": "round_vml_cpu", "sinc": "sinc_cpu", "nan_to_num": "nan_to_num",
    "erf": "erf_vml_cpu", "lgamma": "lgamma_vml_cpu", "digamma": "digamma",
    "logical_not": "logical_not_cpu", "amax": "max_values_cpu", "amin": "min_values_cpu", "max": "max_all",
    "min": "min_all", "equal": "equal_notnan_cpu", "gather": "scatter_gather_tensor_cpu",
    "scatter": "scatter_gather_tensor_cpu", "scatter_add": "scatter_gather_tensor_cpu",
    "scatter_reduce": "scatter_gather_tensor_cpu", "take": "take_cpu", "put": "take_put_cpu",
    "masked_scatter": "masked_scatter", "mm": "addmm_impl_cpu_", "addmm": "addmm_impl_cpu_", "bmm": "bmm",
    "baddbmm": "bmm", "dot": "dot", "vdot": "dot", "mv": "addmv_impl_cpu", "addmv": "addmv_impl_cpu",
    "trace": "trace", "linalg_cross": "cross", "_unique2": "unique", "_softmax": "softmax_kernel_impl",
    "_log_softmax": "log_softmax_lastdim_kernel_impl", "isin": "isin_default_cpu",
    "addcdiv": "addcdiv_cpu_out", "lerp": "lerp_kernel_scalar",
}
_CHALF_COMMON = {
    "div": "div_cpu", "lt": "lt_cpu", "le": "le_cpu", "gt": "gt_cpu", "ge": "ge_cpu", "atan2": "atan2_cpu",
    "pow": "pow", "logical_and": "logical_and_cpu", "logical_or": "logical_or_cpu",
    "logical_xor": "logical_xor_cpu", "xlogy": "xlogy_cpu", "fmod": "fmod_cpu",
    "remainder": "remainder_cpu", "hypot": "hypot_cpu", "logaddexp": "logaddexp_cpu",
    "copysign": "copysign_cpu",
}
_CHALF_REDUCE = {"sum": "sum_cpu", "mean": "sum_cpu", "prod": "prod_out_cpu", "cumsum": "cumsum_out_cpu",
                 "cumprod": "cumprod_out_cpu", "logcumsumexp": "logcumsumexp_out_cpu"}
_CHALF_FACTORY = {"arange": "arange_cpu", "linspace": "linspace_cpu", "logspace": "logspace_cpu",
                  "eye": "eye"}
_CHALF_KERNELS = {**{k: (v, "self") for k, v in _CHALF_SELF.items()},
                  **{k: (v, "common") for k, v in _CHALF_COMMON.items()},
                  **{k: (v, "reduce") for k, v in _CHALF_REDUCE.items()},
                  **{k: (v, "dtype") for k, v in _CHALF_FACTORY.items()}}
_names: dict[str, str] = {}


def _base_name(func) -> str:
    name = _names.get(func._name)
    if name is None:
        name = func._schema.name.split("::")[-1]
        if name.endswith("_") and not name.endswith("__"):
            name = name[:-1]
        _names[func._name] = name
    return name


def complex32_error(kernel: str) -> NotImplementedError:
    """CPU torch's error for its ``kernel`` lacking a ComplexHalf version (raise it)."""
    return unsupported(f"\"{kernel}\" not implemented for 'ComplexHalf'")


def check_complex32(func, args, kwargs) -> None:
    """Raise CPU torch's kernel error when ``func`` would run a CPU kernel that has no
    ComplexHalf version (the table above); dispatch calls it once complex32 is in use."""
    entry = _CHALF_KERNELS.get(_base_name(func))
    if entry is None:
        return
    kernel, how = entry
    if kernel in ("max_all", "min_all") and len(args) > 1:
        return  # (max.dim and maximum: errors of every complex dtype, not ComplexHalf's)
    if kernel == "lerp_kernel_scalar" and len(args) > 2 and isinstance(args[2], torch.Tensor):
        kernel = "lerp_kernel_tensor"
    if how == "dtype":  # (a factory, or its out= form)
        dtype = kwargs.get("dtype") or (kwargs["out"].dtype if kwargs.get("out") is not None else None)
    elif how == "reduce":
        dtype = kwargs.get("dtype") or (args[0].dtype if args and isinstance(args[0], torch.Tensor) else None)
    elif how == "self":
        dtype = args[0].dtype if args and isinstance(args[0], torch.Tensor) else None
    else:
        operands = [a for a in args[:2] if isinstance(a, (torch.Tensor, int, float, bool, complex))]
        if not any(isinstance(a, torch.Tensor) and a.dtype == torch.complex32 for a in operands):
            return
        dtype = promote(*operands)[1]
    if dtype == torch.complex32:
        raise complex32_error(kernel)
