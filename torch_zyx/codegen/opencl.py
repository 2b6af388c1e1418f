"""OpenCL C renderer: the OpenCL table for the C-style renderer base (``cstyle``).

Half is stored as its 16 bits (``ushort`` buffers) and moved with ``vload_half``/``vstore_half_rte``,
which need no cl_khr_fp16; bfloat16 is stored as ``ushort`` (its upper float bits, round to nearest even);
bool is stored as ``uchar``. Float64 enables cl_khr_fp64 when a kernel uses it.
"""

from __future__ import annotations

from .cstyle import Language
from .cstyle import render as render_c
from .ir import LoopKernel

MEMORY_TYPE = {"float16": "ushort", "bfloat16": "ushort", "float32": "float", "float64": "double",
               "int8": "char", "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
               "uint16": "ushort", "uint32": "uint", "uint64": "ulong", "bool": "uchar"}
REGISTER_TYPE = dict(MEMORY_TYPE, float16="float", bfloat16="float", bool="bool")

# bfloat16 → float is exact; float → bfloat16 rounds to nearest even and keeps NaN quiet.
# Guarded: the OpenCL runtime builds many kernels' sources as one program.
_BF16_HELPER = """#ifndef ZYX_F2BF
#define ZYX_F2BF
inline ushort zyx_f2bf(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#endif"""
# float → float16 → float in registers, round to nearest even (no half arithmetic, which needs
# cl_khr_fp16): half keeps 11 significant bits down to 2^-14 and a fixed quantum of 2^-24
# below it; from 65520 up a value rounds to infinity. And a half value's bits (BITCAST).
_HALF_HELPER = """#ifndef ZYX_ROUND_HALF
#define ZYX_ROUND_HALF
inline float zyx_round_half(float f) {
  if (isnan(f)) return f;
  if (fabs(f) >= 65520.0f) return copysign(INFINITY, f);
  int e;
  frexp(f, &e);
  float scale = ldexp(1.0f, 11 - max(e, -13));
  return rint(f * scale) / scale;
}
#endif
#ifndef ZYX_HALF_BITS
#define ZYX_HALF_BITS
inline short zyx_half_bits(float f) {
  ushort u;
  vstore_half_rte(f, 0, (half*)&u);
  return (short)u;
}
inline float zyx_half_of_bits(short bits) {
  ushort u = (ushort)bits;
  return vload_half(0, (const half*)&u);
}
#endif"""

OPENCL = Language(
    name="opencl",
    memory_type=MEMORY_TYPE,
    register_type=REGISTER_TYPE,
    kernel_prefix="__kernel",
    buffer_param="__global {type}* {name}",
    scalar_param="{type} {name}",
    global_id="((long)get_global_id(0))",
    index_type="long",
    param_type="ulong",
    load_format={"float16": "vload_half({idx}, (__global const half*){buf})",
                 "bfloat16": "as_float(((uint){buf}[{idx}]) << 16)", "bool": "({buf}[{idx}] != 0)"},
    store_format={"float16": "vstore_half_rte({value}, {idx}, (__global half*){buf});",
                  "bfloat16": "{buf}[{idx}] = zyx_f2bf({value});", "bool": "{buf}[{idx}] = (uchar){value};"},
    dtype_prelude={"float64": "#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "bfloat16": _BF16_HELPER,
                   "float16": _HALF_HELPER},
    # One element's stored bits (a register of its memory type) to its value: a load that keeps
    # them for a store of the value or a BITCAST (cstyle ``raw``), so NaN payloads survive.
    from_memory={"float16": "zyx_half_of_bits((short)({x}))", "bfloat16": "as_float(((uint)({x})) << 16)"},
    round_format={"float16": "zyx_round_half({x})", "bfloat16": "as_float(((uint)zyx_f2bf({x})) << 16)"},
    # (half and bfloat16 registers hold exact values of their dtype: converting back is exact;
    # half through a private 16-bit word, which needs no cl_khr_fp16)
    bit_view={"float32": ("as_int({x})", "as_float((int)({x}))"),
              "float64": ("as_long({x})", "as_double((long)({x}))"),
              "float16": ("zyx_half_bits({x})", "zyx_half_of_bits((short)({x}))"),
              "bfloat16": ("(short)(as_uint({x}) >> 16)", "as_float(((uint)(ushort)({x})) << 16)")},
    group_id="((long)get_group_id(0))",
    local_id="((long)get_local_id(0))",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    local_decl="__local {type} {name}[{size}];",
    # The runtime reads it back (CL_KERNEL_COMPILE_WORK_GROUP_SIZE) as the launch's local size.
    group_attribute="__attribute__((reqd_work_group_size({size}, 1, 1)))",
)


def render(kernel: LoopKernel) -> str:
    return render_c(kernel, OPENCL)
