"""LLVM IR renderer: loop IR → LLVM IR text for the CPU runtime.

Stage 5 of the flow for the CPU device. All differences between dtypes live in the tables at
the top (types, ALU formats, intrinsics, casts); ``render`` only walks the instructions.
Half and bfloat16 are stored as such and computed in float, as PyTorch's CPU kernels do.
Reductions use ``reassoc`` so LLVM may vectorize them; accumulators and loop counters are
stack cells that LLVM promotes to registers.
"""

from __future__ import annotations

import math
import struct

from .. import dtypes
from ..dtypes import DType
from . import symbolic as sym
from .ir import Instr, LoopKernel

# ------------------------------------------------------------------------------- tables

# In-memory type and in-register type per dtype.
MEMORY_TYPE = {"float16": "half", "bfloat16": "bfloat", "float32": "float", "float64": "double",
               "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "i8",
               "uint64": "i64", "bool": "i8"}
REGISTER_TYPE = dict(MEMORY_TYPE, float16="float", bfloat16="float", bool="i1")
FLOAT_SUFFIX = {"float": "f32", "double": "f64"}

# Binary ALU ops by dtype kind: "f" float, "i" signed, "u" unsigned/bool.
BINARY_FORMAT = {
    "add": {"f": "fadd nsz {t} {a}, {b}", "i": "add {t} {a}, {b}", "u": "add {t} {a}, {b}"},
    "sub": {"f": "fsub nsz {t} {a}, {b}", "i": "sub {t} {a}, {b}", "u": "sub {t} {a}, {b}"},
    "mul": {"f": "fmul nsz contract {t} {a}, {b}", "i": "mul {t} {a}, {b}", "u": "mul {t} {a}, {b}"},
    "div": {"f": "fdiv {t} {a}, {b}", "i": "sdiv {t} {a}, {b}", "u": "udiv {t} {a}, {b}"},
    "idiv": {"i": "sdiv {t} {a}, {b}", "u": "udiv {t} {a}, {b}"},
    "mod": {"f": "frem {t} {a}, {b}", "i": "srem {t} {a}, {b}", "u": "urem {t} {a}, {b}"},
    "and": {"i": "and {t} {a}, {b}", "u": "and {t} {a}, {b}"},
    "or": {"i": "or {t} {a}, {b}", "u": "or {t} {a}, {b}"},
    "xor": {"i": "xor {t} {a}, {b}", "u": "xor {t} {a}, {b}"},
    "shl": {"i": "shl {t} {a}, {b}", "u": "shl {t} {a}, {b}"},
    "shr": {"i": "ashr {t} {a}, {b}", "u": "lshr {t} {a}, {b}"},
    "lt": {"f": "fcmp olt {t} {a}, {b}", "i": "icmp slt {t} {a}, {b}", "u": "icmp ult {t} {a}, {b}"},
    "le": {"f": "fcmp ole {t} {a}, {b}", "i": "icmp sle {t} {a}, {b}", "u": "icmp ule {t} {a}, {b}"},
    "eq": {"f": "fcmp oeq {t} {a}, {b}", "i": "icmp eq {t} {a}, {b}", "u": "icmp eq {t} {a}, {b}"},
    "ne": {"f": "fcmp une {t} {a}, {b}", "i": "icmp ne {t} {a}, {b}", "u": "icmp ne {t} {a}, {b}"},
    "max": {"f": "call {t} @llvm.maximum.{s}({t} {a}, {t} {b})",
            "i": "call {t} @llvm.smax.{s}({t} {a}, {t} {b})",
            "u": "call {t} @llvm.umax.{s}({t} {a}, {t} {b})"},
    "min": {"f": "call {t} @llvm.minimum.{s}({t} {a}, {t} {b})",
            "i": "call {t} @llvm.smin.{s}({t} {a}, {t} {b})",
            "u": "call {t} @llvm.umin.{s}({t} {a}, {t} {b})"},
    "pow": {"f": "call {t} @llvm.pow.{s}({t} {a}, {t} {b})"},
    "copysign": {"f": "call {t} @llvm.copysign.{s}({t} {a}, {t} {b})"},
    "atan2": {"f": "call {t} @{libm}({t} {a}, {t} {b})"},
}
# Reduction updates: like the binary op but free to reassociate (vectorizable).
REDUCE_FORMAT = {
    "rsum": {"f": "fadd reassoc nsz contract {t} {a}, {b}", "i": "add {t} {a}, {b}", "u": "or {t} {a}, {b}"},
    "rprod": {"f": "fmul reassoc nsz contract {t} {a}, {b}", "i": "mul {t} {a}, {b}",
              "u": "and {t} {a}, {b}"},
    "rmax": BINARY_FORMAT["max"],
    "rmin": BINARY_FORMAT["min"],
}
# Unary float ops: LLVM intrinsics, then libm functions (float versions get an "f" suffix).
UNARY_INTRINSIC = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "sin": "sin",
                   "cos": "cos", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
                   "abs": "fabs"}
UNARY_LIBM = {"tan", "erf", "erfc", "tanh", "expm1", "log1p", "atan", "asin", "acos", "sinh", "cosh", "asinh",
              "acosh", "atanh", "lgamma"}
BINARY_LIBM = {"atan2"}
DEFINES = """declare float @llvm.{name}.f32(float)
declare double @llvm.{name}.f64(double)"""


# Cephes-style single precision exp (about 1 ulp): plain arithmetic, so loops that use it
# vectorize (a libm call per element does not).
EXP_LIMITS = (-104.0, 89.0)
EXP_SPLIT = (0.693359375, -2.12194440e-4)  # ln 2 split in two for an exact range reduction
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
            5.0000001201e-1)


def _inline_exp(r: LLVMRenderer, x: str) -> str:
    f = dtypes.float32

    def lit(v: float) -> str:
        return float_literal(v, f)

    for name in ("maxnum", "minnum", "floor"):
        args = "float, float" if name != "floor" else "float"
        r.declares.add(f"declare float @llvm.{name}.f32({args})")
    lo = r.emit(f"call float @llvm.maxnum.f32(float {x}, float {lit(EXP_LIMITS[0])})")
    xc = r.emit(f"call float @llvm.minnum.f32(float {lo}, float {lit(EXP_LIMITS[1])})")
    scaled = r.emit(f"fmul float {xc}, {lit(1.4426950408889634)}")
    n = r.emit(f"call float @llvm.floor.f32(float {r.emit(f'fadd float {scaled}, {lit(0.5)}')})")
    # ``contract``: range reduction and polynomial fuse into FMAs where the CPU has them (fewer
    # instructions in the loops, and exact products): softmax's exp loop ran 13% faster.
    rem = r.emit(f"fsub contract float {xc}, {r.emit(f'fmul contract float {n}, {lit(EXP_SPLIT[0])}')}")
    rem = r.emit(f"fsub contract float {rem}, {r.emit(f'fmul contract float {n}, {lit(EXP_SPLIT[1])}')}")
    poly = lit(EXP_POLY[0])
    for coef in EXP_POLY[1:]:
        poly = r.emit(f"fadd contract float {r.emit(f'fmul contract float {poly}, {rem}')}, {lit(coef)}")
    square = r.emit(f"fmul contract float {rem}, {rem}")
    y = r.emit(f"fadd contract float {r.emit(f'fmul contract float {poly}, {square}')}, {rem}")
    y = r.emit(f"fadd float {y}, {lit(1.0)}")
    # y * 2^n as two scalings by 2^(n/2): each stays a normal float, and the product over- or
    # underflows to inf / 0 / denormals exactly where exp does.
    ni = r.emit(f"fptosi float {n} to i32")
    half = r.emit(f"ashr i32 {ni}, 1")
    rest = r.emit(f"sub i32 {ni}, {half}")
    for part in (half, rest):
        bits = r.emit(f"shl i32 {r.emit(f'add i32 {part}, 127')}, 23")
        y = r.emit(f"fmul float {y}, {r.emit(f'bitcast i32 {bits} to float')}")
    is_nan = r.emit(f"fcmp uno float {x}, {x}")
    return r.emit(f"select i1 {is_nan}, float {x}, float {y}")


INLINE_FLOAT_MATH = {"exp": _inline_exp}


def _kind(dtype: DType) -> str:
    if dtype.kind == "f":
        return "f"
    return "i" if dtype.kind == "i" else "u"


def float_literal(value: float, dtype: DType) -> str:
    if dtype.name in ("float32", "float16", "bfloat16"):
        value = struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value
    return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", value))[0])


def literal(value, dtype: DType) -> str:
    if dtype.kind == "f":
        return float_literal(float(value), dtype)
    if dtype.kind == "b":
        return "true" if value else "false"
    return str(int(dtypes.python_value(dtype, value)))


class LLVMRenderer:
    def __init__(self, kernel: LoopKernel, stream_store_bytes: int, vector_bits: int):
        self.kernel = kernel
        self.stream_store_bytes = stream_store_bytes
        self.vector_bits = vector_bits
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.buffer_pointers: dict[int, str] = {}  # buffer slot -> its address (entry block)
        self.declares: set[str] = set()
        self.values: dict[int, str] = {}
        # The chunk's bounds are variables too (a pipelined row kernel's first and last rows).
        self.vars: dict[str, str] = {"start": "%start", "end": "%end"}
        self.expr_scopes: list[dict] = [{}]
        self.counter = 0
        self.block = "entry"
        self.loops: dict[int, tuple[str, str, str, str]] = {}

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, text: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.lines.append(f"  {name} = {text}")
        return name

    def buffer_pointer(self, slot: int) -> str:
        """The address of buffer ``slot``, loaded once in the entry block. Every CPU buffer is
        64-byte aligned (memory/host.py): with that known, LLVM marks the vector accesses of
        contiguous loops aligned, which streaming stores need (runtime/cpu.py). A load inside a
        loop (where the BUF instruction sits) was hoisted by GVN, which drops ``!align``: a layer
        norm's row stores stayed ``align 4`` and never streamed."""
        name = self.buffer_pointers.get(slot)
        if name is None:
            slot_ptr, name = self.fresh("p"), self.fresh("b")
            self.allocas.append(f"  {slot_ptr} = getelementptr ptr, ptr %bufs, i64 {slot}")
            self.allocas.append(f"  {name} = load ptr, ptr {slot_ptr}, !invariant.load !0, !align !6")
            self.buffer_pointers[slot] = name
        return name

    def rtype(self, dtype: DType) -> str:
        return REGISTER_TYPE[dtype.name]

    # ------------------------------------------------------------------ index expressions

    def expr(self, e: sym.Expr) -> str:
        """Render a symbolic index: i64 for arithmetic, i1 for conditions."""
        for scope in reversed(self.expr_scopes):
            if e.key in scope:
                return scope[e.key]
        if isinstance(e, sym.Num):
            return str(e.value)
        if isinstance(e, sym.Var):
            return self.vars[e.name]
        if isinstance(e, sym.Sum):
            acc = self.expr(e.terms[0])
            for term in e.terms[1:]:
                acc = self.emit(f"add nsw i64 {acc}, {self.expr(term)}", "i")
            out = acc
        elif isinstance(e, sym.Mul):
            out = self.emit(f"mul nsw i64 {self.expr(e.x)}, {e.factor}", "i")
        elif isinstance(e, (sym.Div, sym.Mod)):
            x = self.expr(e.x)
            op = "div" if isinstance(e, sym.Div) else "rem"
            if e.x.vmin >= 0:
                out = self.emit(f"u{op} i64 {x}, {e.divisor}", "i")
            else:
                out = self._floor_divmod(x, e.divisor, op)
        elif isinstance(e, sym.Lt):
            out = self.emit(f"icmp slt i64 {self.expr(e.x)}, {e.bound}", "c")
        elif isinstance(e, sym.And):
            acc = self.expr(e.terms[0])
            for term in e.terms[1:]:
                acc = self.emit(f"and i1 {acc}, {self.expr(term)}", "c")
            out = acc
        else:
            raise TypeError(e)
        self.expr_scopes[-1][e.key] = out
        return out

    def _floor_divmod(self, x: str, d: int, op: str) -> str:
        q = self.emit(f"sdiv i64 {x}, {d}", "i")
        r = self.emit(f"srem i64 {x}, {d}", "i")
        neg = self.emit(f"icmp slt i64 {r}, 0", "c")
        if op == "div":
            q1 = self.emit(f"sub i64 {q}, 1", "i")
            return self.emit(f"select i1 {neg}, i64 {q1}, i64 {q}", "i")
        r1 = self.emit(f"add i64 {r}, {d}", "i")
        return self.emit(f"select i1 {neg}, i64 {r1}, i64 {r}", "i")

    # ------------------------------------------------------------------ instructions

    def cast(self, value: str, src: DType, dst: DType) -> str:
        st, dt = self.rtype(src), self.rtype(dst)
        if dst.name in ("float16", "bfloat16") and src.name != dst.name and src.kind != "b":
            # Half types compute in float registers but must hold only representable values.
            value = self.cast(value, src, dtypes.float32)
            if dst.name == "float16":
                half = self.emit(f"fptrunc float {value} to half")
                return self.emit(f"fpext half {half} to float")
            wide = self.emit(f"zext i16 {self.bf16_bits(value)} to i32", "i")
            return self.emit(f"bitcast i32 {self.emit(f'shl i32 {wide}, 16', 'i')} to float")
        if st == dt:
            return value
        if dst.kind == "b":
            if src.kind == "f":
                return self.emit(f"fcmp une {st} {value}, 0.0")
            return self.emit(f"icmp ne {st} {value}, 0")
        if src.kind == "b":
            if dst.kind == "f":
                return self.emit(f"uitofp i1 {value} to {dt}")
            return self.emit(f"zext i1 {value} to {dt}")
        if src.kind == "f" and dst.kind == "f":
            op = "fpext" if st == "float" else "fptrunc"
            return self.emit(f"{op} {st} {value} to {dt}")
        if src.kind == "f":
            return self.emit(f"{'fptosi' if dst.kind == 'i' else 'fptoui'} {st} {value} to {dt}")
        if dst.kind == "f":
            return self.emit(f"{'sitofp' if src.kind == 'i' else 'uitofp'} {st} {value} to {dt}")
        sbits, dbits = src.itemsize * 8, dst.itemsize * 8
        if sbits > dbits:
            return self.emit(f"trunc {st} {value} to {dt}")
        return self.emit(f"{'sext' if src.kind == 'i' else 'zext'} {st} {value} to {dt}")

    def alu(self, op: str, dtype: DType, args: list[str], src_dtype: DType) -> str:
        t = self.rtype(src_dtype)
        kind = _kind(src_dtype)
        if len(args) == 1:
            return self.unary(op, src_dtype, args[0])
        table = REDUCE_FORMAT if op.startswith("r") and op in REDUCE_FORMAT else BINARY_FORMAT
        if src_dtype.kind == "b" and op in ("max", "rmax"):
            return self.emit(f"or i1 {args[0]}, {args[1]}")
        if src_dtype.kind == "b" and op in ("min", "rmin"):
            return self.emit(f"and i1 {args[0]}, {args[1]}")
        fmt = table[op][kind]
        suffix = FLOAT_SUFFIX.get(t, t)
        if "@llvm." in fmt:
            name = fmt.split("@")[1].split("(")[0].format(s=suffix)
            self.declares.add(f"declare {t} @{name}({t}, {t})")
        libm = None
        if op in BINARY_LIBM:
            libm = op + ("f" if t == "float" else "")
            self.declares.add(f"declare {t} @{libm}({t}, {t})")
        return self.emit(fmt.format(t=t, a=args[0], b=args[1], s=suffix, libm=libm))

    def unary(self, op: str, dtype: DType, x: str) -> str:
        t = self.rtype(dtype)
        if t == "float" and op in INLINE_FLOAT_MATH:
            return INLINE_FLOAT_MATH[op](self, x)
        if op == "neg":
            return self.emit(f"fneg {t} {x}" if dtype.kind == "f" else f"sub {t} 0, {x}")
        if op == "not":
            return self.emit(f"xor {t} {x}, {'true' if t == 'i1' else -1}")
        if op == "recip":
            return self.emit(f"fdiv {t} {float_literal(1.0, dtype)}, {x}")
        if op == "isnan":
            return self.emit(f"fcmp uno {t} {x}, {x}")
        if op == "abs" and dtype.kind != "f":
            if dtype.kind in "ub":
                return x
            self.declares.add(f"declare {t} @llvm.abs.{t}({t}, i1)")
            return self.emit(f"call {t} @llvm.abs.{t}({t} {x}, i1 false)")
        if op in UNARY_INTRINSIC:
            name = f"llvm.{UNARY_INTRINSIC[op]}.{FLOAT_SUFFIX[t]}"
        elif op in UNARY_LIBM:
            name = op + ("f" if t == "float" else "")
        else:
            raise NotImplementedError(f"unary {op} on {dtype}")
        self.declares.add(f"declare {t} @{name}({t})")
        return self.emit(f"call {t} @{name}({t} {x})")

    def render(self) -> str:
        k = self.kernel
        instrs = k.instrs
        out_args = []
        for i, ins in enumerate(instrs):
            self.render_instr(i, ins, instrs)
        body = "\n".join(self.lines)
        head = (f"define void @{k.name}(ptr noalias %bufs, ptr noalias %params, i64 %start, i64 %end) "
                f"#0 {{\nentry:\n" + "\n".join(self.allocas))
        del out_args
        declares = "\n".join(sorted(self.declares))
        stream = f' "{STREAM_ATTRIBUTE}"' if self.streams_stores() else ""
        prefetches = self.prefetches(bool(stream))
        if prefetches:
            spec = ",".join(f"{slot}:{distance}:{locality}"
                            for slot, (distance, locality) in prefetches.items())
            stream += f' "{PREFETCH_ATTRIBUTE}"="{spec}"'
        if self.vector_bits:
            stream += f' "prefer-vector-width"="{self.vector_bits}"'
        return (f"{declares}\n\n{head}\n{body}\n  ret void\n}}\n\n"
                f'attributes #0 = {{ nounwind "no-trapping-math"="true"{stream} }}\n' + self.alias_metadata())

    def streams_stores(self) -> bool:
        """Whether the kernel's stores may bypass the caches: it writes more than they hold, and
        reads back none of what it writes (softmax stores its exponentials and rescales them
        from the cache; streamed, each row would come back from memory)."""
        return self.kernel.bytes >= self.stream_store_bytes and not self.reads_back()

    def reads_back(self) -> bool:
        """Whether the kernel loads from a buffer it stores to (softmax's exponentials)."""
        instrs = self.kernel.instrs
        stored = {instrs[ins.srcs[0]].arg for ins in instrs if ins.op == "STORE"}
        return any(ins.op == "LOAD" and instrs[ins.srcs[0]].op == "BUF"
                   and instrs[ins.srcs[0]].arg in stored for ins in instrs)

    def prefetches(self, streams_stores: bool) -> dict[int, tuple[int, int]]:
        """Software prefetches for the CPU runtime to add after optimization (runtime/cpu.py):
        buffer slot → (bytes ahead of each vector load, ``llvm.prefetch`` locality).

        A kernel that streams its stores also streams in what it reads once: non-temporal
        prefetches a few lines ahead keep those lines out of the L2 and L3 caches. Other loads
        are left to the hardware prefetcher, which follows a sequential read on its own: on a
        2-core Xeon VM (2 MB L2 per core) prefetching the next row made ``x.sum(-1)`` and
        ``x * 1.5`` on 1024x4096 ~10% slower, and layer norm 950 -> 1040 us. (Row kernels that
        keep their rows in cache over several passes, softmax, prefetched the next row until
        their row loops were pipelined (``lower_pipelined_rows``): they now read the next row
        while they store this one.)"""
        if not streams_stores:
            return {}
        return {slot: (STREAM_PREFETCH_BYTES, 0) for slot in self.streamed_loads()}

    def streamed_loads(self) -> list[int]:
        """Buffer slots a streaming kernel reads once, element by element: every load of the
        buffer has an index that uses the loop variables around it, all but possibly the
        innermost ones (a load that does not change in them is read once per iteration of the
        loops it does use): x in ``x * 2``, the rows of layer norm and their first element; not
        its weight, read again for every row, nor a matmul operand, read again for every
        output column, nor a gathered table (read where the data says). The CPU runtime
        prefetches their vector loads past the caches (runtime/cpu.py). Only with alias scopes,
        which name a load's buffer."""
        if self.kernel.n_buffers < 2:
            return []
        instrs = self.kernel.instrs
        # The loops open at this point, outermost first: the call's chunk of outer iterations
        # (None), which an index uses through the chunk's loop variable or its bounds (a
        # pipelined row kernel reads its first and last rows outside that loop), then the
        # variables of the loops inside it.
        around: list[str | None] = [None]
        chunk = {"start", "end"}
        gathered = {ins.arg for ins in instrs if ins.op == "DEFINE"}  # positions read from data
        streamed: dict[int, bool] = {}
        for ins in instrs:
            if ins.op == "RANGE":
                if ins.arg[1] == "start":
                    chunk.add(ins.arg[0])
                else:
                    around.append(ins.arg[0])
            elif ins.op == "ENDRANGE":
                if instrs[ins.srcs[0]].arg[1] != "start":
                    around.pop()
            elif ins.op == "LOAD" and instrs[ins.srcs[0]].op == "BUF":
                slot = instrs[ins.srcs[0]].arg
                index = instrs[ins.srcs[1]]
                used = _loop_vars(index.arg.key) if index.op == "INDEX" else set()
                uses = [bool(used & chunk) if name is None else name in used for name in around]
                # The loops it does not use must all be inside the ones it does.
                first_unused = uses.index(False) if False in uses else len(uses)
                once = first_unused > 0 and not any(uses[first_unused:]) and not used & gathered
                streamed[slot] = streamed.get(slot, True) and once
        return sorted(slot for slot, once in streamed.items() if once)

    def alias_tags(self, buf: int) -> str:
        """Alias scope of an access to kernel buffer ``buf`` (a BUF instruction): each buffer is
        its own scope, no access aliases another buffer's. Distinct buffers of one launch never
        overlap: a kernel stores only into buffers allocated for that realization (execute/realize.py),
        so LLVM may keep values in registers across stores and vectorize without run-time
        overlap checks (layer norm's row statistics were re-read after every output store)."""
        if self.kernel.n_buffers < 2:
            return ""
        slot = self.kernel.instrs[buf].arg
        return (f", !alias.scope !{_SCOPE_LISTS + slot}, "
                f"!noalias !{_SCOPE_LISTS + self.kernel.n_buffers + slot}")

    def alias_metadata(self) -> str:
        n = self.kernel.n_buffers
        if n < 2:
            return ""
        lines = [f'!{_ALIAS_DOMAIN} = distinct !{{!{_ALIAS_DOMAIN}, !"zyx buffers"}}']
        scopes = [_SCOPE_LISTS + 2 * n + i for i in range(n)]
        for i, scope in enumerate(scopes):
            lines.append(f'!{scope} = distinct !{{!{scope}, !{_ALIAS_DOMAIN}, !"buffer {i}"}}')
        for i in range(n):
            lines.append(f"!{_SCOPE_LISTS + i} = !{{!{scopes[i]}}}")
            others = ", ".join(f"!{scope}" for j, scope in enumerate(scopes) if j != i)
            lines.append(f"!{_SCOPE_LISTS + n + i} = !{{{others}}}")
        return "\n".join(lines) + "\n"

    def render_instr(self, i: int, ins: Instr, instrs: list[Instr]) -> None:
        op = ins.op
        if op == "BUF":
            self.values[i] = self.buffer_pointer(ins.arg)
        elif op == "PARAM":
            ptr = self.emit(f"getelementptr i64, ptr %params, i64 {ins.arg}", "p")
            self.values[i] = self.emit(f"load i64, ptr {ptr}", "q")
        elif op == "CONST":
            self.values[i] = literal(ins.arg, ins.dtype)
        elif op == "INDEX":
            self.values[i] = self.expr(ins.arg)
        elif op == "RANGE":
            self.open_loop(i, ins)
        elif op == "ENDRANGE":
            self.close_loop(ins.srcs[0])
        elif op == "LOAD":
            self.values[i] = self.load(ins)
        elif op == "STORE":
            buf, index, value = (self.values[s] for s in ins.srcs)
            dtype = instrs[ins.srcs[2]].dtype
            mt = MEMORY_TYPE[dtype.name]
            value = self.to_memory(value, dtype)
            ptr = self.emit(f"getelementptr inbounds {mt}, ptr {buf}, i64 {index}", "p")
            self.lines.append(f"  store {mt} {value}, ptr {ptr}{self.alias_tags(ins.srcs[0])}")
        elif op == "ALU":
            srcs = [self.values[s] for s in ins.srcs]
            self.values[i] = self.alu(ins.arg, ins.dtype, srcs, instrs[ins.srcs[0]].dtype)
        elif op == "CAST":
            self.values[i] = self.cast(self.values[ins.srcs[0]], instrs[ins.srcs[0]].dtype, ins.dtype)
        elif op == "WHERE":
            c, a, b = (self.values[s] for s in ins.srcs)
            t = self.rtype(ins.dtype)
            self.values[i] = self.emit(f"select i1 {c}, {t} {a}, {t} {b}")
        elif op == "DEFINE":
            self.vars[ins.arg] = self.values[i] = self.values[ins.srcs[0]]
        elif op == "ACC":
            t = self.rtype(ins.dtype)
            cell = f"%acc{i}"
            self.allocas.append(f"  {cell} = alloca {t}")
            self.lines.append(f"  store {t} {literal(ins.arg, ins.dtype)}, ptr {cell}")
            self.values[i] = cell
        elif op == "ACC_GET":
            self.values[i] = self.emit(f"load {self.rtype(ins.dtype)}, ptr {self.values[ins.srcs[0]]}")
        elif op == "ACC_SET":
            acc, value = ins.srcs
            t = self.rtype(instrs[acc].dtype)
            self.lines.append(f"  store {t} {self.values[value]}, ptr {self.values[acc]}")
        else:
            raise NotImplementedError(op)

    def to_memory(self, value: str, dtype: DType) -> str:
        if dtype.kind == "b":
            return self.emit(f"zext i1 {value} to i8")
        if dtype.name == "bfloat16":
            return self.emit(f"bitcast i16 {self.bf16_bits(value)} to bfloat")
        if dtype.name == "float16":
            return self.emit(f"fptrunc float {value} to half")
        return value

    def bf16_bits(self, value: str) -> str:
        """float → bfloat16 bits, round to nearest even, NaN kept quiet. Written out because
        LLVM lowers ``fptrunc float to bfloat`` to a libcall MCJIT cannot resolve (segfault)."""
        bits = self.emit(f"bitcast float {value} to i32", "i")
        high = self.emit(f"lshr i32 {bits}, 16", "i")
        bias = self.emit(f"add i32 {self.emit(f'and i32 {high}, 1', 'i')}, 32767", "i")
        rounded = self.emit(f"lshr i32 {self.emit(f'add i32 {bits}, {bias}', 'i')}, 16", "i")
        quiet = self.emit(f"or i32 {high}, 64", "i")
        nan = self.emit(f"fcmp uno float {value}, {value}")
        chosen = self.emit(f"select i1 {nan}, i32 {quiet}, i32 {rounded}", "i")
        return self.emit(f"trunc i32 {chosen} to i16", "i")

    def load(self, ins: Instr) -> str:
        buf, index = self.values[ins.srcs[0]], self.values[ins.srcs[1]]
        dtype = ins.dtype
        mt = MEMORY_TYPE[dtype.name]
        valid = self.values[ins.srcs[2]] if len(ins.srcs) > 2 else None
        if valid is not None:
            index = self.emit(f"select i1 {valid}, i64 {index}, i64 0", "i")
        ptr = self.emit(f"getelementptr inbounds {mt}, ptr {buf}, i64 {index}", "p")
        value = self.emit(f"load {mt}, ptr {ptr}{self.alias_tags(ins.srcs[0])}")
        if dtype.kind == "b":
            value = self.emit(f"icmp ne i8 {value}, 0")
        elif dtype.name == "bfloat16":  # the upper half of a float: shift instead of a libcall
            wide = self.emit(f"zext i16 {self.emit(f'bitcast bfloat {value} to i16', 'i')} to i32", "i")
            value = self.emit(f"bitcast i32 {self.emit(f'shl i32 {wide}, 16', 'i')} to float")
        elif dtype.name == "float16":
            value = self.emit(f"fpext {mt} {value} to float")
        if valid is not None:
            zero = literal(0, dtype) if dtype.kind != "f" else float_literal(0.0, dtypes.float32)
            value = self.emit(f"select i1 {valid}, {self.rtype(dtype)} {value}, {self.rtype(dtype)} {zero}")
        return value

    def open_loop(self, i: int, ins: Instr) -> None:
        name, start, end, vectorize = ins.arg
        start, end = self.bound(start), self.bound(end)
        head, body, latch, exit_ = (f"L{i}_{part}" for part in ("head", "body", "latch", "exit"))
        counter = f"%ctr{i}"
        self.allocas.append(f"  {counter} = alloca i64")
        self.lines.append(f"  store i64 {start}, ptr {counter}")
        self.lines.append(f"  br label %{head}")
        self.lines.append(f"{head}:")
        var = self.emit(f"load i64, ptr {counter}", "r")
        cond = self.emit(f"icmp slt i64 {var}, {end}", "c")
        self.lines.append(f"  br i1 {cond}, label %{body}, label %{exit_}")
        self.lines.append(f"{body}:")
        self.vars[name] = var
        self.values[i] = var
        self.loops[i] = (head, latch, exit_, counter, vectorize)
        self.expr_scopes.append({})

    def bound(self, value) -> str:
        """A loop bound: an int, the chunk's 'start' or 'end', or an expression of them."""
        if isinstance(value, str):
            return self.vars[value]
        return self.expr(value) if isinstance(value, sym.Expr) else str(value)

    def close_loop(self, rng: int) -> None:
        head, latch, exit_, counter, vectorize = self.loops[rng]
        self.expr_scopes.pop()
        self.lines.append(f"  br label %{latch}")
        self.lines.append(f"{latch}:")
        nxt = self.emit(f"add nsw i64 {self.values[rng]}, 1", "r")
        self.lines.append(f"  store i64 {nxt}, ptr {counter}")
        self.lines.append(f"  br label %{head}, !llvm.loop {LOOP_METADATA[vectorize]}")
        self.lines.append(f"{exit_}:")


# A kernel storing at least this many bytes (and reading none of them back) gets
# STREAM_ATTRIBUTE, and the CPU runtime makes its aligned vector stores non-temporal: the output
# goes to memory without first being read into the caches (a third less memory traffic for
# elementwise ops) and without evicting what they hold. Measured on a 2-core EPYC VM: x * 2 on
# 16 MB 2.7 -> 2.1 ms, layer norm 1024x4096 3.4 -> 2.4 ms (kernel alone); writing 2 MB and
# reading it in the next kernel still 20-30% faster; no difference at 1 MB, so not below 2 MB.
# Where the last-level cache is much larger (300 MB on a Xeon host), data of that size stays in
# it from one kernel to the next and streaming sends it to memory instead: the CPU runtime
# raises the threshold to a quarter of its last-level cache (x * 2 on 16 MB there, one thread:
# 1.76 ms streamed, 1.20 ms for CPU torch's cached stores).
STREAM_STORE_BYTES = 2 << 20
STREAM_ATTRIBUTE = "zyx-stream-stores"
# Software prefetches (``LLVMRenderer.prefetches``), as a function attribute
# "slot:bytes ahead:locality,..." that the CPU runtime applies after optimization. A streaming
# kernel prefetches the buffers it reads once non-temporally (on Zen such lines skip the L2 and
# L3). Measured on the same VM: x * 2 on 16 MB 1.66 -> 1.44 ms, layer norm 1024x4096 2.02 ->
# 1.77 ms (kernel alone), and the Python that runs next finds its caches intact (~300 -> ~160 us
# for three recorded ops after such a kernel).
PREFETCH_ATTRIBUTE = "zyx-prefetch"
STREAM_PREFETCH_BYTES = 512  # 8 cache lines ahead


def _loop_vars(key: tuple) -> set[str]:
    """Names of the loop variables in a symbolic expression's key (``("v", name, ...)``)."""
    names: set[str] = set()
    stack = [key]
    while stack:
        part = stack.pop()
        if len(part) >= 2 and part[0] == "v" and isinstance(part[1], str):
            names.add(part[1])
            continue
        stack.extend(item for item in part if isinstance(item, tuple))
    return names

# Alias metadata (``LLVMRenderer.alias_tags``): the domain, then from ``_SCOPE_LISTS`` on per
# buffer its scope list, its "not these" list and its scope.
_ALIAS_DOMAIN = 9
_SCOPE_LISTS = 10
# Loop metadata by "may vectorize": !0 marks invariant loads, !2/!4/!5 are loop properties
# (a loop that must not vectorize is not unrolled either).
LOOP_METADATA = {True: "!1", False: "!3"}
METADATA = '''!0 = !{}
!6 = !{i64 64}
!1 = distinct !{!1, !2}
!2 = !{!"llvm.loop.mustprogress"}
!3 = distinct !{!3, !2, !4, !5}
!4 = !{!"llvm.loop.vectorize.enable", i1 false}
!5 = !{!"llvm.loop.unroll.disable"}
'''


def render(kernel: LoopKernel, stream_store_bytes: int = STREAM_STORE_BYTES, vector_bits: int = 0) -> str:
    """LLVM IR of ``kernel`` for a device's ``CPUDevice.render_options``: kernels moving at least
    ``stream_store_bytes`` may stream their stores; ``vector_bits`` (when not 0) is the vector
    width the loop vectorizer should prefer (LLVM prefers 256 bits even where 512 exist)."""
    return LLVMRenderer(kernel, stream_store_bytes, vector_bits).render() + METADATA
