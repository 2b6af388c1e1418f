"""C-style renderer base: loop IR → C-like kernel source (OpenCL C, CUDA C).

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

Two launch shapes are the table's choice too: a dialect with ``global_stride`` runs the outer
RANGE as a grid-stride loop (the runtime may launch fewer work items than outer iterations,
each taking several), and one with warp shuffles (``warp_size``, ``shuffle_down``) renders the
grouped kernels' shared-memory tree reductions as shuffle trees within each warp, with one
shared-memory step between the warps (``warp_tree``): two barriers instead of log2(group).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from .. import dtypes
from ..dtypes import DType
from . import symbolic as sym
from .ir import Instr, LoopKernel, is_plus_zero

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
    # Group-shared arrays past ``static_local_limit`` bytes in all (0: no limit): one dynamic
    # array (``dynamic_local_decl``, {size}: its bytes; the helpers it needs in
    # ``dynamic_local_prelude``) that each array is a view of ({type}, {name}, {offset} bytes),
    # its size named in ``dynamic_local_note`` ({size}: the runtime launches with it).
    static_local_limit: int = 0
    dynamic_local_prelude: str = ""
    dynamic_local_decl: str = ""
    dynamic_local_view: str = ""
    dynamic_local_note: str = ""
    # The outer RANGE of an ungrouped kernel as a grid-stride loop: the number of work items
    # the launch runs ({stride} as a 64-bit integer); empty: one work item per iteration.
    global_stride: str = ""
    # Warp shuffles for the tree reductions of grouped kernels: lanes per warp, the shuffle
    # ({x} from the lane {offset} above; every lane of the warp takes part), the register
    # types it moves. Empty: trees in group-shared memory only (``warp_tree``).
    warp_size: int = 0
    shuffle_down: str = ""
    shuffle_types: frozenset = frozenset()
    # Math builtins whose faster, less accurate form serves a value that is only ever rounded
    # to a narrower dtype (key: that dtype): its error is far below the dtype's last place.
    fast_math: dict[str, dict[str, str]] = field(default_factory=dict)
    # Vector memory access: the 4-element vector type of a memory type (empty: none), the
    # vector load ({vtype}, {buf}, {idx}) and store ({vtype}, {buf}, {idx}, {values}: the four
    # elements, comma-separated), and the conversions of one element between its memory type
    # and its register type ({x}) for the dtypes that have one. Four loads (or stores) of one
    # buffer at neighbouring elements, the first at a multiple of four, become one vector
    # access: buffers start 16-byte aligned (the runtime's allocations).
    vector_types: dict[str, str] = field(default_factory=dict)
    vector_load: str = ""
    vector_store: str = ""
    from_memory: dict[str, str] = field(default_factory=dict)
    to_memory: dict[str, str] = field(default_factory=dict)
    # Tensor-core products (``FRAGMENT``, ``MMA``): a fragment's type ({kind}: "a" or "b") and its
    # load from a stored shared array ({kind}, {buf}, {idx}, {pitch}: elements between rows),
    # the product per input dtype ({a}, {b}, and {c0}..{c3}: the accumulators it updates) and
    # the helpers they use. Empty: none (lowering emits them only for devices that have them).
    fragment_type: str = ""
    fragment_load: str = ""
    mma: dict[str, str] = field(default_factory=dict)
    mma_prelude: str = ""
    # ``PACK`` per element dtype ({values}: the eight floats), and ``SHUFFLE``'s exchange of a
    # register between the lanes of a warp ({x}, {mask}: the other lane is l ^ mask).
    fragment_pack: dict[str, str] = field(default_factory=dict)
    shuffle_xor: str = ""
    # Asynchronous copies into shared memory (``ASYNC_COPY``: {local}, {lidx}, {buf}, {gidx}; a
    # tensor-core helper), a group's commit and the wait ({n}: groups that may stay pending).
    async_copy: str = ""
    async_commit: str = ""
    async_wait: str = ""
    # BITCAST: per float dtype, its register value's bits as a signed integer of its size ({x})
    # and a register value from such bits ({x}: an integer of that size, any signedness).
    bit_view: dict[str, tuple[str, str]] = field(default_factory=dict)
    # A 32-bit signed integer type for the indices and loop counters of a kernel whose every
    # index expression stays within +-2^30 (``_small_indices``): GPUs do 64-bit integer
    # arithmetic in several instructions. Empty: always ``index_type``.
    small_index_type: str = ""


def _computed_local(ins: Instr) -> bool:
    """Whether ``ins`` is a group-shared array of the computed type (float for half; ``arg`` its
    size), not one held as the dtype is stored (``arg`` (size, "stored"): accessed as buffers
    are, read by tensor-core fragments)."""
    return ins.op == "LOCAL" and not isinstance(ins.arg, tuple)


# Index expressions within +-2^30 run in 32-bit integers (``Language.small_index_type``): the
# margin keeps a grid-stride loop's last increment (below 2^30 work items) from overflowing.
_SMALL_INDEX = 1 << 30


def _small_indices(kernel: LoopKernel) -> bool:
    """Whether every index the kernel computes, and every part of each, stays within +-2^30
    (the index algebra knows each expression's range; loop bounds and the outer iterations
    included)."""
    if kernel.global_size >= _SMALL_INDEX:
        return False
    for ins in kernel.instrs:
        if ins.op == "INDEX" and not _expr_fits(ins.arg):
            return False
        if ins.op == "RANGE" and any(isinstance(b, int) and abs(b) >= _SMALL_INDEX for b in ins.arg[1:3]):
            return False
    return True


def _expr_fits(e: sym.Expr) -> bool:
    if not (-_SMALL_INDEX < e.vmin and e.vmax < _SMALL_INDEX):
        return False
    if isinstance(e, (sym.Sum, sym.And)):
        return all(_expr_fits(t) for t in e.terms)
    if isinstance(e, (sym.Mul, sym.Div, sym.Mod, sym.Lt)):
        return _expr_fits(e.x)
    return True


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
        self.locals: list[tuple] = []  # group-shared arrays: (type, name, elements, bytes each)
        self.vectors: dict[int, tuple[int, ...]] = {}  # vector_runs()
        self.mma_used = False  # a FRAGMENT seen: the tensor-core helpers go in the prelude
        self.raw: dict[int, str] = {}  # a half dtype's value → its stored bits, where known (raw_of)
        # Indices in 32 bits where they fit (``small_index_type``): the type and literal suffix.
        small = bool(lang.small_index_type) and _small_indices(kernel)
        self.index_type = lang.small_index_type if small else lang.index_type
        self.suffix = "" if small else "L"

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
        """A symbolic index as a C expression in the kernel's index integers (0/1 for
        conditions)."""
        u = self.suffix
        if isinstance(e, sym.Num):
            return f"{e.value}{u}" if e.value >= 0 else f"({e.value}{u})"
        if isinstance(e, sym.Var):
            return self.vars[e.name]
        if isinstance(e, sym.Sum):
            return "(" + " + ".join(self.expr(t) for t in e.terms) + ")"
        if isinstance(e, sym.Mul):
            return f"({self.expr(e.x)} * {e.factor}{u})"
        if isinstance(e, (sym.Div, sym.Mod)):
            x, d = self.expr(e.x), e.divisor
            if e.x.vmin >= 0:
                return f"({x} / {d}{u})" if isinstance(e, sym.Div) else f"({x} % {d}{u})"
            # C truncates; the index algebra floors (divisors are positive).
            if isinstance(e, sym.Div):
                return f"({x} / {d}{u} - ({x} % {d}{u} < 0))"
            return f"((({x} % {d}{u}) + {d}{u}) % {d}{u})"
        if isinstance(e, sym.Lt):
            return f"({self.expr(e.x)} < {e.bound}{u})"
        if isinstance(e, sym.And):
            return "(" + " && ".join(self.expr(t) for t in e.terms) + ")"
        raise TypeError(e)

    # ------------------------------------------------------------------ instructions

    def cast(self, x: str, src: DType, dst: DType) -> str:
        st, dt = self.rtype(src), self.rtype(dst)
        if dst.kind == "b":
            return f"({x} != 0)"
        if src.kind == "f" and dst.kind == "u":
            # C leaves a negative float's conversion to unsigned undefined (CUDA's saturates to
            # 0); CPU torch on x86 gives -1.0 -> 2^n - 1: through a signed 64-bit integer, as the
            # LLVM renderer's float_to_unsigned (uint64 only below 0: 2^63 and up fit no signed).
            signed = f"(({dt})({self.lang.index_type}){x})"
            return signed if dst.itemsize < 8 else f"({x} < 0 ? {signed} : (({dt}){x}))"
        value = x if st == dt else f"(({dt}){x})"
        rounding = self.lang.round_format.get(dst.name)
        if rounding is not None and src is not dst:
            # (from float64: through float first, which can round a tie twice)
            return rounding.format(x=value)
        return value

    def alu(self, op: str, dtype: DType, args: list[str], src_dtype: DType, rounded: str = "") -> str:
        t = self.rtype(src_dtype)
        if len(args) == 1:
            if op in UNARY_FORMAT:
                return _pick(UNARY_FORMAT[op], src_dtype, op).format(x=args[0], t=t)
            if op not in self.lang.math_builtins or src_dtype.kind != "f":
                raise NotImplementedError(f"unary {op} on {src_dtype}")
            fast = self.lang.fast_math.get(rounded) if rounded and src_dtype.name == "float32" else None
            builtin = fast.get(op) if fast else None
            return f"{builtin or self.lang.math_builtins[op]}({args[0]})"
        op = REDUCE_OP.get(op, op)
        if src_dtype.kind == "u" and 1 < src_dtype.itemsize < 4 and op in ("mul", "shl"):
            # C computes an unsigned short in int: 65535 * 65535 would overflow (undefined);
            # in unsigned int it wraps, and the value declared as unsigned short truncates.
            return f"((unsigned int){args[0]} {'*' if op == 'mul' else '<<'} {args[1]})"
        fmt = _pick(BINARY_FORMAT[op], src_dtype, op)
        return fmt.format(a=args[0], b=args[1], t=t)

    def local_type(self, dtype: DType) -> str:
        # Shared arrays hold the computed type (float for half); bool arrays hold bytes.
        return self.lang.memory_type[dtype.name] if dtype.kind == "b" else self.rtype(dtype)

    def load(self, ins: Instr, instrs: list[Instr]) -> str:
        buf, index = self.values[ins.srcs[0]], self.values[ins.srcs[1]]
        self.rtype(ins.dtype)
        shared = _computed_local(instrs[ins.srcs[0]])
        fmt = "{buf}[{idx}]" if shared else self.lang.load_format.get(ins.dtype.name, "{buf}[{idx}]")
        value = fmt.format(buf=buf, idx=index)
        if len(ins.srcs) > 2:
            # Only the selected branch of ?: is evaluated, so masked lanes never touch memory.
            value = f"({self.values[ins.srcs[2]]} ? {value} : {self.literal(0, ins.dtype)})"
        return value

    def converted(self, dtype: DType) -> bool:
        """Whether ``dtype`` is a float stored otherwise than computed (half, bfloat16)."""
        return dtype.is_float and dtype.name in self.lang.from_memory

    def raw_of(self, value: int, dtype: DType, instrs: list[Instr]) -> str | None:
        """The stored bits of ``value`` of ``dtype`` where they are known (a load, a choice between
        loads, a BITCAST): a store of it copies them rather than converting to float and back
        (the same bits, NaN payloads included, fewer instructions, and a tensor-core block
        staged at the speed of a copy), else None."""
        if instrs[value].dtype is not dtype:
            return None
        return self.raw.get(value)

    def bitcast(self, i: int, ins: Instr, instrs: list[Instr]) -> str:
        """The bits of BITCAST ``i``'s source read as its dtype (of the same size): a loaded half's
        stored bits where known (a NaN's payload survives), else the dialect's ``bit_view``."""
        src = ins.srcs[0]
        src_dtype, dtype = instrs[src].dtype, ins.dtype
        self.rtype(src_dtype)
        bits = self.raw.get(src) if self.converted(src_dtype) else None
        if bits is None:
            bits = self.lang.bit_view[src_dtype.name][0].format(x=self.values[src]) if src_dtype.is_float \
                else self.values[src]
        if not dtype.is_float:
            return f"(({self.rtype(dtype)})({bits}))"
        if self.converted(dtype):  # its bits, for a store of the value (``raw_of``)
            self.raw[i] = f"(({self.lang.memory_type[dtype.name]})({bits}))"
        return self.lang.bit_view[dtype.name][1].format(x=bits)

    # ------------------------------------------------------------------ vector accesses

    def vector_runs(self) -> dict[int, tuple[int, ...]]:
        """Runs of four global LOADs (or STOREs) of one buffer at neighbouring elements, or four
        LOADs of a float shared array (the renderer aligns those to a vector), the first
        element a multiple of four, with nothing between them that could order memory
        differently (a loop or block boundary, a barrier, a store between the loads, a load
        between the stores): each member instruction → the run's instructions."""
        lang, instrs = self.lang, self.kernel.instrs
        if not lang.vector_types:
            return {}
        runs: dict[int, tuple[int, ...]] = {}
        open_runs: dict[tuple[str, int], list[int]] = {}
        for i, ins in enumerate(instrs):
            op = ins.op
            if op in ("RANGE", "ENDRANGE", "IF", "ENDIF", "BARRIER", "SPECIAL", "DEFINE"):
                open_runs.clear()
                continue
            if op not in ("LOAD", "STORE"):
                continue
            shared = _computed_local(instrs[ins.srcs[0]])
            if shared and (op == "STORE" or self.local_type(ins.dtype) != "float"):
                continue
            # A store ends every run of loads, a load every run of stores.
            other = "STORE" if op == "LOAD" else "LOAD"
            for key in [key for key in open_runs if key[0] == other]:
                del open_runs[key]
            dtype = ins.dtype if op == "LOAD" else instrs[ins.srcs[2]].dtype
            mtype = "float" if shared else lang.memory_type[dtype.name]
            if (op == "LOAD" and len(ins.srcs) > 2) or mtype not in lang.vector_types:
                continue
            key, index = (op, ins.srcs[0]), instrs[ins.srcs[1]].arg
            run = open_runs.get(key, [])
            if run:
                first = instrs[instrs[run[0]].srcs[1]].arg
                if sym.add(index, sym.mul(first, -1)) != sym.Num(len(run)) or \
                        (instrs[run[0]].dtype if op == "LOAD" else instrs[instrs[run[0]].srcs[2]].dtype) != dtype:
                    run = []
            if not run and sym.mod(index, 4) != sym.Num(0):
                open_runs.pop(key, None)
                continue
            run.append(i)
            open_runs[key] = run
            if len(run) == 4:
                runs.update((member, tuple(run)) for member in run)
                del open_runs[key]
        return runs

    def vector_load(self, i: int, ins: Instr, run: tuple[int, ...], instrs: list[Instr]) -> None:
        """A member of a run of loads: the first loads the vector, each takes its element."""
        lang = self.lang
        shared = _computed_local(instrs[ins.srcs[0]])  # (holds floats already: local_type)
        mtype = "float" if shared else lang.memory_type[ins.dtype.name]
        vector = f"vv{run[0]}"
        if i == run[0]:
            vtype = lang.vector_types[mtype]
            self.line(f"const {vtype} {vector} = " + lang.vector_load.format(
                vtype=vtype, buf=self.values[ins.srcs[0]], idx=self.values[ins.srcs[1]]) + ";")
        element = f"{vector}.{'xyzw'[run.index(i)]}"
        if not shared and self.converted(ins.dtype):
            self.raw[i] = element
        fmt = "{x}" if shared else lang.from_memory.get(ins.dtype.name, "{x}")
        self.values[i] = self.declare(i, ins.dtype, fmt.format(x=element))

    def vector_store(self, i: int, run: tuple[int, ...], instrs: list[Instr]) -> None:
        """A member of a run of stores: the last stores the four values as one vector."""
        if i != run[-1]:
            return
        lang = self.lang
        first = instrs[run[0]]
        dtype = instrs[first.srcs[2]].dtype
        self.rtype(dtype)
        mtype = lang.memory_type[dtype.name]
        fmt = lang.to_memory.get(dtype.name, "{x}")
        values = ", ".join(self.raw_of(instrs[m].srcs[2], dtype, instrs)
                           or fmt.format(x=self.values[instrs[m].srcs[2]]) for m in run)
        self.line(lang.vector_store.format(vtype=lang.vector_types[mtype], buf=self.values[first.srcs[0]],
                                           idx=self.values[first.srcs[1]], values=values))

    def render_instr(self, i: int, ins: Instr, instrs: list[Instr]) -> None:
        op = ins.op
        run = self.vectors.get(i)
        if run is not None:
            if op == "LOAD":
                self.vector_load(i, ins, run, instrs)
            else:
                self.vector_store(i, run, instrs)
            return
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
            self.line(f"const {self.index_type} v{i} = {self.expr(ins.arg)};")
        elif op == "RANGE":
            var, start, end = ins.arg[:3]  # the vectorize hint is for CPU loops
            name = f"x_{var}"
            self.vars[var] = self.values[i] = name
            self.has_outer = self.has_outer or start == "start"
            if start == "start" and self.kernel.group_size:
                # No ``id < end`` guard around a grouped kernel: the runtime launches exactly
                # ``end`` groups (none for end == 0), and PoCL 3.1 loses the global stores made
                # between barriers inside an ``if`` (all but the last of a multi-output kernel).
                self.line(f"const {self.index_type} {name} = {self.lang.group_id};")
                self.line("{")
            elif start == "start" and self.lang.global_stride:
                t = self.index_type
                self.line(f"for ({t} {name} = {self.lang.global_id}; {name} < end; "
                          f"{name} += {self.lang.global_stride}) {{")
            elif start == "start":
                self.line(f"const {self.index_type} {name} = {self.lang.global_id};")
                self.line(f"if ({name} < end) {{")
            else:
                u = self.suffix
                self.line(f"for ({self.index_type} {name} = {start}{u}; {name} < {end}{u}; {name}++) {{")
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
            self.line(f"const {self.index_type} x_{var} = {self.lang.local_id};")
        elif op == "DEFINE":
            self.vars[ins.arg] = self.values[i] = f"x_{ins.arg}"
            self.line(f"const {self.index_type} x_{ins.arg} = {self.values[ins.srcs[0]]};")
        elif op == "LOCAL":
            self.values[i] = f"lm{i}"
            computed = _computed_local(ins)
            element = self.local_type(ins.dtype) if computed else self.lang.memory_type[ins.dtype.name]
            size = ins.arg if computed else ins.arg[0]
            itemsize = max(4, ins.dtype.itemsize) if computed and ins.dtype.is_float else ins.dtype.itemsize
            self.locals.append((element, f"lm{i}", size, itemsize))
        elif op == "FRAGMENT":
            kind, pitch = ins.arg
            buf, index = (self.values[s] for s in ins.srcs)
            self.mma_used = True
            self.values[i] = f"v{i}"
            self.line(f"const {self.lang.fragment_type.format(kind=kind)} v{i} = "
                      f"{self.lang.fragment_load.format(kind=kind, buf=buf, idx=index, pitch=pitch)};")
        elif op == "PACK":
            self.mma_used = True
            self.values[i] = f"v{i}"
            values = ", ".join(self.values[s] for s in ins.srcs)
            self.line(f"const {self.lang.fragment_type.format(kind=ins.arg)} v{i} = "
                      f"{self.lang.fragment_pack[ins.dtype.name].format(values=values)};")
        elif op == "ASYNC_COPY":
            self.mma_used = True
            local, lidx, buf, gidx = (self.values[s] for s in ins.srcs)
            self.line(self.lang.async_copy.format(local=local, lidx=lidx, buf=buf, gidx=gidx))
        elif op == "ASYNC_COMMIT":
            self.line(self.lang.async_commit)
        elif op == "ASYNC_WAIT":
            self.line(self.lang.async_wait.format(n=ins.arg))
        elif op == "SHUFFLE":
            _how, mask = ins.arg
            value = self.lang.shuffle_xor.format(x=self.values[ins.srcs[0]], mask=mask)
            self.values[i] = self.declare(i, ins.dtype, value)
        elif op == "MMA":
            a, b, *accs = (self.values[s] for s in ins.srcs)
            self.line(self.lang.mma[ins.dtype.name].format(a=a, b=b, c0=accs[0], c1=accs[1], c2=accs[2],
                                                           c3=accs[3]))
        elif op == "BARRIER":
            self.line(self.lang.barrier)
        elif op == "LOAD":
            if not _computed_local(instrs[ins.srcs[0]]) and self.converted(ins.dtype):
                # Its stored bits kept in a register of their own too (``raw``; masked: zero bits).
                mtype = self.lang.memory_type[ins.dtype.name]
                bits = f"{self.values[ins.srcs[0]]}[{self.values[ins.srcs[1]]}]"
                if len(ins.srcs) > 2:
                    bits = f"({self.values[ins.srcs[2]]} ? {bits} : ({mtype})0)"
                self.line(f"const {mtype} r{i} = {bits};")
                self.raw[i] = f"r{i}"
                value = self.lang.from_memory[ins.dtype.name].format(x=f"r{i}")
                self.values[i] = self.declare(i, ins.dtype, value)
            else:
                self.values[i] = self.declare(i, ins.dtype, self.load(ins, instrs))
        elif op == "STORE":
            buf, index, value = (self.values[s] for s in ins.srcs)
            dtype = instrs[ins.srcs[2]].dtype
            self.rtype(dtype)
            shared = _computed_local(instrs[ins.srcs[0]])
            raw = None if shared else self.raw_of(ins.srcs[2], dtype, instrs)
            if raw is not None:
                self.line(f"{buf}[{index}] = {raw};")
                return
            fmt = "{buf}[{idx}] = {value};" if shared else \
                self.lang.store_format.get(dtype.name, "{buf}[{idx}] = {value};")
            self.line(fmt.format(buf=buf, idx=index, value=value))
        elif op == "ALU":
            srcs = [self.values[s] for s in ins.srcs]
            value = self.alu(ins.arg, ins.dtype, srcs, instrs[ins.srcs[0]].dtype, self.rounded_to.get(i, ""))
            self.values[i] = self.declare(i, ins.dtype, value)
        elif op == "CAST":
            value = self.cast(self.values[ins.srcs[0]], instrs[ins.srcs[0]].dtype, ins.dtype)
            self.values[i] = self.declare(i, ins.dtype, value)
        elif op == "BITCAST":
            self.values[i] = self.declare(i, ins.dtype, self.bitcast(i, ins, instrs))
        elif op == "WHERE":
            c, a, b = (self.values[s] for s in ins.srcs)
            self.values[i] = self.declare(i, ins.dtype, f"({c} ? {a} : {b})")
            if self.converted(ins.dtype):  # a choice between stored bits is stored bits
                bits = [self.raw.get(src, "0" if is_plus_zero(instrs[src]) else None) for src in ins.srcs[1:]]
                if None not in bits:
                    mtype = self.lang.memory_type[ins.dtype.name]
                    self.raw[i] = f"(({mtype})({c} ? {bits[0]} : {bits[1]}))"
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

    def only_rounded(self) -> dict[int, str]:
        """Instruction → the dtype every use of its value casts it to, when that dtype has
        ``fast_math`` forms (a float ``exp`` whose result is only stored as half)."""
        uses: dict[int, set] = {}
        for ins in self.kernel.instrs:
            for src in ins.srcs:
                uses.setdefault(src, set()).add(ins.dtype.name if ins.op == "CAST" and ins.dtype else "")
        return {i: next(iter(names)) for i, names in uses.items()
                if len(names) == 1 and next(iter(names)) in self.lang.fast_math}

    # ------------------------------------------------------------------ warp shuffle trees

    def warp_trees(self) -> dict[int, tuple]:
        """The shared-memory tree reductions of a grouped kernel that ``warp_tree`` renders
        with warp shuffles: first instruction → (instruction after the tree, the match)."""
        lang, k = self.lang, self.kernel
        if not lang.warp_size or not k.group_size or k.group_size % lang.warp_size:
            return {}
        lid = next((ins.arg[0] for ins in k.instrs if ins.op == "SPECIAL"), None)
        found = {}
        for i, ins in enumerate(k.instrs):
            if lid is not None and ins.op == "STORE" and k.instrs[ins.srcs[0]].op == "LOCAL":
                match = self.match_tree(i, lid)
                if match is not None:
                    found[i] = match
        return found

    def match_tree(self, start: int, lid: str) -> tuple | None:
        """The tree ``lower.emit_group_reduce`` emits from ``start`` (all items store their
        partial at their lid; barrier; then for half = group/2 .. 1: ``if (lid < half)
        shared[lid] = op(shared[lid], shared[lid + half])``; barrier), or None. Anything else
        (another shape, a type the shuffle cannot move) keeps the generic rendering."""
        instrs, group = self.kernel.instrs, self.kernel.group_size
        shared, mine, value = instrs[start].srcs
        dtype = instrs[shared].dtype
        lid_var = instrs[mine].arg
        shuffled = self.lang.register_type.get(dtype.name) in self.lang.shuffle_types
        if (instrs[shared].arg != group or instrs[mine].op != "INDEX" or not isinstance(lid_var, sym.Var)
                or lid_var.name != lid or not shuffled):
            return None

        def at(pos: int, op: str, srcs: tuple | None = None) -> bool:
            return pos < len(instrs) and instrs[pos].op == op and (srcs is None or instrs[pos].srcs == srcs)

        pos = start + 1
        if not at(pos, "BARRIER"):
            return None
        pos += 1
        declared: list[int] = []  # INDEX instructions between the levels: later code may use them
        rop = None
        half = group // 2
        while half >= 1:
            while at(pos, "INDEX"):
                declared.append(pos)
                pos += 1
            if not at(pos, "IF"):
                return None
            cond = instrs[instrs[pos].srcs[0]].arg
            if not (isinstance(cond, sym.Lt) and cond.x == lid_var and cond.bound == half):
                return None
            block, first = pos, pos + 1
            if not at(first, "LOAD", (shared, mine)):
                return None
            pos = first + 1
            while at(pos, "INDEX"):  # inside the block: nothing after it can use them
                pos += 1
            second = pos
            if not (at(second, "LOAD") and len(instrs[second].srcs) == 2 and instrs[second].srcs[0] == shared
                    and instrs[instrs[second].srcs[1]].arg == sym.add(lid_var, sym.Num(half))):
                return None
            combine = second + 1
            if not at(combine, "ALU", (first, second)) or instrs[combine].arg not in REDUCE_OP \
                    or rop not in (None, instrs[combine].arg):
                return None
            rop = instrs[combine].arg
            if not (at(combine + 1, "STORE", (shared, mine, combine)) and at(combine + 2, "ENDIF", (block,))
                    and at(combine + 3, "BARRIER")):
                return None
            pos = combine + 4
            half //= 2
        return pos, (shared, value, rop, dtype, declared, lid)

    def warp_tree(self, start: int, match: tuple) -> None:
        """Each warp reduces its items' partials with shuffles; its first lane stores the
        warp's result in the shared array; after a barrier the first warp reduces those the
        same way and stores the total at element 0, where the kernel reads it after a barrier
        (as after the shared-memory tree)."""
        shared, value, rop, dtype, declared, lid_name = match
        lang, lid = self.lang, self.vars[lid_name]
        for i in declared:
            self.render_instr(i, self.kernel.instrs[i], self.kernel.instrs)
        t, ws, buf = self.rtype(dtype), lang.warp_size, self.values[shared]
        warps = self.kernel.group_size // ws

        def shuffle_steps(w: str, width: int) -> None:
            offset = width // 2
            while offset >= 1:
                # Moved once into a register: the op's format may name its operand twice.
                self.line(f"const {t} {w}_{offset} = {lang.shuffle_down.format(x=w, offset=offset)};")
                self.line(f"{w} = {self.alu(rop, dtype, [w, f'{w}_{offset}'], dtype)};")
                offset //= 2

        w = f"w{start}"
        self.line("{")
        self.depth += 1
        self.line(f"{t} {w} = {self.values[value]};")
        shuffle_steps(w, ws)
        u = self.suffix
        self.line(f"if ({lid} % {ws}{u} == 0) {buf}[{lid} / {ws}{u}] = {w};")
        self.depth -= 1
        self.line("}")
        self.line(lang.barrier)
        if warps > 1:
            self.line(f"if ({lid} < {ws}{u}) {{")
            self.depth += 1
            # Lanes from ``warps`` on read stale elements; only lane 0's result is used, and it
            # combines lanes 0 .. warps - 1 only.
            self.line(f"{t} {w} = {buf}[{lid}];")
            shuffle_steps(w, warps)
            self.line(f"if ({lid} == 0) {buf}[0] = {w};")
            self.depth -= 1
            self.line("}")
            self.line(lang.barrier)

    def render(self) -> str:
        k, lang = self.kernel, self.lang
        self.n_params = 0
        self.rounded_to = self.only_rounded() if lang.fast_math else {}
        self.vectors = self.vector_runs()
        trees = self.warp_trees()
        i = 0
        while i < len(k.instrs):
            tree = trees.get(i)
            if tree is not None:
                self.warp_tree(i, tree[1])
                i = tree[0]
                continue
            self.render_instr(i, k.instrs[i], k.instrs)
            i += 1
        args = [lang.buffer_param.format(type=lang.memory_type[d.name], name=f"b{slot}")
                for slot, d in enumerate(k.buffer_dtypes)]
        self.used_dtypes.update(d.name for d in k.buffer_dtypes)
        args += [lang.scalar_param.format(type=lang.param_type, name=f"p{n}") for n in range(self.n_params)]
        args.append(lang.scalar_param.format(type=lang.index_type, name="end"))
        prelude = [lang.dtype_prelude[d] for d in sorted(self.used_dtypes) if d in lang.dtype_prelude]
        if self.mma_used:
            prelude.append(lang.mma_prelude)
        local_lines = self.local_declarations()
        if self.dynamic_locals:
            prelude.append(lang.dynamic_local_prelude)
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
        return "\n".join(prelude + [head] + local_lines + body + ["}", ""])

    def local_declarations(self) -> list[str]:
        """The group-shared arrays' declarations: each its own static array, or views of one
        dynamic array (16-byte aligned parts) where they pass ``static_local_limit`` in all."""
        lang = self.lang
        total = sum(-(-size * itemsize // 16) * 16 for _t, _n, size, itemsize in self.locals)
        self.dynamic_locals = bool(lang.static_local_limit) and total > lang.static_local_limit
        if not self.dynamic_locals:
            return ["  " + lang.local_decl.format(type=element, name=name, size=size)
                    for element, name, size, _itemsize in self.locals]
        lines = ["  " + lang.dynamic_local_note.format(size=total),
                 "  " + lang.dynamic_local_decl.format(size=total)]
        offset = 0
        for element, name, size, itemsize in self.locals:
            lines.append("  " + lang.dynamic_local_view.format(type=element, name=name, offset=offset))
            offset += -(-size * itemsize // 16) * 16
        return lines


def render(kernel: LoopKernel, lang: Language) -> str:
    return CStyleRenderer(kernel, lang).render()
