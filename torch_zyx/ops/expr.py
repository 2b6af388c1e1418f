"""``Ex``: a float node with arithmetic operators, so formulas of special functions and of
samplers read like arithmetic (math/cephes.py, igamma.py, polynomials.py; random/rejection.py,
reparam.py; optim/fused.py); Python numbers become constants of the node's dtype and shape.
"""

from __future__ import annotations

from ..lazy import graph as g
from ..lazy.graph import Node


class Ex:
    """A float node with arithmetic operators; Python numbers become constants of its dtype."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    def _other(self, v) -> Node:
        return v.node if isinstance(v, Ex) else g.const(v, self.node.dtype, self.node.shape)

    def _bin(self, op: str, v, reverse: bool = False) -> Ex:
        a, b = self.node, self._other(v)
        return Ex(g.binary(op, b, a) if reverse else g.binary(op, a, b))

    def __add__(self, v): return self._bin("add", v)
    def __radd__(self, v): return self._bin("add", v, True)
    def __sub__(self, v): return self._bin("sub", v)
    def __rsub__(self, v): return self._bin("sub", v, True)
    def __mul__(self, v): return self._bin("mul", v)
    def __rmul__(self, v): return self._bin("mul", v, True)
    def __truediv__(self, v): return self._bin("div", v)
    def __rtruediv__(self, v): return self._bin("div", v, True)
    def __pow__(self, v): return self._bin("pow", v)
    def __rpow__(self, v): return self._bin("pow", v, True)
    def __neg__(self): return Ex(g.unary("neg", self.node))
    def __lt__(self, v): return Ex(g.binary("lt", self.node, self._other(v)))
    def __le__(self, v): return Ex(g.binary("le", self.node, self._other(v)))
    def __gt__(self, v): return Ex(g.binary("lt", self._other(v), self.node))
    def __ge__(self, v): return Ex(g.binary("le", self._other(v), self.node))
    def __and__(self, v): return Ex(g.binary("and", self.node, v.node))
    def __or__(self, v): return Ex(g.binary("or", self.node, v.node))
    def __invert__(self): return Ex(g.unary("not", self.node))

    def eq(self, v) -> Ex:
        return Ex(g.binary("eq", self.node, self._other(v)))

    def ne(self, v) -> Ex:
        return Ex(g.binary("ne", self.node, self._other(v)))

    def full(self, value) -> Ex:
        """A constant of this node's dtype and shape."""
        return Ex(g.const(value, self.node.dtype, self.node.shape))

    def f(self, name: str) -> Ex:
        """A unary primitive (exp, log, sqrt, sin, ...)."""
        return Ex(g.unary(name, self.node))


def where(cond: Ex, a, b) -> Ex:
    """``a`` where ``cond`` else ``b``; either may be a Python number (taking the other's dtype)."""
    like = a if isinstance(a, Ex) else b
    a = a if isinstance(a, Ex) else Ex(g.const(a, like.node.dtype, cond.node.shape))
    b = b if isinstance(b, Ex) else Ex(g.const(b, like.node.dtype, cond.node.shape))
    return Ex(g.where(cond.node, a.node, b.node))
