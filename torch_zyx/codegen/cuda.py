"""CUDA C renderer: the CUDA table for the C-style renderer base (``cstyle``).

Stage 5 of the flow for CUDA devices (runtime/cuda.py compiles the result with NVRTC). A kernel
is ``extern "C" __global__ void name(T* __restrict__ b0, ..., unsigned long long p0, ...,
long long end)`` with 64-bit indices. Ungrouped kernels run their outer iterations as a
grid-stride loop, so the runtime launches enough blocks to fill the GPU rather than one thread
per element (a 64M-element chain is ~2k blocks of 256 threads, each thread taking ~100
elements). Grouped kernels (one block per outer iteration) declare their block size with
``__launch_bounds__`` and reduce with warp shuffles (``cstyle.warp_tree``), group-shared
arrays as ``__shared__``.

The source needs no header (NVRTC compiles it without an include path): half is stored as its
16 bits and converted with the PTX ``cvt`` instructions that ``cuda_fp16.h`` itself uses (round
to nearest even); bfloat16 is stored as its upper float bits with OpenCL's bit-exact helper
(round to nearest even, NaN kept quiet), so both round as the CPU backend does; bool is a byte.
Math builtins are CUDA's full-precision functions (``expf`` & co. through their C++ overloads):
their fast intrinsics (``__expf``, ``__logf``, ``__sinf``) miss float32's OpInfo tolerances, so
they are used only where the stored dtype's precision hides their error (``fast_math``).
Divisions and square roots stay IEEE-rounded (NVRTC's defaults; no ``--use_fast_math``).
"""

from __future__ import annotations

from .cstyle import Language
from .cstyle import render as render_c
from .ir import LoopKernel

MEMORY_TYPE = {"float16": "unsigned short", "bfloat16": "unsigned short", "float32": "float",
               "float64": "double", "int8": "signed char", "int16": "short", "int32": "int",
               "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
               "uint32": "unsigned int", "uint64": "unsigned long long",
               "bool": "unsigned char"}
REGISTER_TYPE = dict(MEMORY_TYPE, float16="float", bfloat16="float", bool="bool")
# One element between its memory type and its register type, where they differ.
FROM_MEMORY = {"float16": "zyx_h2f({x})", "bfloat16": "zyx_bf2f({x})", "bool": "({x} != 0)"}
TO_MEMORY = {"float16": "zyx_f2h({x})", "bfloat16": "zyx_f2bf({x})", "bool": "(unsigned char){x}"}
# CUDA's built-in 4-element vectors (no header needed) of the memory types up to 4 bytes: a
# float4 moves 16 bytes per load, what the memory system serves best.
VECTOR_TYPES = {"float": "float4", "int": "int4", "unsigned short": "ushort4", "short": "short4",
                "unsigned char": "uchar4", "signed char": "char4"}

# float16 <-> float through the PTX conversions (as cuda_fp16.hpp does), guarded: a CI batch
# and the runtime compile many kernels' sources as one NVRTC program.
_HALF_HELPER = """#ifndef ZYX_HALF
#define ZYX_HALF
static __device__ __forceinline__ float zyx_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
static __device__ __forceinline__ unsigned short zyx_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif"""
# bfloat16 → float is exact; float → bfloat16 rounds to nearest even and keeps NaN quiet
# (the OpenCL renderer's helper, bit for bit).
_BF16_HELPER = """#ifndef ZYX_BF16
#define ZYX_BF16
static __device__ __forceinline__ unsigned short zyx_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ float zyx_bf2f(unsigned short h) {
  return __uint_as_float(((unsigned int)h) << 16);
}
#endif"""

# Tensor cores: mma.sync m16n8k16 (sm_80 on), half or bfloat16 inputs, float accumulators. A
# lane's A fragment is two pairs of neighbouring k in its row l / 4 and in row l / 4 + 8 (k from
# 2 (l % 4), and 8 further), its B fragment two pairs in its column l / 4, read from a shared
# array held as stored (lower_tiles.py) by ldmatrix (rows 16-byte aligned: pitches and k steps
# are multiples of 8 elements). Guarded as the dtype helpers are.
_MMA_HELPER = """#ifndef ZYX_MMA
#define ZYX_MMA
struct zyx_frag_a { unsigned int r[4]; };
struct zyx_frag_b { unsigned int r[2]; };
typedef zyx_frag_a zyx_frag_at;
typedef zyx_frag_b zyx_frag_bt;
// The 32-bit shared-memory address of a generic pointer into a __shared__ array (ldmatrix's).
static __device__ __forceinline__ unsigned int zyx_shared(const void* p) {
  unsigned int a;
  asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(a) : "l"(p));
  return a;
}
// A fragment is one ldmatrix (every lane gives the start of one 8-element row of the 8 x 8
// matrices it loads; .trans for blocks held k by k): from the lane's own element ``p`` (row or
// column l / 4, k 2 (l % 4)) back to the tile's first element, then to the row it gives.
#define ZYX_LANE (threadIdx.x & 31)
static __device__ __forceinline__ zyx_frag_a zyx_load_a(const unsigned short* p, long long pitch) {
  const unsigned short* tile = p - (ZYX_LANE >> 2) * pitch - 2 * (ZYX_LANE & 3);
  zyx_frag_a f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
               : "r"(zyx_shared(tile + (ZYX_LANE & 15) * pitch + (ZYX_LANE >> 4) * 8)));
  return f;
}
// (B held row by row along k: two 32-bit loads, measured faster than ldmatrix.x2 there.)
static __device__ __forceinline__ zyx_frag_b zyx_load_b(const unsigned short* p, long long pitch) {
  zyx_frag_b f;
  f.r[0] = *(const unsigned int*)p;
  f.r[1] = *(const unsigned int*)(p + 8);
  return f;
}
static __device__ __forceinline__ zyx_frag_a zyx_load_at(const unsigned short* p, long long pitch) {
  const unsigned short* tile = p - 2 * (ZYX_LANE & 3) * pitch - (ZYX_LANE >> 2);
  zyx_frag_a f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3])
               : "r"(zyx_shared(tile + ((ZYX_LANE & 7) + (ZYX_LANE >> 4) * 8) * pitch
                                + ((ZYX_LANE >> 3) & 1) * 8)));
  return f;
}
static __device__ __forceinline__ zyx_frag_b zyx_load_bt(const unsigned short* p, long long pitch) {
  const unsigned short* tile = p - 2 * (ZYX_LANE & 3) * pitch - (ZYX_LANE >> 2);
  zyx_frag_b f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(f.r[0]), "=r"(f.r[1])
               : "r"(zyx_shared(tile + (ZYX_LANE & 15) * pitch)));
  return f;
}
#define ZYX_MMA_OF(name, type) \\
  static __device__ __forceinline__ void name(zyx_frag_a a, zyx_frag_b b, float& c0, float& c1, float& c2, \\
                                              float& c3) { \\
    asm("mma.sync.aligned.m16n8k16.row.col.f32." type "." type ".f32 {%0, %1, %2, %3}, " \\
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" \\
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3) \\
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1])); \\
  }
ZYX_MMA_OF(zyx_mma_bf16, "bf16")
ZYX_MMA_OF(zyx_mma_f16, "f16")
// An A fragment from eight floats the lane holds (PACK: an MMA's outputs as the next one's
// input), rounded to nearest even in pairs; the first of each pair in the low half.
#define ZYX_PACK_OF(name, type) \
  static __device__ __forceinline__ unsigned int name##_pair(float lo, float hi) { \
    unsigned int r; \
    asm("cvt.rn." type "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); \
    return r; \
  } \
  static __device__ __forceinline__ zyx_frag_a name(float x0, float x1, float x2, float x3, float x4, \
                                                    float x5, float x6, float x7) { \
    zyx_frag_a f; \
    f.r[0] = name##_pair(x0, x1); f.r[1] = name##_pair(x2, x3); \
    f.r[2] = name##_pair(x4, x5); f.r[3] = name##_pair(x6, x7); \
    return f; \
  }
ZYX_PACK_OF(zyx_pack_bf16, "bf16")
ZYX_PACK_OF(zyx_pack_f16, "f16")
// 16 bytes from global to shared memory without registers (sm_80 on; .cg: not kept in L1, each
// block is read once per group).
static __device__ __forceinline__ void zyx_cp_async16(void* shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(zyx_shared(shared)), "l"(global));
}
static __device__ __forceinline__ void zyx_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> static __device__ __forceinline__ void zyx_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
#endif"""

# __expf: 2 + 1.16 |x| ulp of float (below 2^-16 relative over exp's finite range), far under
# half's and bfloat16's last place (2^-11, 2^-8): a half or bfloat16 exp rounds as expf's does
# except within that distance of a rounding boundary. Other intrinsics are not: __logf's
# absolute error is large relative to log near 1, __sinf/__cosf lose accuracy outside [-pi, pi].
_LOW_PRECISION_MATH = {"exp": "__expf"}

CUDA = Language(
    name="cuda",
    memory_type=MEMORY_TYPE,
    register_type=REGISTER_TYPE,
    kernel_prefix='extern "C" __global__',
    # Distinct buffers of one launch never overlap (see llvm.py ``alias_tags``): loads may go
    # through the read-only cache and stay in registers across stores.
    buffer_param="{type}* __restrict__ {name}",
    scalar_param="{type} {name}",
    global_id="((long long)blockIdx.x * blockDim.x + threadIdx.x)",
    global_stride="((long long)gridDim.x * blockDim.x)",
    index_type="long long",
    small_index_type="int",
    # (half and bfloat16 registers hold exact values of their dtype: converting back is exact)
    bit_view={"float32": ("__float_as_int({x})", "__int_as_float((int)({x}))"),
              "float64": ("__double_as_longlong({x})", "__longlong_as_double((long long)({x}))"),
              "float16": ("(short)zyx_f2h({x})", "zyx_h2f((unsigned short)({x}))"),
              "bfloat16": ("(short)(__float_as_uint({x}) >> 16)", "zyx_bf2f((unsigned short)({x}))")},
    param_type="unsigned long long",
    load_format={name: fmt.format(x="{buf}[{idx}]") for name, fmt in FROM_MEMORY.items()},
    store_format={name: "{buf}[{idx}] = " + fmt.format(x="{value}") + ";" for name, fmt in TO_MEMORY.items()},
    from_memory=FROM_MEMORY,
    to_memory=TO_MEMORY,
    vector_types=VECTOR_TYPES,
    vector_load="*((const {vtype}*)({buf} + {idx}))",
    vector_store="*(({vtype}*)({buf} + {idx})) = make_{vtype}({values});",
    dtype_prelude={"float16": _HALF_HELPER, "bfloat16": _BF16_HELPER},
    round_format={"float16": "zyx_h2f(zyx_f2h({x}))", "bfloat16": "zyx_bf2f(zyx_f2bf({x}))"},
    # No math.h under NVRTC: INFINITY and NAN are not defined; bit patterns instead (a cast
    # to double keeps them: the literal is ``((double)...)``).
    infinity="__int_as_float(0x7f800000)",
    nan="__int_as_float(0x7fc00000)",
    group_id="((long long)blockIdx.x)",
    local_id="((long long)threadIdx.x)",
    barrier="__syncthreads();",
    # Aligned for the float4 loads of four neighbouring elements (``vector_runs``).
    local_decl="__shared__ __align__(16) {type} {name}[{size}];",
    # Static __shared__ arrays stop at 48 KiB a block; past that, dynamic shared memory, which
    # runtime/cuda.py allows per kernel (cuFuncSetAttribute) and launches with.
    static_local_limit=48 * 1024,
    dynamic_local_prelude="#ifndef ZYX_DYNAMIC_SHARED\n#define ZYX_DYNAMIC_SHARED(name, size) "
                          "extern __shared__ __align__(16) unsigned char name[]\n#endif",
    dynamic_local_decl="ZYX_DYNAMIC_SHARED(zyx_dynamic_shared, {size});",
    dynamic_local_view="{type}* const {name} = ({type}*)(zyx_dynamic_shared + {offset});",
    dynamic_local_note="// zyx: dynamic shared memory {size} bytes",
    # The block size of a grouped kernel; the runtime launches blocks of exactly this size
    # (runtime/cuda.py reads it back from the source).
    group_attribute="__launch_bounds__({size})",
    warp_size=32,
    shuffle_down="__shfl_down_sync(0xffffffffu, {x}, {offset})",
    shuffle_types=frozenset({"float", "double", "int", "long long", "unsigned long long"}),
    fast_math={"float16": _LOW_PRECISION_MATH, "bfloat16": _LOW_PRECISION_MATH},
    fragment_type="zyx_frag_{kind}",
    fragment_load="zyx_load_{kind}({buf} + {idx}, {pitch}L)",
    mma={"bfloat16": "zyx_mma_bf16({a}, {b}, {c0}, {c1}, {c2}, {c3});",
         "float16": "zyx_mma_f16({a}, {b}, {c0}, {c1}, {c2}, {c3});"},
    mma_prelude=_MMA_HELPER,
    fragment_pack={"bfloat16": "zyx_pack_bf16({values})", "float16": "zyx_pack_f16({values})"},
    shuffle_xor="__shfl_xor_sync(0xffffffffu, {x}, {mask})",
    async_copy="zyx_cp_async16({local} + {lidx}, {buf} + {gidx});",
    async_commit="zyx_cp_async_commit();",
    async_wait="zyx_cp_async_wait<{n}>();",
)


def render(kernel: LoopKernel) -> str:
    return render_c(kernel, CUDA)
