"""Size-generic loop IR: a kernel's integer literals read from a buffer instead of written in.

Lowering specializes a kernel to its shapes: loop bounds, index offsets, clamps and masks carry
the sizes as integer literals, so two graphs that differ only in a size give two sources and two
compiles. ``generalize`` rewrites a lowered ``LoopKernel`` so that those literals are loaded from
one extra int64 buffer at the kernel's entry (a BUF, then per distinct value a LOAD bound as an
index variable with DEFINE). Kernels whose only difference was such a literal then render to the
same source and share one program; each launch passes its own values.

What is replaced: the constant terms of index sums, the bounds of index comparisons, integer
loop bounds, and int64 constants (index arithmetic on gathered positions). What stays written
in: -1, 0 and 1 (they decide structure as often as size), strides and divisors (``Mul``,
``Div``, ``Mod`` take constant factors: a stride that is a size still specializes the source),
and everything that is not an index. A replaced literal keeps its value as the variable's range,
so every decision a renderer takes from ranges (unsigned division, dropped checks) is the one it
took for the specialized kernel, and shows in the source text: two kernels share a source only
where that text is right for both.

The execute layer uses it for kernels a runtime compiles quick (little work: their code speed
matters less than a compile per new shape, and a plan that keeps running gets its specialized,
optimized kernels instead: execute/realize.py).
"""

from __future__ import annotations

from dataclasses import replace

from .. import dtypes
from . import symbolic as sym
from .ir import Instr, LoopKernel

# Literals kept as they are (see the module docstring).
KEPT = (-1, 0, 1)


class _Literals:
    """The distinct literal values of one kernel, each an index variable once defined."""

    def __init__(self):
        self.values: list[int] = []
        self.vars: dict[int, sym.Var] = {}

    def var(self, value: int) -> sym.Var:
        found = self.vars.get(value)
        if found is None:
            found = self.vars[value] = sym.Var(f"lit{len(self.values)}", value, value)
            self.values.append(value)
        return found

    def expr(self, e: sym.Expr) -> sym.Expr:
        """``e`` with its constant terms and comparison bounds as variables (same value, same
        range); structure unchanged, so nothing is simplified again."""
        if isinstance(e, sym.Num):
            return e if e.value in KEPT else self.var(e.value)
        if isinstance(e, sym.Var):
            return e
        if isinstance(e, sym.Sum):
            return sym.Sum(tuple(self.expr(t) for t in e.terms))
        if isinstance(e, sym.Mul):
            return sym.Mul(self.expr(e.x), e.factor)
        if isinstance(e, sym.Div):
            return sym.Div(self.expr(e.x), e.divisor)
        if isinstance(e, sym.Mod):
            return sym.Mod(self.expr(e.x), e.divisor)
        if isinstance(e, sym.Lt):
            x = self.expr(e.x)
            if e.bound in KEPT:
                return sym.Lt(x, e.bound)
            # x < b as x + (-b) < 0: the bound becomes a term of the sum.
            terms = x.terms if isinstance(x, sym.Sum) else (x,)
            return sym.Lt(sym.Sum(terms + (self.var(-e.bound),)), 0)
        if isinstance(e, sym.And):
            return sym.And(tuple(self.expr(t) for t in e.terms))
        raise TypeError(e)

    def bound(self, value):
        """A loop bound: an int, the call's 'start'/'end', or an expression of them."""
        if isinstance(value, sym.Expr):
            return self.expr(value)
        if isinstance(value, int) and value not in KEPT:
            return self.var(value)
        return value


def generalize(loop: LoopKernel) -> tuple[LoopKernel, tuple[int, ...]] | None:
    """``loop`` with its literals read from buffer slot ``loop.n_buffers`` (int64, the returned
    values in order), or None when it has none to replace."""
    literals = _Literals()
    body: list[Instr] = []
    for ins in loop.instrs:
        if ins.op == "INDEX":
            ins = replace(ins, arg=literals.expr(ins.arg))
        elif ins.op == "RANGE":
            name, start, end, vectorize = ins.arg
            ins = replace(ins, arg=(name, literals.bound(start), literals.bound(end), vectorize))
        elif ins.op == "CONST" and ins.dtype == dtypes.int64 and int(ins.arg) not in KEPT:
            ins = Instr("INDEX", dtypes.int64, (), literals.var(int(ins.arg)))
        body.append(ins)
    if not literals.values:
        return None
    # The prologue: the values' buffer and one defined variable per value, before everything.
    slot = loop.n_buffers
    prologue = [Instr("BUF", dtypes.int64, (), slot)]
    for position, value in enumerate(literals.values):
        prologue.append(Instr("INDEX", dtypes.int64, (), sym.Num(position)))
        prologue.append(Instr("LOAD", dtypes.int64, (0, len(prologue) - 1)))
        prologue.append(Instr("DEFINE", dtypes.int64, (len(prologue) - 1,), literals.vars[value].name))
    shift = len(prologue)
    instrs = prologue + [replace(ins, srcs=tuple(s + shift for s in ins.srcs)) if ins.srcs else ins
                         for ins in body]
    generic = replace(loop, instrs=instrs, n_buffers=slot + 1,
                      buffer_dtypes=list(loop.buffer_dtypes) + [dtypes.int64])
    return generic, tuple(literals.values)
