"""Matmul family: mm, bmm, addmm, baddbmm, addmv/mv, dot (matmul and linear decompose to these).

A matmul is a broadcast multiply reduced over K: ``(A[M,1,K] * B^T[1,N,K]).sum(-1)``; the
kernelizer fuses bias and activations around the reduce into the same kernel, and lowering
turns the reduce into a register-tiled loop. Half types accumulate in float32.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import read, wrap
from ...record.transfer import zdtype
from ..registry import aten, register


def _acc(node: Node) -> Node:
    return g.cast(node, dtypes.float32) if node.dtype in (dtypes.float16, dtypes.bfloat16) else node


def matmul_nodes(a: Node, b: Node) -> Node:
    """``a[..., M, K] @ b[..., K, N]`` with equal batch dims."""
    *batch, m, k = a.shape
    n = b.shape[-1]
    nb = len(batch)
    batch = tuple(batch)
    a3 = g.expand(g.reshape(a, batch + (m, 1, k)), batch + (m, n, k))
    bt = g.permute(b, tuple(range(nb)) + (nb + 1, nb))
    b3 = g.expand(g.reshape(bt, batch + (1, n, k)), batch + (m, n, k))
    if k == 0 or m * n * math.prod(batch) == 0:
        # Nothing to reduce or nothing to compute: a constant (an empty output must not become a
        # kernel: the launcher was seen writing a (0, N) result's N elements into a 0-byte buffer).
        return g.const(0, _acc(a).dtype, batch + (m, n))
    prod = g.binary("mul", _acc(a3), _acc(b3))
    return g.reshape(g.reduce("sum", prod, (nb + 2,)), batch + (m, n))


def _check(a, b, name):
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[-2]}x{a.shape[-1]} and "
                           f"{b.shape[-2]}x{b.shape[-1]})")


@register(aten.mm.default)
def mm(a, b):
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"{'self' if a.dim() != 2 else 'mat2'} must be a matrix")
    _check(a, b, "mm")
    out = matmul_nodes(read(a), read(b))
    return wrap(g.cast(out, zdtype(a.dtype)), a._storage.device)


@register(aten.bmm.default)
def bmm(a, b):
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor" if a.dim() != 3 else "batch2 must be a 3D tensor")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError("batch1 and batch2 must have same number of batches")
    _check(a, b, "bmm")
    out = matmul_nodes(read(a), read(b))
    return wrap(g.cast(out, zdtype(a.dtype)), a._storage.device)


def _scaled_sum(prod: Node, bias, beta, alpha, dtype) -> Node:
    if alpha != 1:
        prod = g.binary("mul", prod, g.const(alpha, prod.dtype, prod.shape))
    if beta != 0 and bias is not None:
        bn = _acc(g.cast(read(bias), dtype))
        bn = g.expand(g.reshape(bn, (1,) * (len(prod.shape) - len(bn.shape)) + bn.shape), prod.shape)
        if beta != 1:
            bn = g.binary("mul", bn, g.const(beta, bn.dtype, bn.shape))
        prod = g.binary("add", bn, prod)
    return g.cast(prod, dtype)


@register(aten.addmm.default)
def addmm(bias, a, b, beta=1, alpha=1):
    _check(a, b, "addmm")
    prod = matmul_nodes(read(a), read(b))
    return wrap(_scaled_sum(prod, bias, beta, alpha, zdtype(a.dtype)), a._storage.device)


@register(aten.baddbmm.default)
def baddbmm(bias, a, b, beta=1, alpha=1):
    _check(a, b, "baddbmm")
    prod = matmul_nodes(read(a), read(b))
    return wrap(_scaled_sum(prod, bias, beta, alpha, zdtype(a.dtype)), a._storage.device)


@register(aten.addbmm.default)
def addbmm(bias, a, b, beta=1, alpha=1):
    _check(a, b, "addbmm")
    prod = g.reshape(g.reduce("sum", matmul_nodes(read(a), read(b)), (0,)), (a.shape[1], b.shape[2]))
    return wrap(_scaled_sum(prod, bias, beta, alpha, zdtype(a.dtype)), a._storage.device)


@register(aten.mv.default)
def mv(a, v):
    if a.dim() != 2 or v.dim() != 1 or a.shape[1] != v.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({a.shape[0]}x{a.shape[1] if a.dim() > 1 else ''}), "
                           f"vec ({v.shape[0] if v.dim() else ''})")
    _check_addmv_dtypes(v, a, v)
    out = matmul_nodes(read(a), g.reshape(read(v), (v.shape[0], 1)))
    return wrap(g.cast(g.reshape(out, (a.shape[0],)), zdtype(a.dtype)), a._storage.device)


def _check_addmv_dtypes(result, mat, vec) -> None:
    """CPU torch's check of addmv (and of mv, through it): one dtype for all."""
    if not result.dtype == mat.dtype == vec.dtype:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {_name(result.dtype)}, "
                           f"{_name(mat.dtype)}, and {_name(vec.dtype)}")


@register(aten.addmv.default)
def addmv(bias, a, v, beta=1, alpha=1):
    _check_addmv_dtypes(bias, a, v)
    prod = g.reshape(matmul_nodes(read(a), g.reshape(read(v), (v.shape[0], 1))), (a.shape[0],))
    return wrap(_scaled_sum(prod, bias, beta, alpha, zdtype(a.dtype)), a._storage.device)


@register(aten.dot.default, aten.vdot.default)
def dot(a, b):
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {_name(a.dtype)} and "
                           f"{_name(b.dtype)}")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] "
                           "to have the same number of elements, but got {} and {} elements respectively"
                           .format(a.shape[0], b.shape[0]))
    an, bn = _acc(read(a)), _acc(read(b))
    out = (g.reshape(g.reduce("sum", g.binary("mul", an, bn), (0,)), ()) if a.shape[0]
           else g.const(0, an.dtype, ()))
    return wrap(g.cast(out, zdtype(a.dtype)), a._storage.device)


def _name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long"}.get(dtype, str(dtype))


@register(aten._trilinear.default)
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``(i1 ⊗ i2 ⊗ i3)`` summed over ``sumdim`` (nn.functional.bilinear): each input gets size-1
    axes at its ``expand`` dims, the three broadcast-multiply, one reduce (fuses into a kernel)."""
    nodes = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        n = _acc(read(t))
        shape = list(n.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        nodes.append(g.reshape(n, tuple(shape)))
    shape = tuple(torch.broadcast_shapes(*(n.shape for n in nodes)))
    a, b, c = (g.expand(n, shape) for n in nodes)
    prod = g.binary("mul", g.binary("mul", a, b), c)
    sumdim = sorted({d % len(shape) for d in sumdim})
    out_shape = tuple(s for i, s in enumerate(shape) if i not in sumdim)
    if sumdim:
        if any(shape[d] == 0 for d in sumdim):
            prod = g.const(0, prod.dtype, out_shape)
        else:
            prod = g.reshape(g.reduce("sum", prod, tuple(sumdim)), out_shape)
    return wrap(g.cast(prod, zdtype(i1.dtype)), i1._storage.device)
