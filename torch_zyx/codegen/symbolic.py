"""Symbolic integer index expressions with bounds, simplified as they are built.

Used by lowering (kernel → loop IR) to turn views into index arithmetic. Every expression
knows its [vmin, vmax] range; division and modulo by constants use those ranges to cancel
(``(i*64 + j) // 64 → i`` when ``0 <= j < 64``), which is what makes composed views cheap.
Expressions are immutable and compared structurally (``key``).
"""

from __future__ import annotations

import math


class cached_property:
    """``functools.cached_property`` without the lock Python 3.11 takes per property (each class
    here has its own ``key``, and one key computing another's under two threads deadlocked):
    the value is computed on first use and kept in the instance's ``__dict__``, which then
    shadows this (non-data) descriptor. Computing it twice in a race gives equal values."""

    def __init__(self, compute):
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = self.compute(instance)
        instance.__dict__[self.name] = value
        return value


class Expr:
    __slots__ = ("__dict__", "vmax", "vmin")
    vmin: int
    vmax: int

    @cached_property
    def key(self) -> tuple:
        raise NotImplementedError

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self.key == other.key

    # Arithmetic builds simplified expressions.
    def __add__(self, other) -> Expr:
        return add(self, lift(other))

    __radd__ = __add__

    def __sub__(self, other) -> Expr:
        return add(self, mul(lift(other), -1))

    def __mul__(self, other: int) -> Expr:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: int) -> Expr:
        return div(self, other)

    def __mod__(self, other: int) -> Expr:
        return mod(self, other)


class Num(Expr):
    def __init__(self, value: int):
        self.value = int(value)
        self.vmin = self.vmax = self.value

    @cached_property
    def key(self) -> tuple:
        return ("n", self.value)

    def __repr__(self) -> str:
        return str(self.value)


class Var(Expr):
    """A loop variable named ``name`` taking values in [vmin, vmax]."""

    def __init__(self, name: str, vmin: int, vmax: int):
        self.name, self.vmin, self.vmax = name, int(vmin), int(vmax)

    @cached_property
    def key(self) -> tuple:
        return ("v", self.name, self.vmin, self.vmax)

    def __repr__(self) -> str:
        return self.name


class Sum(Expr):
    """Sum of terms (never contains a nested Sum; at most one Num, kept last)."""

    def __init__(self, terms: tuple[Expr, ...]):
        self.terms = terms
        self.vmin = sum(t.vmin for t in terms)
        self.vmax = sum(t.vmax for t in terms)

    @cached_property
    def key(self) -> tuple:
        return ("+",) + tuple(t.key for t in self.terms)

    def __repr__(self) -> str:
        return "(" + " + ".join(map(repr, self.terms)) + ")"


class Mul(Expr):
    """``x * factor`` with a constant factor (never 0 or 1)."""

    def __init__(self, x: Expr, factor: int):
        self.x, self.factor = x, factor
        ends = (x.vmin * factor, x.vmax * factor)
        self.vmin, self.vmax = min(ends), max(ends)

    @cached_property
    def key(self) -> tuple:
        return ("*", self.x.key, self.factor)

    def __repr__(self) -> str:
        return f"{self.x!r}*{self.factor}"


class Div(Expr):
    """Floor division by a positive constant."""

    def __init__(self, x: Expr, divisor: int):
        self.x, self.divisor = x, divisor
        self.vmin, self.vmax = x.vmin // divisor, x.vmax // divisor

    @cached_property
    def key(self) -> tuple:
        return ("/", self.x.key, self.divisor)

    def __repr__(self) -> str:
        return f"({self.x!r} // {self.divisor})"


class Mod(Expr):
    """Python (floor) modulo by a positive constant."""

    def __init__(self, x: Expr, divisor: int):
        self.x, self.divisor = x, divisor
        self.vmin, self.vmax = 0, divisor - 1

    @cached_property
    def key(self) -> tuple:
        return ("%", self.x.key, self.divisor)

    def __repr__(self) -> str:
        return f"({self.x!r} % {self.divisor})"


class Lt(Expr):
    """``x < bound`` as 0/1."""

    def __init__(self, x: Expr, bound: int):
        self.x, self.bound = x, bound
        self.vmin, self.vmax = 0, 1

    @cached_property
    def key(self) -> tuple:
        return ("<", self.x.key, self.bound)

    def __repr__(self) -> str:
        return f"({self.x!r} < {self.bound})"


class And(Expr):
    def __init__(self, terms: tuple[Expr, ...]):
        self.terms = terms
        self.vmin, self.vmax = 0, 1

    @cached_property
    def key(self) -> tuple:
        return ("&",) + tuple(t.key for t in self.terms)

    def __repr__(self) -> str:
        return "(" + " && ".join(map(repr, self.terms)) + ")"


TRUE = Num(1)
FALSE = Num(0)


def lift(x) -> Expr:
    return x if isinstance(x, Expr) else Num(x)


def _split_term(term: Expr) -> tuple[Expr, int]:
    """``term`` as (base, factor) with ``term == base * factor``."""
    if isinstance(term, Mul):
        return term.x, term.factor
    return term, 1


def add(x: Expr, y: Expr) -> Expr:
    terms: list[Expr] = []
    for e in (x, y):
        terms.extend(e.terms if isinstance(e, Sum) else (e,))
    constant = 0
    factors: dict[tuple, list] = {}
    for term in terms:
        if isinstance(term, Num):
            constant += term.value
            continue
        base, factor = _split_term(term)
        entry = factors.setdefault(base.key, [base, 0])
        entry[1] += factor
    _fold_div_mod(factors)
    unit = factors.pop(Num(1).key, None)
    if unit is not None:
        constant += unit[1]
    out: list[Expr] = [mul(base, factor) for base, factor in factors.values() if factor != 0]
    if constant:
        out.append(Num(constant))
    if not out:
        return Num(0)
    if len(out) == 1:
        return out[0]
    return Sum(tuple(out))


def _fold_div_mod(factors: dict[tuple, list]) -> None:
    """Rewrite ``(x // d) * d * f + (x % d) * f`` into ``x * f`` in place (unravel then ravel)."""
    changed = True
    while changed:
        changed = False
        for key, (base, factor) in list(factors.items()):
            if not isinstance(base, Mod) or factor == 0:
                continue
            partner = factors.get(Div(base.x, base.divisor).key)
            if partner is None or partner[1] != factor * base.divisor:
                # ((x // d) % m) * d + x % d == x % (d * m)
                for other_key, (other, other_factor) in factors.items():
                    if (isinstance(other, Mod) and isinstance(other.x, Div)
                            and other_factor == factor * base.divisor
                            and other.x.divisor == base.divisor and other.x.x.key == base.x.key):
                        factors[other_key][1] = 0
                        factors[key][1] = 0
                        merged = mod(base.x, base.divisor * other.divisor)
                        mbase, mfactor = _split_term(merged)
                        factors.setdefault(mbase.key, [mbase, 0])[1] += mfactor * factor
                        changed = True
                        break
                if changed:
                    break
                continue
            partner[1] = 0
            factors[key][1] = 0
            entry = factors.setdefault(base.x.key, [base.x, 0])
            if isinstance(base.x, (Sum, Mul, Num)):
                # Keep the dict flat: a composite base is re-added term by term.
                del factors[base.x.key]
                expanded = mul(base.x, factor)
                for term in expanded.terms if isinstance(expanded, Sum) else (expanded,):
                    tbase, tfactor = (Num(1), term.value) if isinstance(term, Num) else _split_term(term)
                    factors.setdefault(tbase.key, [tbase, 0])[1] += tfactor
            else:
                entry[1] += factor
            changed = True


def mul(x: Expr, factor: int) -> Expr:
    factor = int(factor)
    if factor == 0:
        return Num(0)
    if factor == 1:
        return x
    if isinstance(x, Num):
        return Num(x.value * factor)
    if isinstance(x, Mul):
        return mul(x.x, x.factor * factor)
    if isinstance(x, Sum):
        return Sum(tuple(mul(t, factor) for t in x.terms)) if len(x.terms) > 1 else mul(x.terms[0], factor)
    return Mul(x, factor)


def div(x: Expr, divisor: int) -> Expr:
    divisor = int(divisor)
    assert divisor > 0
    if divisor == 1:
        return x
    if x.vmin // divisor == x.vmax // divisor:
        return Num(x.vmin // divisor)
    if isinstance(x, Mul) and x.factor > 0:
        if x.factor % divisor == 0:
            return mul(x.x, x.factor // divisor)
        if divisor % x.factor == 0:
            return div(x.x, divisor // x.factor)
    if isinstance(x, Div):
        return div(x.x, x.divisor * divisor)
    if isinstance(x, Sum):
        # floor((a*d + r) / d) == a + floor(r / d) for integer a: pull divisible terms out.
        whole: list[Expr] = []
        rest: list[Expr] = []
        for term in x.terms:
            factor = term.value if isinstance(term, Num) else _split_term(term)[1]
            (whole if factor % divisor == 0 else rest).append(term)
        if whole:
            quotient = Num(0)
            for term in whole:
                quotient = add(quotient, _exact_div(term, divisor))
            remainder = _sum(rest)
            return add(quotient, div(remainder, divisor))
        # All remaining terms share a factor g with the divisor: divide both by g.
        g = divisor
        for term in x.terms:
            g = math.gcd(g, term.value if isinstance(term, Num) else _split_term(term)[1])
        if g > 1:
            return div(_sum([_exact_div(t, g) for t in x.terms]), divisor // g)
    return Div(x, divisor)


def _exact_div(term: Expr, divisor: int) -> Expr:
    if isinstance(term, Num):
        return Num(term.value // divisor)
    base, factor = _split_term(term)
    return mul(base, factor // divisor)


def _sum(terms: list[Expr]) -> Expr:
    out: Expr = Num(0)
    for term in terms:
        out = add(out, term)
    return out


def mod(x: Expr, divisor: int) -> Expr:
    divisor = int(divisor)
    assert divisor > 0
    if divisor == 1:
        return Num(0)
    if 0 <= x.vmin and x.vmax < divisor:
        return x
    if isinstance(x, Num):
        return Num(x.value % divisor)
    if isinstance(x, Mul) and x.factor > 0:
        if x.factor % divisor == 0:
            return Num(0)
        if divisor % x.factor == 0:
            return mul(mod(x.x, divisor // x.factor), x.factor)
    if isinstance(x, Mod) and x.divisor % divisor == 0:
        return mod(x.x, divisor)
    if isinstance(x, Sum):
        kept = [t for t in x.terms if not _divisible(t, divisor)]
        if len(kept) < len(x.terms):
            return mod(_sum(kept), divisor)
        g = divisor
        for term in x.terms:
            g = math.gcd(g, term.value if isinstance(term, Num) else _split_term(term)[1])
        if g > 1:
            # (g*a) % (g*d) == g * (a % d)
            return mul(mod(_sum([_exact_div(t, g) for t in x.terms]), divisor // g), g)
    return Mod(x, divisor)


def _divisible(term: Expr, divisor: int) -> bool:
    if isinstance(term, Num):
        return term.value % divisor == 0
    return _split_term(term)[1] % divisor == 0


def multiple_of(x: Expr, divisor: int) -> bool:
    """Whether ``x`` is a multiple of ``divisor`` for every value of its variables (each term
    of a sum is, as far as its factor shows)."""
    return all(_divisible(term, divisor) for term in (x.terms if isinstance(x, Sum) else (x,)))


def lt(x: Expr, bound: int) -> Expr:
    if x.vmax < bound:
        return TRUE
    if x.vmin >= bound:
        return FALSE
    return Lt(x, bound)


def ge(x: Expr, bound: int) -> Expr:
    """``x >= bound`` written as ``-x < 1 - bound``."""
    if x.vmin >= bound:
        return TRUE
    if x.vmax < bound:
        return FALSE
    return Lt(mul(x, -1), 1 - bound)


def disjoint(first: Expr, second: Expr) -> bool:
    """Whether no integer point satisfies both conditions: one holds ``x < a`` and the other
    ``-x < b`` (``x >= 1 - b``, as ``ge`` writes it) with ``a <= 1 - b``, the two sides of a
    concatenation's boundary."""
    def terms(cond: Expr) -> list:
        return [t for t in (cond.terms if isinstance(cond, And) else (cond,)) if isinstance(t, Lt)]

    for one in terms(first):
        for other in terms(second):
            if mul(one.x, -1).key == other.x.key and one.bound <= 1 - other.bound:
                return True
            if mul(other.x, -1).key == one.x.key and other.bound <= 1 - one.bound:
                return True
    return False


def and_(*conds: Expr) -> Expr:
    terms: list[Expr] = []
    for cond in conds:
        if cond.key == FALSE.key:
            return FALSE
        if cond.key == TRUE.key:
            continue
        for term in cond.terms if isinstance(cond, And) else (cond,):
            if term.key not in [t.key for t in terms]:
                terms.append(term)
    if not terms:
        return TRUE
    if len(terms) == 1:
        return terms[0]
    return And(tuple(terms))


def substitute(x: Expr, var: Var, value: Expr) -> Expr:
    """``x`` with ``var`` replaced by ``value`` (re-simplified)."""
    if isinstance(x, Var):
        return value if x.key == var.key else x
    if isinstance(x, Num):
        return x
    if isinstance(x, Sum):
        return _sum([substitute(t, var, value) for t in x.terms])
    if isinstance(x, Mul):
        return mul(substitute(x.x, var, value), x.factor)
    if isinstance(x, Div):
        return div(substitute(x.x, var, value), x.divisor)
    if isinstance(x, Mod):
        return mod(substitute(x.x, var, value), x.divisor)
    if isinstance(x, Lt):
        return lt(substitute(x.x, var, value), x.bound)
    if isinstance(x, And):
        return and_(*(substitute(t, var, value) for t in x.terms))
    raise TypeError(x)
