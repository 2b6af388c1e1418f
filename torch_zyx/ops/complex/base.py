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
from ...record.tensor import Storage, ZyxTensor, read, reinterpreted
from ...record.transfer import COMPLEX_TO_ZYX, TORCH_TO_ZYX, ZYX_TO_TORCH
from ..registry import LoweringTable, broadcast_shape, device_of  # noqa: F401  (re-exported)

COMPLEX = LoweringTable()
PROMOTE_DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
PROMOTE_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.COMPLEX_TO_FLOAT
PROMOTE_INT_TO_FLOAT = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
PROMOTE_BOOL = ELEMENTWISE_TYPE_PROMOTION_KIND.ALWAYS_BOOL
PART = {torch.complex64: torch.float32, torch.complex128: torch.float64}
COMPLEX_OF = {dtypes.float32: torch.complex64, dtypes.float64: torch.complex128}


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
    """The values of complex ``x`` as pairs (shape (*x.shape, 2)), its conjugate bit applied."""
    node = read(x)
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
