"""C-style renderer base: loop IR → C-like kernel source (OpenCL C now, CUDA C later).

Stage 5 of the flow for GPU-style devices. Every language difference lives in a
``Language`` table (types, work-item index, kernel signature, memory access formats for the
dtypes stored differently than computed, math builtins, pragmas); ``CStyleRenderer`` only
walks the instructions and fills those formats. Launch mapping: the loop IR's outer RANGE
('start'/'end') becomes the global work-item id, one work item per outer iteration guarded by
``id < end``; inner RANGEs stay ``for`` loops. In a grouped kernel (``LoopKernel.group_size``)
the outer RANGE is the work-group id instead, unguarded (the runtime launches exactly ``end``
groups), the kernel declares its group size (the runtime
launches ``group_size`` items per outer iteration) and group-shared arrays are declared at
kernel scope, as OpenCL requires. Half and bfloat16 are stored as such and
computed in float, as in the LLVM renderer, so every backend rounds the same way.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from .. import dtypes
from ..dtypes import DType
from . import symbolic as sym
from .ir import Instr, LoopKernel

# ------------------------------------------------------------------------------- shared tables

# Binary ALU ops by dtype kind ("f" float, "i" signed, "u" unsigned, "b" bool); "*" for all.
# Float max/min propagate NaN like torch (the C fmax/fmin drop it).
BINARY_FORMAT = {
    "add": {"*": "({a} + {b})", "b": "({a} | {b})"},
    "sub": {"*": "({a} - {b})"},
    "mul": {"*": "({a} * {b})", "b": "({a} & {b})"},
    "div": {"*": "({a} / {b})"},
    "idiv": {"*": "({a} / {b})"},
    "mod": {"f": "fmod({a}, {b})", "*": "({a} % {b})"},
    "and": {"*": "({a} & {b})"},
    "or": {"*": "({a} | {b})"},
    "xor": {"*": "({a} ^ {b})"},
    "shl": {"*": "({a} << {b})"},
    "shr": {"*": "({a} >> {b})"},
    "lt": {"*": "({a} < {b})"},
    "le": {"*": "({a} <= {b})"},
    "eq": {"*": "({a} == {b})"},
    "ne": {"*": "({a} != {b})"},
    "max": {"f": "((isnan({a}) || isnan({b})) ? ({a} + {b}) : fmax({a}, {b}))", "b": "({a} | {b})",
            "*": "max({a}, {b})"},
    "min": {"f": "((isnan({a}) || isnan({b})) ? ({a} + {b}) : fmin({a}, {b}))", "b": "({a} & {b})",
            "*": "min({a}, {b})"},
    "pow": {"f": "pow({a}, {b})"},
    "copysign": {"f": "copysign({a}, {b})"},
    "atan2": {"f": "atan2({a}, {b})"},
}
# Reduction updates are the binary op of the same name.
REDUCE_OP = {"rsum": "add", "rprod": "mul", "rmax": "max", "rmin": "min"}
UNARY_FORMAT = {
    "neg": {"b": "{x}", "*": "(-{x})"},
    "not": {"b": "(!{x})", "*": "(~{x})"},
    "recip": {"f": "(({t})1 / {x})"},
    "isnan": {"f": "isnan({x})", "*": "0"},
    "abs": {"f": "fabs({x})", "i": "(({t})abs({x}))", "*": "{x}"},
}
# Float builtins shared by OpenCL C and CUDA (names per language may override them).
MATH_BUILTINS = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "sin": "sin",
                 "cos": "cos", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
                 "tan": "tan", "erf": "erf", "erfc": "erfc", "tanh": "tanh", "expm1": "expm1",
                 "log1p": "log1p", "atan": "atan", "asin": "asin", "acos": "acos", "sinh": "sinh",
                 "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "lgamma": "lgamma"}


@dataclass
class Language:
    """Everything that differs between C dialects."""

    name: str
    memory_type: dict[str, str]  # dtype name → element type in buffers
    register_type: dict[str, str]  # dtype name → type computed in
    kernel_prefix: str  # before ``void name(``
    buffer_param: str  # format of one buffer parameter: {type}, {name}
    scalar_param: str  # format of a scalar parameter: {type}, {name}
    global_id: str  # the work item's global index as a 64-bit integer
    index_type: str  # 64-bit signed integer: indices, loop counters, the ``end`` bound
    param_type: str  # 64-bit unsigned integer: kernel parameters (random seeds and offsets)
    load_format: dict[str, str] = field(default_factory=dict)  # per dtype: {buf}, {idx}
    store_format: dict[str, str] = field(default_factory=dict)  # per dtype: {buf}, {idx}, {value}
    dtype_prelude: dict[str, str] = field(default_factory=dict)  # per dtype used: pragmas / helpers
    # Per dtype computed in a wider register type (half and bfloat16 in float): a cast to it
    # rounds the register value ({x}) to the dtype's precision, as the LLVM renderer's
    # fptrunc/fpext do, so a fused ``x.to(torch.bfloat16) * 2`` rounds where CPU torch does.
    round_format: dict[str, str] = field(default_factory=dict)
    math_builtins: dict[str, str] = field(default_factory=lambda: dict(MATH_BUILTINS))
    float_suffix: dict[str, str] = field(default_factory=lambda: {"float": "f", "double": ""})
    infinity: str = "INFINITY"
    nan: str = "NAN"
    # Grouped kernels: work-group id and local id as 64-bit integers, the group barrier, a
    # group-shared array ({type}, {name}, {size}) and the group size declaration ({size}).
    group_id: str = ""
    local_id: str = ""
    barrier: str = ""
    local_decl: str = ""
    group_attribute: str = ""


def _kind(dtype: DType) -> str:
    return dtype.kind


def _pick(table: dict[str, str], dtype: DType, op: str) -> str:
    fmt = table.get(_kind(dtype), table.get("*"))
    if fmt is None:
        raise NotImplementedError(f"{op} on {dtype}")
    return fmt


class CStyleRenderer:
    def __init__(self, kernel: LoopKernel, lang: Language):
        self.kernel, self.lang = kernel, lang
        self.lines: list[str] = []
        self.has_outer = False  # seen the outer RANGE (one work item or group per iteration)
        self.values: dict[int, str] = {}
        self.vars: dict[str, str] = {}
        self.depth = 1
        self.closers: dict[int, str] = {}
        self.used_dtypes: set[str] = set()
        self.local_lines: list[str] = []

    # ------------------------------------------------------------------ helpers

    def rtype(self, dtype: DType) -> str:
        self.used_dtypes.add(dtype.name)
        return self.lang.register_type[dtype.name]

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def declare(self, i: int, dtype: DType, value: str) -> str:
        name = f"v{i}"
        self.line(f"const {self.rtype(dtype)} {name} = {value};")
        return name

    def literal(self, value, dtype: DType) -> str:
        t = self.rtype(dtype)
        if dtype.kind == "b":
            return "1" if value else "0"
        if dtype.kind == "f":
            value = float(value)
            if math.isnan(value):
                return f"(({t}){self.lang.nan})"
            if math.isinf(value):
                return f"(({t}){'-' if value < 0 else ''}{self.lang.infinity})"
            if t == "float":
                value = struct.unpack("f", struct.pack("f", value))[0]
            return f"{value.hex()}{self.lang.float_suffix.get(t, '')}"
        value = int(dtypes.python_value(dtype, value))
        if dtype.kind == "u":
            return f"(({t}){value}UL)"
        if value == -(1 << 63):
            return f"(({t})(-9223372036854775807L - 1))"
        return f"(({t}){value}L)"

    # ------------------------------------------------------------------ index expressions

    def expr(self, e: sym.Expr) -> str:
        """A symbolic index as a C expression in 64-bit integers (0/1 for conditions)."""
        if isinstance(e, sym.Num):
            return f"{e.value}L" if e.value >= 0 else f"({e.value}L)"
        if isinstance(e, sym.Var):
            return self.vars[e.name]
        if isinstance(e, sym.Sum):
            return "(" + " + ".join(self.expr(t) for t in e.terms) + ")"
        if isinstance(e, sym.Mul):
            return f"({self.expr(e.x)} * {e.factor}L)"
        if isinstance(e, (sym.Div, sym.Mod)):
            x, d = self.expr(e.x), e.divisor
            if e.x.vmin >= 0:
                return f"({x} / {d}L)" if isinstance(e, sym.Div) else f"({x} % {d}L)"
            # C truncates; the index algebra floors (divisors are positive).
            if isinstance(e, sym.Div):
                return f"({x} / {d}L - ({x} % {d}L < 0))"
            return f"((({x} % {d}L) + {d}L) % {d}L)"
        if isinstance(e, sym.Lt):
            return f"({self.expr(e.x)} < {e.bound}L)"
        if isinstance(e, sym.And):
            return "(" + " && ".join(self.expr(t) for t in e.terms) + ")"
        raise TypeError(e)

    # ------------------------------------------------------------------ instructions

    def cast(self, x: str, src: DType, dst: DType) -> str:
        st, dt = self.rtype(src), self.rtype(dst)
        if dst.kind == "b":
            return f"({x} != 0)"
        value = x if st == dt else f"(({dt}){x})"
        rounding = self.lang.round_format.get(dst.name)
        if rounding is not None and src is not dst:
            # (from float64: through float first, which can round a tie twice)
            return rounding.format(x=value)
        return value

    def alu(self, op: str, dtype: DType, args: list[str], src_dtype: DType) -> str:
        t = self.rtype(src_dtype)
        if len(args) == 1:
            if op in UNARY_FORMAT:
                return _pick(UNARY_FORMAT[op], src_dtype, op).format(x=args[0], t=t)
            if op not in self.lang.math_builtins or src_dtype.kind != "f":
                raise NotImplementedError(f"unary {op} on {src_dtype}")
            return f"{self.lang.math_builtins[op]}({args[0]})"
        fmt = _pick(BINARY_FORMAT[REDUCE_OP.get(op, op)], src_dtype, op)
        return fmt.format(a=args[0], b=args[1], t=t)

    def local_type(self, dtype: DType) -> str:
        # Shared arrays hold the computed type (float for half); bool arrays hold bytes.
        return self.lang.memory_type[dtype.name] if dtype.kind == "b" else self.rtype(dtype)

    def load(self, ins: Instr, instrs: list[Instr]) -> str:
        buf, index = self.values[ins.srcs[0]], self.values[ins.srcs[1]]
        self.rtype(ins.dtype)
        shared = instrs[ins.srcs[0]].op == "LOCAL"
        fmt = "{buf}[{idx}]" if shared else self.lang.load_format.get(ins.dtype.name, "{buf}[{idx}]")
        value = fmt.format(buf=buf, idx=index)
        if len(ins.srcs) > 2:
            # Only the selected branch of ?: is evaluated, so masked lanes never touch memory.
            value = f"({self.values[ins.srcs[2]]} ? {value} : {self.literal(0, ins.dtype)})"
        return value

    def render_instr(self, i: int, ins: Instr, instrs: list[Instr]) -> None:
        op = ins.op
        if op == "BUF":
            name = f"b{ins.arg}"
            if ins.dtype != self.kernel.buffer_dtypes[ins.arg]:
                pointer = self.lang.buffer_param.format(type=self.lang.memory_type[ins.dtype.name], name="")
                name = f"(({pointer}){name})"
            self.values[i] = name
        elif op == "PARAM":
            self.values[i] = f"p{ins.arg}"
            self.n_params = max(self.n_params, ins.arg + 1)
        elif op == "CONST":
            self.values[i] = self.literal(ins.arg, ins.dtype)
        elif op == "INDEX":
            self.values[i] = f"v{i}"
            self.line(f"const {self.lang.index_type} v{i} = {self.expr(ins.arg)};")
        elif op == "RANGE":
            var, start, end = ins.arg[:3]  # the vectorize hint is for CPU loops
            name = f"x_{var}"
            self.vars[var] = self.values[i] = name
            self.has_outer = self.has_outer or start == "start"
            if start == "start" and self.kernel.group_size:
                # No ``id < end`` guard around a grouped kernel: the runtime launches exactly
                # ``end`` groups (none for end == 0), and PoCL 3.1 loses the global stores made
                # between barriers inside an ``if`` (all but the last of a multi-output kernel).
                self.line(f"const {self.lang.index_type} {name} = {self.lang.group_id};")
                self.line("{")
            elif start == "start":
                self.line(f"const {self.lang.index_type} {name} = {self.lang.global_id};")
                self.line(f"if ({name} < end) {{")
            else:
                self.line(f"for ({self.lang.index_type} {name} = {start}L; {name} < {end}L; {name}++) {{")
            self.depth += 1
        elif op in ("ENDRANGE", "ENDIF"):
            self.depth -= 1
            self.line("}")
        elif op == "IF":
            self.line(f"if ({self.values[ins.srcs[0]]}) {{")
            self.depth += 1
        elif op == "SPECIAL":
            var, _what = ins.arg  # the local id, the only special value so far
            self.vars[var] = self.values[i] = f"x_{var}"
            self.line(f"const {self.lang.index_type} x_{var} = {self.lang.local_id};")
        elif op == "DEFINE":
            self.vars[ins.arg] = self.values[i] = f"x_{ins.arg}"
            self.line(f"const {self.lang.index_type} x_{ins.arg} = {self.values[ins.srcs[0]]};")
        elif op == "LOCAL":
            self.values[i] = f"lm{i}"
            self.local_lines.append("  " + self.lang.local_decl.format(
                type=self.local_type(ins.dtype), name=f"lm{i}", size=ins.arg))
        elif op == "BARRIER":
            self.line(self.lang.barrier)
        elif op == "LOAD":
            self.values[i] = self.declare(i, ins.dtype, self.load(ins, instrs))
        elif op == "STORE":
            buf, index, value = (self.values[s] for s in ins.srcs)
            dtype = instrs[ins.srcs[2]].dtype
            self.rtype(dtype)
            shared = instrs[ins.srcs[0]].op == "LOCAL"
            fmt = "{buf}[{idx}] = {value};" if shared else \
                self.lang.store_format.get(dtype.name, "{buf}[{idx}] = {value};")
            self.line(fmt.format(buf=buf, idx=index, value=value))
        elif op == "ALU":
            srcs = [self.values[s] for s in ins.srcs]
            value = self.alu(ins.arg, ins.dtype, srcs, instrs[ins.srcs[0]].dtype)
            self.values[i] = self.declare(i, ins.dtype, value)
        elif op == "CAST":
            value = self.cast(self.values[ins.srcs[0]], instrs[ins.srcs[0]].dtype, ins.dtype)
            self.values[i] = self.declare(i, ins.dtype, value)
        elif op == "WHERE":
            c, a, b = (self.values[s] for s in ins.srcs)
            self.values[i] = self.declare(i, ins.dtype, f"({c} ? {a} : {b})")
        elif op == "ACC":
            self.values[i] = f"acc{i}"
            self.line(f"{self.rtype(ins.dtype)} acc{i} = {self.literal(ins.arg, ins.dtype)};")
        elif op == "ACC_GET":
            # A snapshot: the accumulator changes after this point.
            self.values[i] = self.declare(i, ins.dtype, self.values[ins.srcs[0]])
        elif op == "ACC_SET":
            acc, value = ins.srcs
            self.line(f"{self.values[acc]} = {self.values[value]};")
        else:
            raise NotImplementedError(op)

    def render(self) -> str:
        k, lang = self.kernel, self.lang
        self.n_params = 0
        for i, ins in enumerate(k.instrs):
            self.render_instr(i, ins, k.instrs)
        args = [lang.buffer_param.format(type=lang.memory_type[d.name], name=f"b{slot}")
                for slot, d in enumerate(k.buffer_dtypes)]
        self.used_dtypes.update(d.name for d in k.buffer_dtypes)
        args += [lang.scalar_param.format(type=lang.param_type, name=f"p{n}") for n in range(self.n_params)]
        args.append(lang.scalar_param.format(type=lang.index_type, name="end"))
        prelude = [lang.dtype_prelude[d] for d in sorted(self.used_dtypes) if d in lang.dtype_prelude]
        prefix = lang.kernel_prefix
        if k.group_size:
            prefix += " " + lang.group_attribute.format(size=k.group_size)
        head = f"{prefix} void {k.name}({', '.join(args)}) {{"
        body = self.lines
        if not self.has_outer and not k.group_size:
            # A kernel without an outer loop (a 0-d result) is one iteration: work item 0 runs
            # it. The runtime launches a whole group, and the others must not repeat an
            # in-place read-modify-write.
            body = [f"  if ({lang.global_id} == 0) {{"] + ["  " + line for line in body] + ["  }"]
        return "\n".join(prelude + [head] + self.local_lines + body + ["}", ""])


def render(kernel: LoopKernel, lang: Language) -> str:
    return CStyleRenderer(kernel, lang).render()
