"""The CUDA backend: its renderer checked without a GPU, its runtime and pool on one.

Without a GPU (CI, this file's default): a representative set of ops (elementwise in every
dtype, half/bfloat16/bool/int64 included, casts and where, reductions grouped and not, softmax
and layer norm rows, matmul, random, scatter and gather, movement) runs on zyx's CPU device;
every kernel the executor schedules is lowered again as a CUDA device lowers it (an H200's
options) and rendered as CUDA C. Those sources are

- compiled by NVRTC to CUBIN for sm_90 (and sm_80), the whole pipeline a GPU run goes through
  (the suite-wide check in conftest.py stops at PTX to stay cheap);
- executed on the CPU by a small CUDA emulator (``_EMULATOR_RUNTIME``: each thread of a block
  an OS thread, ``__syncthreads`` and ``__shfl_down_sync`` through barriers, blocks in turn),
  compiled with the system C++ compiler, and their results compared with what the CPU backend
  computed for the same graph: the grid-stride loops, the warp-shuffle trees, the half and
  bfloat16 conversions and the index arithmetic of the CUDA rendering are checked by running
  them. (The emulator replaces the PTX ``cvt`` half conversions with the compiler's _Float16,
  which rounds the same way; everything else is the rendered source as NVRTC gets it.)

The rest of the backend (runtime/cuda.py, memory/cuda.py: devices, pools, pinned staging, events
across streams, launches, the CUBIN cache, copies between GPUs) runs on simulated GPUs
(``FakeDriver``: the driver API calls zyx makes, on host memory and one worker thread per
stream, kernels in the emulator) in a subprocess with ``ZYX_BACKENDS=cuda,cpu``. The same
simulation runs any test file: ``ZYX_BACKENDS=cuda ZYX_SIMULATED_CUDA=1 PYTHONPATH=tests
python -m pytest -p test_cuda tests/test_ops.py`` (slowly: the kernels are emulated).

The backend is absent with a reason when there is no driver, and ``import torch_zyx`` and the
CPU backend keep working. With a GPU (``make test-cuda``, ``ZYX_BACKENDS=cuda``) the tests at
the end run the runtime, the pool and the copies to and from torch's own ``cuda`` tensors;
elsewhere they skip with "no CUDA device".
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_zyx
from torch_zyx.config import CONFIG
from torch_zyx.execute import contexts, realize

try:
    from torch_zyx.runtime import cuda as cuda_runtime

    cuda_runtime.nvrtc_version()
    NVRTC_REASON = ""
except Exception as exc:  # noqa: BLE001  (ImportError, or libnvrtc not found)
    cuda_runtime = None
    NVRTC_REASON = f"cuda-bindings / NVRTC not available ({type(exc).__name__}: {exc})"

needs_nvrtc = pytest.mark.skipif(bool(NVRTC_REASON), reason=NVRTC_REASON)
# The checks without a GPU run in the CPU pass: they read the CPU device's buffers (the emulator
# runs on them), and the OpenCL and CUDA passes would only repeat them.
_CPU_PASS = (CONFIG.backends[0] if CONFIG.backends else "cpu") == "cpu"
cpu_pass = pytest.mark.skipif(not _CPU_PASS, reason="zyx:0 is not the CPU device: the CUDA checks "
                              "without a GPU run in the CPU pass (make test)")

H200 = SimpleNamespace(renderer="cuda", is_gpu=True, compute_units=132, max_group_size=1024,
                       local_memory=48 * 1024, tile_local_memory=227 * 1024,
                       tensor_cores=("bfloat16", "float16"))


# ------------------------------------------------------------------------ kernels of ops


@dataclasses.dataclass
class Realization:
    """One graph realized by the CPU backend, with its kernels as a CUDA device runs them."""

    name: str
    sig: object
    schedule: object
    loops: list  # LoopKernel per scheduled kernel
    sources: list  # CUDA C per scheduled kernel (function named after ``loop.name``)
    outputs: list  # the CPU backend's result buffers, one per root


def _cases():
    """(name, fn, inputs) whose every realization is checked (CPU tensors; fn gets zyx ones)."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(dtype)

    def ints(*shape, low=-50, high=50, dtype=torch.int64):
        return torch.randint(low, high, shape, generator=gen).to(dtype)

    x, y = rand(37, 45), rand(37, 45)
    with_nan = rand(6, 700)
    with_nan[2, 5] = float("nan")
    f16, bf16 = torch.float16, torch.bfloat16
    return [
        ("gelu sigmoid chain f32", lambda a, b: F.gelu(a) * torch.sigmoid(b) + a.tanh(), (x, y)),
        ("f64 math", lambda a: (a.exp() + a.abs().log1p()).pow(1.5) - a.atan2(a + 1),
         (rand(50, dtype=torch.float64),)),
        ("half chain", lambda a, b: (a * b + 1).exp() - a.sigmoid(),
         (rand(333, dtype=f16), rand(333, dtype=f16))),
        ("bfloat16 chain", lambda a, b: torch.tanh(a) * b - a / (b.abs() + 1),
         (rand(333, dtype=bf16), rand(333, dtype=bf16))),
        ("int64 arithmetic",
         lambda a, b: (a * 3 + b) // 7 - (a % 5) + (a << 2) - (b >> 1) + torch.maximum(a, b),
         (ints(300), ints(300, low=1))),
        ("int8 uint8 int32", lambda a, b, c: (a + a * 3, b * 7 + 200, torch.minimum(c, c.flip(0)) ^ 5),
         (ints(100, dtype=torch.int8), ints(100, low=0, high=255, dtype=torch.uint8),
          ints(100, dtype=torch.int32))),
        # uint16 in unsigned int (65535 * 65535 overflows C's int), negative floats to unsigned
        # through a signed 64-bit integer (CPU torch's wrap-around; CUDA's own cast saturates).
        ("uint16 uint32 uint64",
         lambda a, b, c: (a * a, a.to(torch.float32) * 2, b * 3 ^ b, torch.where(b == 7, b, b & 12),
                          c * c | 1, (c.to(torch.float64) - 5).to(torch.uint64),
                          (b.to(torch.float32) - 100).to(torch.uint32),
                          (a.to(torch.float32) - 100.5).to(torch.uint16),
                          b.sum(), c.prod()),
         (ints(100, low=0, high=65536, dtype=torch.uint16), ints(100, low=0, high=2**31, dtype=torch.uint32),
          ints(100, low=0, high=2**40, dtype=torch.uint64))),
        ("bool and where", lambda a, b: (torch.where((a > 0) & ~(b > 1), a, b * 2), (a > b) | (b < -1)),
         (x, y)),
        ("casts", lambda a: (a.to(torch.int32), (a * 100).to(torch.int64).to(f16), (a > 0).float(),
                             a.to(bf16).to(torch.float64), a.half()), (rand(257),)),
        ("sum rows grouped", lambda a: a.sum(-1), (rand(64, 4096),)),
        ("sum columns", lambda a: a.sum(0), (rand(300, 70),)),
        # Reads along the outputs: column tiles (a group per 8-32 neighbouring outputs).
        ("column tiles", lambda a: (a.sum(0), a.var(0), torch.softmax(a, 0), a.amax(0)), (rand(600, 256),)),
        # Sizes divisible by four: four elements per iteration, vector loads and stores where
        # the elements are neighbours (not through the shifted slice).
        ("vector elementwise", lambda a, b, h: (a * b + 1, a[:, 1:5] * 2, h * 2 + 1, (a > 0).logical_not()),
         (rand(64, 128), rand(128), rand(96, 40, dtype=f16))),
        ("full sum and mean", lambda a: (a.sum(), a.mean(), a.square().sum()), (rand(40000),)),
        # One kernel of many grouped reduces: their shared arrays together must fit in a block's
        # 48 KiB (ptxas refuses the kernel otherwise), so its group is smaller.
        ("many sums in one kernel", lambda a: tuple((a * k).sum() for k in range(1, 31)), (rand(40000),)),
        ("max with nan", lambda a: (a.amax(-1), a.amin(0), a.max()), (with_nan,)),
        ("var and int prod", lambda a, b: (a.var(-1), b.prod(-1)),
         (rand(5, 600), ints(5, 300, low=1, high=3))),
        # Rows: more than 16 of them (no split reduce), more elements than an H200's grouped
        # reduce takes per output: one block per row.
        ("softmax rows", lambda a: torch.softmax(a, -1), (rand(20, 30000),)),
        ("softmax per output", lambda a: torch.softmax(a, -1), (rand(1, 256),)),
        ("layer norm rows", lambda a, w, b: F.layer_norm(a, (30000,), w, b),
         (rand(20, 30000), rand(30000), rand(30000))),
        ("log softmax half", lambda a: torch.log_softmax(a.float(), -1).half(),
         (rand(20, 30000, dtype=f16),)),
        ("matmul bias relu", lambda a, w, b: torch.relu(a @ w + b), (rand(16, 32), rand(32, 24), rand(24))),
        ("bmm", lambda a, b: torch.bmm(a, b), (rand(3, 9, 17), rand(3, 17, 5))),
        # Block tiles staged in shared memory (codegen/lower_tiles.py), with masked edge blocks,
        # operands read along k or along their rows (transposed), an epilogue and a batch.
        ("block-tiled matmul", lambda a, w, b: torch.relu(a @ w + b), (rand(70, 45), rand(45, 100), rand(100))),
        # 144 blocks of 64 x 64 (4 x 4 per item: each run of four rows one float4 shared load).
        ("block-tiled 64x64", lambda a, b: a @ b, (rand(768, 32), rand(32, 768))),
        ("block-tiled transposed", lambda a, b: (a.t() @ b.t(), torch.matmul(a.t().expand(2, 66, 40), b.t()[None])),
         (rand(40, 66), rand(33, 40))),
        # Tensor cores (half and bfloat16 inputs, float accumulation), masked edges, an
        # epilogue, a transposed operand and a batch.
        ("tensor-core bf16 matmul", lambda a, w, b: torch.relu(a @ w + b),
         (rand(70, 40, dtype=bf16), rand(40, 100, dtype=bf16), rand(100, dtype=bf16))),
        # Fused attention (codegen/lower_attention.py): query rows and keys not multiples of the
        # blocks, causal and not, a value head size other than the query's, and the
        # log-sum-exp stored by the same kernel.
        ("fused attention bf16", lambda q, k, v: (_fused_attention(q, k, v, False)[0],
                                                  *_fused_attention(q, k, v, True)[:2]),
         (rand(2, 70, 32, dtype=bf16), rand(2, 80, 32, dtype=bf16), rand(2, 80, 16, dtype=bf16))),
        ("fused attention f16 transposed",
         lambda q, k, v: _fused_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), True)[0],
         (rand(64, 2, 16, dtype=f16), rand(128, 2, 16, dtype=f16), rand(128, 2, 16, dtype=f16))),
        # Blocks whole and 16-byte aligned: asynchronous copies into shared memory (cp.async),
        # for the operand read along k and for the one held k by k.
        ("tensor-core bf16 async copies", lambda a, b, w: (a @ b, a @ w.t()),
         (rand(128, 64, dtype=bf16), rand(64, 256, dtype=bf16), rand(128, 64, dtype=bf16))),
        ("fused attention async copies", lambda q, k, v: _fused_attention(q, k, v, True)[0],
         (rand(1, 128, 32, dtype=bf16), rand(1, 128, 32, dtype=bf16), rand(1, 128, 32, dtype=bf16))),
        ("tensor-core f16 transposed",
         lambda a, b: (a.t() @ b, torch.bmm(b.t().expand(2, 72, 33), a[None].expand(2, 33, 40))),
         (rand(33, 40, dtype=f16), rand(33, 72, dtype=f16))),
        # Dtype views: a float's bits as an integer's and back (BITCAST), half and bfloat16 too.
        ("dtype views", lambda a, h, b: ((a.view(torch.int32) ^ 1).view(torch.float32) * 2,
                                       h.view(torch.int16) + 1, b.view(torch.float16) + 1,
                                       a.double().view(torch.int64) - 1),
         (rand(257), rand(64, dtype=f16), rand(64, dtype=bf16))),
        ("random", lambda a: (torch.rand_like(a), F.dropout(a, 0.5) + torch.rand(a.shape, device=a.device)),
         (rand(1000),)),
        ("scatter add and index add", lambda a, i, s: (a.scatter_add(0, i, s), a.index_add(0, i[:, 0], s)),
         (rand(10, 4), torch.randint(0, 10, (6, 4), generator=gen), rand(6, 4))),
        ("gather and index select", lambda a, i: (a.gather(1, i), a.index_select(0, i[:, 0]), a[i[:, 1]]),
         (rand(8, 9), torch.randint(0, 8, (8, 3), generator=gen))),
        ("movement", lambda a: (a.t().contiguous(), F.pad(a, (1, 2, 3, 0)), a.flip(1), a[::2, 1::3] * 2),
         (x,)),
        ("cumsum", lambda a: a.cumsum(-1), (rand(4, 100),)),
    ]


def _fused_attention(q, k, v, causal):
    return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, is_causal=causal)


def _collect(monkeypatch, options) -> list[Realization]:
    """Every case run on zyx's CPU device; each realization's graph kernelized and lowered
    again with ``options`` and rendered as CUDA C."""
    from torch_zyx.codegen import cuda as cuda_renderer
    from torch_zyx.codegen.lower import kept_composites, lower
    from torch_zyx.lazy.kernelize import GraphSignature, kernelize
    from torch_zyx.record import pending

    found: list[Realization] = []
    # Fresh caches: every graph is realized through the kernelizer (no plan from another test).
    monkeypatch.setattr(realize, "_plans", {})
    monkeypatch.setattr(realize, "_lowered", {})
    original = realize.realize
    torch_zyx.synchronize()
    case = {"name": ""}

    def realize_and_render(roots, device, into=None):
        outputs = original(roots, device, into)
        if all(r.op == "BUFFER" for r in roots):
            return outputs
        device.synchronize()
        sig = GraphSignature(roots)
        schedule = kernelize(roots, sig, None if options.block_tiles else options.matmul_tile,
                             kept_composites(options))
        loops, sources = [], []
        for n, kernel in enumerate(schedule.kernels):
            dtypes_ = [sig.buffers[ref].dtype if kind == "in" else sig.scalar_dtypes[ref] if kind == "scalars"
                       else schedule.temps[ref][0] for kind, ref in kernel.slots]
            loop = lower(kernel, "zyx_kernel", dtypes_, options)
            source = cuda_renderer.render(loop)
            loop.name = f"k{len(found)}_{n}_{hashlib.sha1(source.encode()).hexdigest()[:8]}"
            loops.append(loop)
            sources.append(source.replace("zyx_kernel(", f"{loop.name}("))
        found.append(Realization(case["name"], sig, schedule, loops, sources, outputs))
        return outputs

    monkeypatch.setattr(realize, "realize", realize_and_render)
    # record.pending keeps the executor's entry point once loaded (a one-element list).
    monkeypatch.setattr(pending, "_realize", [realize_and_render])
    for name, fn, inputs in _cases():
        case["name"] = name
        result = fn(*(t.to("zyx") for t in inputs))
        for out in result if isinstance(result, tuple) else (result,):
            out.cpu()
    torch_zyx.synchronize()
    return found


@pytest.fixture(scope="module")
def h200_kernels():
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _collect(monkeypatch, contexts.lowering_options(H200))


def _all_sources(realizations) -> list[tuple[str, str]]:
    return [(loop.name, source) for r in realizations for loop, source in zip(r.loops, r.sources)]


# ------------------------------------------------------------------------ rendering, NVRTC


def test_cuda_lowering_options_for_an_h200():
    options = contexts.lowering_options(H200)
    assert options.group_size == 256 and options.few_group_size == 1024
    assert options.few_outputs == 132 and not options.row_loops and not options.pipeline_rows


def test_opencl_rendering_keeps_its_shape():
    # The table fields CUDA added to the C-style base are off for OpenCL: one work item per
    # outer iteration, shared-memory trees, full-precision math.
    from torch_zyx.codegen.opencl import OPENCL

    assert not OPENCL.global_stride and not OPENCL.warp_size and not OPENCL.fast_math


@cpu_pass
def test_rendered_sources_use_the_cuda_dialect(h200_kernels):
    sources = {r.name: "\n".join(r.sources) for r in h200_kernels}
    everything = "\n".join(sources.values())
    assert "INFINITY" not in everything and "NAN" not in everything  # no math.h under NVRTC
    assert "long x_" not in everything.replace("long long x_", "")  # 64-bit indices
    chain = sources["gelu sigmoid chain f32"]
    assert 'extern "C" __global__ void' in chain and "x_gidx += ((long long)gridDim.x * blockDim.x)" in chain
    rows = sources["softmax rows"]
    assert "__launch_bounds__(256)" in rows and "__shfl_down_sync" in rows and "__shared__ __align__(16) float" in rows
    # Each tree reduction: two barriers (after the warps, after the first warp), not log2(256).
    trees = rows.count("% 32 == 0)")  # (32-bit indices: every index of these kernels fits)
    assert trees >= 2 and rows.count("__syncthreads();") == 2 * trees
    assert "zyx_f2h(" in sources["half chain"] and "zyx_f2bf(" in sources["bfloat16 chain"]
    assert "__expf(" in sources["half chain"]  # exp rounded straight to half: the fast form
    assert "__expf(" not in chain  # float32 results keep expf
    assert "__launch_bounds__(1024)" in sources["full sum and mean"]  # few outputs: one big block each
    vector = sources["vector elementwise"]
    assert "float4" in vector and "ushort4" in vector and "uchar4" in vector and "make_float4(" in vector
    assert "float4" not in sources["gelu sigmoid chain f32"]  # 37 x 45 elements: one per iteration
    columns = sources["column tiles"]
    assert "x_col" in columns and "x_rlane" in columns and "x_col" not in rows
    # Block tiles: an A and a B block in shared memory, in two stages: step 0 staged before the k
    # loop (a barrier), each step's products from one stage while the next step's blocks (loaded
    # before them) go into the other, one barrier per step; the matmul's epilogue (bias, ReLU) in
    # the same kernel; no packing kernels before it.
    tiled = sources["block-tiled matmul"]
    assert len(h200_kernels[[r.name for r in h200_kernels].index("block-tiled matmul")].sources) == 1
    assert tiled.count("__shared__ __align__(16) float") == 2 and tiled.count("__syncthreads();") == 2
    assert "x_mblk" in tiled
    assert "x_mblk" in sources["block-tiled transposed"] and "x_mblk" not in sources["bmm"]  # 9 x 5: too small
    assert "*((const float4*)(lm" in sources["block-tiled 64x64"] and "float4" not in tiled  # 2 x 2 per item
    # Indices in 32 bits where every index expression fits (all of these kernels), else 64.
    assert "for (int x_gidx" in chain and "const int x_lid" in rows
    loop = h200_kernels[[r.name for r in h200_kernels].index("gelu sigmoid chain f32")].loops[0]
    from torch_zyx.codegen import cuda as cuda_renderer

    huge = cuda_renderer.render(dataclasses.replace(loop, global_size=1 << 31))
    assert "for (long long x_gidx" in huge
    # Tensor cores: both blocks held as stored (16 bits), fragments read from them, mma.sync.
    cores = sources["tensor-core bf16 matmul"]
    assert cores.count("__shared__ __align__(16) unsigned short") == 2 and "mma.sync.aligned.m16n8k16" in cores
    assert "zyx_mma_bf16(v" in cores and "zyx_load_a(lm" in cores
    assert "zyx_mma_f16(v" in sources["tensor-core f16 transposed"]
    # Whole, aligned blocks of buffers read in place: cp.async, not registers; edge blocks not.
    assert "zyx_cp_async16(lm" in sources["tensor-core bf16 async copies"] and "zyx_cp_async16(lm" not in cores
    assert sources["tensor-core bf16 async copies"].count("zyx_cp_async_wait<0>();") >= 2
    assert "zyx_cp_async16(lm" in sources["fused attention async copies"]


@needs_nvrtc
@cpu_pass
def test_nvrtc_compiles_every_kernel_to_cubin(h200_kernels):
    sources = _all_sources(h200_kernels)
    assert len(sources) >= 30
    errors = cuda_runtime.compile_each(sources, 90)
    assert not errors, "\n\n".join(map(str, errors))
    # Also for an A100 (sm_80), as one program: names are unique, helpers guarded.
    image = cuda_runtime.compile_cuda("\n".join(source for _name, source in sources), 80)
    assert image[:4] == b"\x7fELF"


@needs_nvrtc
def test_compile_error_carries_source_log_and_reproduce():
    source = 'extern "C" __global__ void k_broken(float* __restrict__ b0, long long end) { b0[0] = nope; }\n'
    with pytest.raises(cuda_runtime.CompileError) as info:
        cuda_runtime.compile_cuda(source, 90, "k_broken")
    text = str(info.value)
    assert "nope" in text and "undefined" in text and "k_broken" in text
    assert "reproduce" in text and "nvcc -cubin -arch=sm_90" in text and info.value.source == source
    errors = cuda_runtime.compile_each([("k_ok", source.replace("nope", "1.0f").replace("k_broken", "k_ok")),
                                        ("k_broken", source)], 90)
    assert len(errors) == 1 and "k_broken" in str(errors[0])


@needs_nvrtc
def test_target_architecture_choice():
    assert cuda_runtime.target(90) == ("--gpu-architecture=sm_90", True)
    newest = max(cuda_runtime.supported_archs())
    option, cubin = cuda_runtime.target(newest + 5)  # a GPU newer than this NVRTC: PTX
    assert option == f"--gpu-architecture=compute_{newest}" and not cubin


# ------------------------------------------------------------------------ the CPU emulator

# The emulator's runtime (threads, barriers, shuffles), built once per process; each module of
# kernels includes only the light ``_EMULATOR_HEADER`` and links against it.
_EMULATOR_RUNTIME = r"""
#include <algorithm>
#include <barrier>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>
struct zyx_dim3 { unsigned int x = 0, y = 1, z = 1; };
zyx_dim3 blockDim, gridDim;
thread_local zyx_dim3 threadIdx, blockIdx;
static std::barrier<>* block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
static uint64_t lanes[32][32];
extern "C" void zyx_syncthreads() { block_barrier->arrive_and_wait(); }
// Every lane of the warp takes part (as __shfl_down_sync's full mask requires); a lane past
// the warp's last keeps its own value.
// ``bits`` of the warp's lane ``source`` (this lane's own where ``source`` is past the warp).
static uint64_t zyx_exchange(uint64_t bits, unsigned source) {
  unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  lanes[warp][lane] = bits;
  warp_barriers[warp]->arrive_and_wait();
  uint64_t out = source < 32 ? lanes[warp][source] : bits;
  warp_barriers[warp]->arrive_and_wait();
  return out;
}
extern "C" uint64_t zyx_shuffle_down(uint64_t bits, int offset) {
  return zyx_exchange(bits, threadIdx.x % 32 + offset);
}
extern "C" uint64_t zyx_shuffle_xor(uint64_t bits, int mask) {
  return zyx_exchange(bits, (threadIdx.x % 32) ^ mask);
}
// Each lane's four registers of a fragment it holds (PACK), gathered for every lane of its warp.
static uint32_t fragments[32][32][4];
extern "C" void zyx_warp_gather(const uint32_t* mine, uint32_t* all) {
  unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = 0; i < 4; i++) fragments[warp][lane][i] = mine[i];
  warp_barriers[warp]->arrive_and_wait();
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++) all[4 * l + i] = fragments[warp][l][i];
  warp_barriers[warp]->arrive_and_wait();
}
// One OS thread per CUDA thread of a block, running the blocks one after the other (a barrier
// between two: the next block's writes to the shared arrays wait for the last reads).
extern "C" void zyx_run(unsigned grid, unsigned block, void (*body)(void*), void* state) {
  gridDim.x = grid;
  blockDim.x = block;
  std::barrier<> bar(block);
  block_barrier = &bar;
  warp_barriers.clear();
  for (unsigned w = 0; w * 32 < block; ++w)
    warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - w * 32)));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned g = 0; g < grid; ++g) {
        blockIdx.x = g;
        body(state);
        bar.arrive_and_wait();
      }
    });
  for (auto& thread : threads) thread.join();
}
"""

_EMULATOR_HEADER = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>
struct zyx_dim3 { unsigned int x, y, z; };
extern zyx_dim3 blockDim, gridDim;
extern thread_local zyx_dim3 threadIdx, blockIdx;
extern "C" void zyx_syncthreads();
extern "C" uint64_t zyx_shuffle_down(uint64_t bits, int offset);
extern "C" uint64_t zyx_shuffle_xor(uint64_t bits, int mask);
extern "C" void zyx_warp_gather(const uint32_t* mine, uint32_t* all);
extern "C" void zyx_run(unsigned grid, unsigned block, void (*body)(void*), void* state);
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
// (Dynamic shared memory: a static array of the size the kernel names, shared by the block's threads.)
#define ZYX_DYNAMIC_SHARED(name, size) static __align__(16) unsigned char name[size]
#define __align__(n) __attribute__((aligned(n)))
#define __syncthreads() zyx_syncthreads()
// A register of another lane (a value of at most 8 bytes, moved as its bits).
template <class T> static T zyx_shuffled(T v, uint64_t (*exchange)(uint64_t, int), int how) {
  static_assert(sizeof(T) <= 8, "");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  bits = exchange(bits, how);
  memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T> static T __shfl_down_sync(unsigned, T v, int offset) {
  return zyx_shuffled(v, zyx_shuffle_down, offset);
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int mask) { return zyx_shuffled(v, zyx_shuffle_xor, mask); }
template <class A, class B> static auto max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return (T)a < (T)b ? (T)b : (T)a;
}
template <class A, class B> static auto min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return (T)b < (T)a ? (T)b : (T)a;
}
#define ZYX_VECTOR(T, V) \
  struct V { T x, y, z, w; }; \
  static V make_##V(T x, T y, T z, T w) { return V{x, y, z, w}; }
ZYX_VECTOR(float, float4)
ZYX_VECTOR(int, int4)
ZYX_VECTOR(unsigned short, ushort4)
ZYX_VECTOR(short, short4)
ZYX_VECTOR(unsigned char, uchar4)
ZYX_VECTOR(signed char, char4)
static float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
static int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
static double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
#define __expf(x) expf(x)  // (glibc declares an __expf of its own, not exported)
// The PTX cvt conversions of codegen/cuda.py, as the compiler's own half (round to nearest even).
#define ZYX_HALF
static float zyx_h2f(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
static unsigned short zyx_f2h(float f) {
  _Float16 h = (_Float16)f;
  unsigned short u;
  memcpy(&u, &h, 2);
  return u;
}
// The tensor-core helpers of codegen/cuda.py: a fragment holds a copy of its whole 16 x 16 (A)
// or 8 x 16 (B) tile, taken from shared memory when it is loaded (every lane wrote its part of
// the tile before the barrier before), and each lane computes its own four outputs of the
// product from the whole tiles. A fragment of values the lane holds (PACK) keeps its registers
// (``packed``); the product gathers the whole tile from the warp's lanes.
#define ZYX_MMA
struct zyx_frag_a { unsigned short t[16][16]; bool packed = false; uint32_t r[4] = {}; };
struct zyx_frag_b { unsigned short t[8][16]; };
// From the lane's own element ``p`` (row or column l / 4, k 2 (l % 4)) back to the tile's
// first element; ``by_k``: the block is held k by k (element (row, k) at k * pitch + row).
template <int ROWS> static void zyx_copy_tile(unsigned short (*t)[16], const unsigned short* p, long long pitch,
                                              bool by_k) {
  const int lane = threadIdx.x % 32;
  const unsigned short* tile = by_k ? p - 2 * (lane % 4) * pitch - lane / 4 : p - (lane / 4) * pitch - 2 * (lane % 4);
  for (int row = 0; row < ROWS; row++)
    for (int k = 0; k < 16; k++) t[row][k] = by_k ? tile[k * pitch + row] : tile[row * pitch + k];
}
static zyx_frag_a zyx_load_a(const unsigned short* p, long long pitch) {
  zyx_frag_a f;
  zyx_copy_tile<16>(f.t, p, pitch, false);
  return f;
}
static zyx_frag_b zyx_load_b(const unsigned short* p, long long pitch) {
  zyx_frag_b f;
  zyx_copy_tile<8>(f.t, p, pitch, false);
  return f;
}
static zyx_frag_a zyx_load_at(const unsigned short* p, long long pitch) {
  zyx_frag_a f;
  zyx_copy_tile<16>(f.t, p, pitch, true);
  return f;
}
static zyx_frag_b zyx_load_bt(const unsigned short* p, long long pitch) {
  zyx_frag_b f;
  zyx_copy_tile<8>(f.t, p, pitch, true);
  return f;
}
typedef zyx_frag_a zyx_frag_at;
typedef zyx_frag_b zyx_frag_bt;
static float zyx_emulated_bf2f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
static unsigned short zyx_emulated_f2bf(float f) {  // (codegen/cuda.py's zyx_f2bf)
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
template <unsigned short (*to_bits)(float)>
static zyx_frag_a zyx_emulated_pack(float x0, float x1, float x2, float x3, float x4, float x5, float x6,
                                    float x7) {
  zyx_frag_a f;
  f.packed = true;
  const float x[8] = {x0, x1, x2, x3, x4, x5, x6, x7};
  for (int i = 0; i < 4; i++) f.r[i] = to_bits(x[2 * i]) | ((uint32_t)to_bits(x[2 * i + 1]) << 16);
  return f;
}
// Asynchronous copies done at once (the wait and the barrier after them order nothing more here).
static void zyx_cp_async16(void* shared, const void* global) { memcpy(shared, global, 16); }
static void zyx_cp_async_commit() {}
template <int N> static void zyx_cp_async_wait() {}
#define zyx_pack_bf16 zyx_emulated_pack<zyx_emulated_f2bf>
#define zyx_pack_f16 zyx_emulated_pack<zyx_f2h>
template <float (*to_float)(unsigned short)>
static void zyx_emulated_mma(zyx_frag_a a, zyx_frag_b b, float& c0, float& c1, float& c2, float& c3) {
  const int lane = threadIdx.x % 32;
  // A packed A tile from its lanes' registers (mma.m16n8k16's layout: register i of lane l
  // holds row l / 4 + 8 (i % 2), k 2 (l % 4) + 8 (i / 2) and the next k).
  if (a.packed) {
    uint32_t all[32 * 4];
    zyx_warp_gather(a.r, all);
    for (int l = 0; l < 32; l++)
      for (int i = 0; i < 4; i++) {
        const int row = l / 4 + 8 * (i % 2), k = 2 * (l % 4) + 8 * (i / 2);
        a.t[row][k] = all[4 * l + i] & 0xffff;
        a.t[row][k + 1] = all[4 * l + i] >> 16;
      }
  }
  float* c[4] = {&c0, &c1, &c2, &c3};
  for (int r = 0; r < 4; r++) {
    const int row = lane / 4 + 8 * (r / 2), col = 2 * (lane % 4) + r % 2;
    float sum = 0;
    for (int k = 0; k < 16; k++) sum += to_float(a.t[row][k]) * to_float(b.t[col][k]);
    *c[r] += sum;
  }
}
#define zyx_mma_bf16 zyx_emulated_mma<zyx_emulated_bf2f>
#define zyx_mma_f16 zyx_emulated_mma<zyx_h2f>
"""

_HEAD = re.compile(r'extern "C" __global__(?: __launch_bounds__\(\d+\))? void (\w+)\(([^)]*)\)')


def _launcher(source: str, name: str) -> str:
    """``launch_<name>(unsigned long long* args, unsigned grid, unsigned block)``: the kernel
    called with its arguments as 8-byte values (what cuLaunchKernel copies: pointers, the
    random parameters, ``end``)."""
    head = next(m for m in _HEAD.finditer(source) if m.group(1) == name)
    args = []
    for i, p in enumerate(p.strip() for p in head.group(2).split(",")):
        if "*" in p:
            args.append(f"({p.split('*')[0].strip()}*)args[{i}]")
        elif p.endswith(" end"):
            args.append(f"(long long)args[{i}]")
        else:
            args.append(f"args[{i}]")
    return (f"static void body_{name}(void* state) {{\n"
            f"  unsigned long long* args = (unsigned long long*)state;\n"
            f"  {name}({', '.join(args)});\n}}\n"
            f'extern "C" void launch_{name}(unsigned long long* args, unsigned grid, unsigned block) {{\n'
            f"  zyx_run(grid, block, body_{name}, args);\n}}\n")


_runtime_library: list = []


def _compiler() -> str:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    return compiler


def _compile_cpp(text: str, path: Path, library: Path, std: str = "c++17") -> None:
    path.write_text(text)
    result = subprocess.run([_compiler(), f"-std={std}", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o",
                             str(library), str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0 and "_Float16" in result.stderr:
        pytest.skip("the C++ compiler has no _Float16 (needed for the emulated half conversions)")
    if result.returncode != 0 and ("<barrier>" in result.stderr or "std::barrier" in result.stderr):
        pytest.skip("the C++ compiler has no C++20 <barrier> (the emulator's threads need it)")
    assert result.returncode == 0, result.stderr[-4000:]


def emulator_runtime(directory: Path):
    """The emulator's runtime library, loaded with its symbols global (modules link to it)."""
    if not _runtime_library:
        library = directory / "zyx_emulator_runtime.so"
        if not library.exists():
            _compile_cpp(_EMULATOR_RUNTIME, directory / "zyx_emulator_runtime.cpp", library, std="c++20")
        _runtime_library.append(ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL))
    return _runtime_library[0]


def emulated_module(source: str, directory: Path):
    """The kernels of ``source`` (CUDA C as rendered) built for the emulator: a library with
    ``launch_<name>`` per kernel."""
    emulator_runtime(directory)
    names = [m.group(1) for m in _HEAD.finditer(source)]
    text = _EMULATOR_HEADER + source + "".join(_launcher(source, name) for name in names)
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    library = directory / f"module_{digest}.so"
    if not library.exists():  # (an earlier process of the same test built the same module)
        _compile_cpp(text, directory / f"module_{digest}.cpp", library)
    return ctypes.CDLL(str(library))


def _emulate(library, realization: Realization, block: int = 32, max_grid: int = 3) -> list[np.ndarray]:
    """Run the realization's CUDA kernels in order on host copies of its buffers (ungrouped
    launches: ``max_grid`` blocks of ``block`` threads, so the grid-stride loops take turns)."""
    from torch_zyx.dtypes import pack_scalars

    sig, schedule = realization.sig, realization.schedule
    memory = []  # numpy arrays backing every slot: inputs, temporaries, scalar groups
    for buffer in sig.buffers:
        data = np.frombuffer((ctypes.c_char * buffer.nbytes).from_address(buffer.ptr), dtype=np.uint8)
        memory.append(data.copy())
    for dtype, numel in schedule.temps:
        memory.append(np.zeros(max(numel, 1) * dtype.itemsize, dtype=np.uint8))
    for dtype, values in zip(sig.scalar_dtypes, sig.scalar_values):
        memory.append(np.frombuffer(bytearray(pack_scalars(dtype, values)), dtype=np.uint8))
    first = {"in": 0, "tmp": len(sig.buffers), "scalars": len(sig.buffers) + len(schedule.temps)}
    for kernel, loop in zip(schedule.kernels, realization.loops):
        values = [memory[first[kind] + ref].ctypes.data for kind, ref in kernel.slots]
        values += [sig.random_args[p] & (2**64 - 1) for p in kernel.params] + [loop.global_size]
        args = (ctypes.c_uint64 * len(values))(*values)
        if loop.group_size:
            if loop.global_size == 0:
                continue
            grid, threads = loop.global_size, loop.group_size
        else:
            threads = block
            grid = min(max_grid, -(-max(loop.global_size, 1) // block))
        getattr(library, f"launch_{loop.name}")(args, ctypes.c_uint(grid), ctypes.c_uint(threads))
    return [memory[-1 - ref] if ref < 0 else memory[first["tmp"] + ref] for ref in schedule.root_temps]


def _as_torch(data: np.ndarray, dtype) -> torch.Tensor:
    from torch_zyx.record.transfer import ZYX_TO_TORCH

    return torch.frombuffer(bytearray(data.tobytes()), dtype=torch.uint8).view(ZYX_TO_TORCH[dtype]).clone()


@cpu_pass
def test_emulated_cuda_kernels_match_the_cpu_backend(tmp_path):
    # Smaller groups than an H200's (64 threads, 128 for few outputs) keep the emulator's
    # thread count down; the warp trees still span two warps.
    options = dataclasses.replace(contexts.lowering_options(H200), group_size=64, few_group_size=128)
    with pytest.MonkeyPatch.context() as monkeypatch:
        realizations = _collect(monkeypatch, options)
    library = emulated_module("\n".join(source for _name, source in _all_sources(realizations)), tmp_path)
    failures = []
    checked = set()
    for realization in realizations:
        got = _emulate(library, realization)
        for root, (data, cpu_buffer) in enumerate(zip(got, realization.outputs)):
            dtype = cpu_buffer.dtype
            expect = _as_torch(np.frombuffer((ctypes.c_char * cpu_buffer.nbytes).from_address(cpu_buffer.ptr),
                                             dtype=np.uint8), dtype)
            actual = _as_torch(data[:cpu_buffer.nbytes], dtype)
            tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype.itemsize == 2 and dtype.is_float else \
                {"rtol": 1e-5, "atol": 5e-5}  # (sums of hundreds of floats added in another order)
            try:
                torch.testing.assert_close(actual, expect, equal_nan=True,
                                           **(tolerance if dtype.is_float else {}))
            except AssertionError as exc:
                failures.append(f"{realization.name} (root {root}, {dtype}): {exc}")
        checked.add(realization.name)
    assert checked == {name for name, _fn, _inputs in _cases()}
    assert not failures, "\n\n".join(failures)
    grouped = sum(1 for r in realizations for loop in r.loops if loop.group_size)
    assert grouped >= 8  # the warp trees were exercised


@cpu_pass
def test_tiles_past_48_kib_take_dynamic_shared_memory(tmp_path, monkeypatch):
    """A tensor-core tile whose two stages pass 48 KiB (128 x 256 outputs, k step 32): its arrays
    are views of the dynamic shared array, its source names the bytes the runtime launches with,
    NVRTC compiles it and the emulator computes what the CPU backend does."""
    from torch_zyx.codegen.lower_tiles import MmaTile

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 64, generator=gen).to(torch.bfloat16)
    b = torch.randn(64, 512, generator=gen).to(torch.bfloat16)
    monkeypatch.setattr(sys.modules[__name__], "_cases", lambda: [("wide tile", lambda x, y: x @ y, (a, b))])
    options = dataclasses.replace(contexts.lowering_options(H200), mma_tiles=(MmaTile(128, 256, 32, 2, 4),))
    with pytest.MonkeyPatch.context() as patch:
        (realization,) = _collect(patch, options)
    (source,) = realization.sources
    assert "ZYX_DYNAMIC_SHARED(zyx_dynamic_shared, 54272);" in source
    assert "// zyx: dynamic shared memory 54272 bytes" in source  # (A: 2 x 128 x 40, B: 2 x 32 x 264)
    assert "__shared__ __align__(16) unsigned short lm" not in source
    if not NVRTC_REASON:
        cuda_runtime.compile_cuda(source, 90)
    (got,) = _emulate(emulated_module(source, tmp_path), realization)
    want = (a.float() @ b.float()).to(torch.bfloat16).flatten()
    torch.testing.assert_close(_as_torch(got, realization.outputs[0].dtype), want, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------------ a simulated GPU
#
# ``FakeDriver`` stands in for ``cuda.bindings.driver`` (the calls runtime/cuda.py and
# memory/cuda.py make): "device memory" is host memory, each stream a worker thread running
# its queue in order (copies, kernels, event records, waits on other streams' events), events
# complete when their stream reaches them, and kernels run in the CPU emulator above, built from
# the source that NVRTC checked (``install_fake_driver`` makes the runtime's images the source).
# So the whole CUDA backend (devices, pools, pinned staging, events across streams, launches,
# the CUBIN cache, copies between two GPUs) runs here with its asynchrony; a missing wait shows
# as a wrong value.


_handles = itertools.count(0x1000, 16)


class _Handle:
    """An opaque driver handle that converts to int, as cuda-bindings' handle types do."""

    def __init__(self):
        self.value = next(_handles)

    def __int__(self) -> int:
        return self.value


class _FakeStream(_Handle):
    def __init__(self):
        super().__init__()
        import queue
        import threading

        self.queue: queue.Queue = queue.Queue()
        self.idle = threading.Event()
        self.idle.set()
        self.pending = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def enqueue(self, work) -> None:
        with self.lock:
            self.pending += 1
            self.idle.clear()
        self.queue.put(work)

    def _run(self) -> None:
        import time

        while True:
            work = self.queue.get()
            time.sleep(0.0005)  # the "GPU" lags behind the host, as a real one may
            work()
            with self.lock:
                self.pending -= 1
                if not self.pending:
                    self.idle.set()


class _FakeEvent(_Handle):
    def __init__(self):
        import threading

        super().__init__()
        self.recorded = 0  # records made
        self.reached = 0  # records their stream has reached
        self.cond = threading.Condition()

    def reach(self, generation: int) -> None:
        with self.cond:
            self.reached = max(self.reached, generation)
            self.cond.notify_all()

    def wait_for(self, generation: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.reached >= generation)


class FakeDriver:
    """The driver API subset zyx uses, on host memory and worker threads (see above)."""

    def __init__(self, real, build_dir: Path, gpus: int = 2):
        import threading

        self.real, self.build_dir, self.gpus = real, build_dir, gpus
        # The enums are the real ones.
        self.CUresult, self.CUevent_flags = real.CUresult, real.CUevent_flags
        self.CUstream_flags, self.CUdevice_attribute = real.CUstream_flags, real.CUdevice_attribute
        self.CU_MEMHOSTALLOC_PORTABLE = real.CU_MEMHOSTALLOC_PORTABLE
        self.ok = real.CUresult.CUDA_SUCCESS
        self.memory: dict[int, object] = {}
        self.contexts = [_Handle() for _ in range(gpus)]
        self.local = threading.local()
        self.launches = self.builds = self.compiles = 0

    def _stack(self) -> list:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    # ---- devices and contexts
    def cuInit(self, flags):
        return (self.ok,)

    def cuDeviceGetCount(self):
        return self.ok, self.gpus

    def cuDeviceGet(self, ordinal):
        return self.ok, ordinal

    def cuDevicePrimaryCtxRetain(self, device):
        return self.ok, self.contexts[device]

    def cuCtxGetCurrent(self):
        stack = self._stack()
        return self.ok, stack[-1] if stack else _NULL

    def cuCtxPushCurrent(self, ctx):
        self._stack().append(ctx)
        return (self.ok,)

    def cuCtxPopCurrent(self):
        return self.ok, self._stack().pop()

    def cuDeviceGetName(self, length, device):
        return self.ok, f"Simulated GPU {device}".encode().ljust(length, b"\0")

    def cuDeviceGetAttribute(self, attribute, device):
        # Blocks of at most 64 threads keep the emulator's threads few (and trees span warps).
        values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 2,
                  "MAX_THREADS_PER_BLOCK": 64, "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
                  "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024, "MAX_THREADS_PER_MULTIPROCESSOR": 2048}
        return self.ok, values[attribute.name.replace("CU_DEVICE_ATTRIBUTE_", "")]

    def cuDeviceTotalMem(self, device):
        return self.ok, 1 << 30

    def cuDriverGetVersion(self):
        return self.ok, 13000

    def cuMemGetInfo(self):
        self._current()
        used = sum(len(block) for block in self.memory.values())
        return self.ok, (1 << 30) - used, 1 << 30

    def cuGetErrorName(self, result):
        return self.ok, result.name.encode()

    def cuGetErrorString(self, result):
        return self.ok, b"simulated"

    def _current(self):
        stack = self._stack()
        assert stack and int(stack[-1]), "a driver call without a current context"
        return stack[-1]

    # ---- memory
    def _allocate(self, nbytes):
        block = ctypes.create_string_buffer(max(nbytes, 1))
        self.memory[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def cuMemAlloc(self, nbytes):
        self._current()
        return self.ok, self._allocate(nbytes)

    def cuMemFree(self, ptr):
        self._current()
        del self.memory[int(ptr)]
        return (self.ok,)

    def cuMemHostAlloc(self, nbytes, flags):
        self._current()
        return self.ok, self._allocate(nbytes)

    def cuMemFreeHost(self, ptr):
        del self.memory[int(ptr)]
        return (self.ok,)

    def cuMemcpyHtoD(self, dst, data, nbytes):
        self._current()
        ctypes.memmove(int(dst), data, nbytes)
        return (self.ok,)

    def _copy_async(self, dst, src, nbytes, stream):
        self._current()
        dst, src = int(dst), int(src)
        stream.enqueue(lambda: ctypes.memmove(dst, src, nbytes))
        return (self.ok,)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self._copy_async(dst, src, nbytes, stream)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        return self._copy_async(dst, src, nbytes, stream)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        return self._copy_async(dst, src, nbytes, stream)

    def cuMemcpyPeerAsync(self, dst, dst_ctx, src, src_ctx, nbytes, stream):
        assert int(dst_ctx) != int(src_ctx)
        return self._copy_async(dst, src, nbytes, stream)

    # ---- streams and events
    def cuStreamCreate(self, flags):
        self._current()
        return self.ok, _FakeStream()

    def cuStreamSynchronize(self, stream):
        stream.idle.wait()
        return (self.ok,)

    def cuEventCreate(self, flags):
        self._current()
        return self.ok, _FakeEvent()

    def cuEventDestroy(self, event):
        return (self.ok,)

    def cuEventRecord(self, event, stream):
        event.recorded += 1
        generation = event.recorded
        stream.enqueue(lambda: event.reach(generation))
        return (self.ok,)

    def cuEventQuery(self, event):
        with event.cond:
            done = event.reached >= event.recorded
        return (self.ok if done else self.real.CUresult.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event):
        event.wait_for(event.recorded)
        return (self.ok,)

    def cuStreamWaitEvent(self, stream, event, flags):
        generation = event.recorded
        stream.enqueue(lambda: event.wait_for(generation))
        return (self.ok,)

    # ---- modules and launches (the "image" is the CUDA source: see install_fake_driver)
    def cuModuleLoadData(self, image):
        self._current()
        source = bytes(image).decode()
        self.builds += 1
        arguments = {m.group(1): len(m.group(2).split(",")) for m in _HEAD.finditer(source)}
        return self.ok, (emulated_module(source, self.build_dir), arguments)

    def cuModuleGetFunction(self, module, name):
        library, arguments = module
        name = name.decode()
        if name not in arguments:
            return (self.real.CUresult.CUDA_ERROR_NOT_FOUND,)
        return self.ok, (getattr(library, f"launch_{name}"), arguments[name])

    def cuFuncSetAttribute(self, function, attribute, value):
        # (The emulator's shared arrays are static: any size is fine.)
        return (self.ok,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self._current()
        assert (gy, gz, by, bz, extra) == (1, 1, 1, 1, 0) and gx >= 1 and 1 <= bx <= 256 and shared >= 0
        launcher, count = function
        pointers = (ctypes.c_void_p * count).from_address(params)
        # The values are copied now, as cuLaunchKernel does (the caller reuses its arrays).
        values = (ctypes.c_uint64 * count)(*(ctypes.c_uint64.from_address(p).value for p in pointers))
        self.launches += 1
        stream.enqueue(lambda: launcher(values, ctypes.c_uint(gx), ctypes.c_uint(bx)))
        return (self.ok,)


_NULL = _Handle.__new__(_Handle)
_NULL.value = 0


def install_fake_driver(build_dir: Path, gpus: int = 2) -> FakeDriver:
    """Replace the CUDA driver of torch_zyx's CUDA runtime and pool by ``FakeDriver`` (before any
    device exists), and make the runtime's images the sources NVRTC checked."""
    from torch_zyx.memory import cuda as cuda_memory

    fake = FakeDriver(cuda_memory.driver, build_dir, gpus)
    cuda_memory.driver = cuda_runtime.driver = fake
    cuda_memory._primary.clear()
    real_compile = cuda_runtime.compile_cuda

    def compile_to_source(source, arch, name="zyx_kernels", fast=False, ptx=False):
        fake.compiles += 1
        real_compile(source, arch, name, fast=True, ptx=True)  # NVRTC's errors, as on a GPU
        return source.encode()

    cuda_runtime.compile_cuda = compile_to_source
    return fake


def pytest_configure(config):
    """``python -m pytest -p test_cuda`` with ``ZYX_SIMULATED_CUDA=1`` (and ``ZYX_BACKENDS=cuda``)
    runs the tests on simulated GPUs (``FakeDriver``): the CUDA runtime, pool and kernels
    without a GPU, slowly (the kernels are emulated). The fork-based tests cannot pass there,
    as on a real GPU. Does nothing otherwise (loaded as a test module, as usual)."""
    import os
    import tempfile

    if os.environ.get("ZYX_SIMULATED_CUDA", "") in ("", "0") or cuda_runtime is None:
        return
    build = Path(tempfile.gettempdir()) / "zyx-simulated-cuda"
    build.mkdir(exist_ok=True)
    install_fake_driver(build, gpus=int(os.environ.get("ZYX_SIMULATED_GPUS", "1")))


_SIMULATED_SCRIPT = r"""
import gc
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_cuda
fake = test_cuda.install_fake_driver(Path(sys.argv[2]))
import torch, torch.nn.functional as F, torch_zyx
from torch_zyx.execute import contexts

devices = contexts.devices()
print("devices", [ctx.runtime.describe() for ctx in devices])
assert [ctx.runtime.renderer for ctx in devices] == ["cuda", "cuda", "llvm"], devices
g0, g1, cpu = (torch.device("zyx", i) for i in range(3))
gen = torch.Generator().manual_seed(0)
x, y = torch.randn(40, 257, generator=gen), torch.randn(40, 257, generator=gen)
w, b = torch.randn(257, generator=gen), torch.randn(257, generator=gen)
xs, ys = x.to(g0), y.to(g0)
results = {
    "chain": (F.gelu(xs) * torch.sigmoid(ys) + xs.tanh(), F.gelu(x) * torch.sigmoid(y) + x.tanh()),
    "softmax": (torch.softmax(xs, -1), torch.softmax(x, -1)),
    "layer_norm": (F.layer_norm(xs, (257,), w.to(g0), b.to(g0)), F.layer_norm(x, (257,), w, b)),
    "sums": (torch.stack([xs.sum(0)[:5], xs.sum(-1)[:5], xs.var(-1)[:5]]),
             torch.stack([x.sum(0)[:5], x.sum(-1)[:5], x.var(-1)[:5]])),
    "matmul": (xs[:16] @ ys[:8].t(), x[:16] @ y[:8].t()),
    "half": ((xs.half() * 2).exp().float(), (x.half() * 2).exp().float()),
}
torch.zyx.synchronize()  # one realization, one plan: its kernels are built as one batch
for step in range(3):  # the schedule cache: same graph, new values, no new kernels
    before = torch_zyx.counters()["kernels_compiled"]
    z = (xs * (step + 2.5) + ys).relu().sum(-1)  # (a float: a parameter, not part of the plan)
    torch.testing.assert_close(z.cpu(), (x * (step + 2.5) + y).relu().sum(-1), rtol=1e-4, atol=1e-4)
    if step:
        assert torch_zyx.counters()["kernels_compiled"] == before
for name, (got, want) in results.items():
    tol = 1e-2 if name == "half" else 1e-4
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    print("ok", name)
# In place, views, scalars and random numbers.
xs.mul_(2).add_(1)
xs[3:7, ::2] = 0
x.mul_(2).add_(1)
x[3:7, ::2] = 0
torch.testing.assert_close(xs.cpu(), x)
assert abs(xs.sum().item() - x.sum().item()) < 1e-2
r = torch.rand(10000, device=g0)
assert 0.45 < r.mean().item() < 0.55
# Between the two GPUs (peer copies) and with the CPU device (through the host).
on1 = (xs * 3).to(g1)
torch.testing.assert_close(on1.cpu(), x * 3)
torch.testing.assert_close((on1 + 1).t()[2:5].to(g0).cpu(), (x * 3 + 1).t()[2:5])
torch.testing.assert_close(xs.to(cpu).cpu(), x)
torch.testing.assert_close(x.to(cpu).to(g1).cpu(), x)
# Pool statistics, reuse and empty_cache.
pool = devices[0].pool
torch.zyx.synchronize()
live = pool.allocated
big = torch.full((1 << 20,), 2.0).to(g0)  # (a copy: a buffer at once)
grown = pool.allocated
assert grown == live + (4 << 20), (grown, live)
assert big.sum().item() == 2 * (1 << 20)
del big
gc.collect()  # (a reference cycle through the graph may hold a storage until the collector runs)
torch.zyx.synchronize()
assert pool.allocated <= grown - (4 << 20), (pool.allocated, grown)
pool.empty_cache()
assert pool.reserved == pool.allocated
free, total = torch.zyx.mem_get_info(0)
assert 0 < free <= total
# The CUBIN cache: another device object (as in the next process) loads every program from disk.
fresh = type(devices[0].runtime)(0)
compiles = fake.compiles
programs = [fresh.compile(p.name, p.source) for p in devices[0].programs.values()]
fresh.build_pending()
assert fake.compiles == compiles and all(p._function is not None for p in programs)
print("launches", fake.launches, "modules loaded", fake.builds, "memory", len(fake.memory))
print("SIMULATED OK")
"""


@needs_nvrtc
@cpu_pass
def test_whole_backend_on_a_simulated_gpu(tmp_path):
    """ZYX_BACKENDS=cuda,cpu with two simulated GPUs: ops, in-place writes and views, the
    schedule cache, copies between the GPUs and with the CPU device, the pool's accounting, the
    CUBIN cache on disk."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    import os

    env = dict(os.environ, ZYX_BACKENDS="cuda,cpu", ZYX_CACHE_DIR=str(tmp_path / "cache"))
    args = [sys.executable, "-c", _SIMULATED_SCRIPT, str(Path(__file__).parent), str(tmp_path)]
    result = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "SIMULATED OK" in result.stdout
    refs = list((tmp_path / "cache" / "cuda").glob("*.ref"))
    assert refs and list((tmp_path / "cache" / "cuda").glob("image-*.bin"))


# ------------------------------------------------------------------------ without a driver


@cpu_pass
def test_backend_absent_with_a_reason_and_cpu_keeps_working():
    """ZYX_BACKENDS=cuda,cpu where CUDA cannot run: the CUDA backend is skipped with the
    reason, the CPU is zyx:0 (in a subprocess: devices are built once per process)."""
    script = ("import torch, torch_zyx\n"
              "from torch_zyx.execute.contexts import cuda_unavailable\n"
              "print('reason:', cuda_unavailable())\n"
              "x = torch.arange(4.0, device='zyx')\n"
              "print('result:', (x * 2).sum().item(), torch.zyx.get_device_name(0))\n")
    import os

    env = dict(os.environ, ZYX_BACKENDS="cuda,cpu")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reason = result.stdout.split("reason:", 1)[1].splitlines()[0].strip()
    if not reason:
        pytest.skip("CUDA works here: the backend is present")
    assert "result: 12.0" in result.stdout
    assert "backend 'cuda' skipped" in result.stderr and reason in result.stderr
    assert any(word in reason for word in ("no CUDA driver", "no device", "not installed", "NVRTC"))


# ------------------------------------------------------------------------ with a GPU


def _cuda_contexts():
    return [ctx for ctx in contexts.devices() if ctx.runtime.renderer == "cuda"]


def _require_gpu() -> None:
    """Skip the test, saying why, without a CUDA device (asked when it runs: a simulated GPU,
    ``pytest_configure`` below, is installed after this module is imported)."""
    if cuda_runtime is None:
        pytest.skip(f"no CUDA device ({NVRTC_REASON})")
    count, reason = cuda_runtime.probe()
    if not count:
        pytest.skip(f"no CUDA device ({reason})")


@pytest.fixture
def gpu() -> torch.device:
    """The first zyx CUDA device (``ZYX_BACKENDS`` must include ``cuda``)."""
    _require_gpu()
    found = _cuda_contexts()
    if not found:
        pytest.skip("no zyx CUDA device: run with ZYX_BACKENDS=cuda (make test-cuda)")
    return torch.device("zyx", found[0].index)


def test_runtime_compiles_launches_and_copies_without_zyx_tensors():
    _require_gpu()
    from torch_zyx import dtypes
    from torch_zyx.memory.buffer import Buffer
    from torch_zyx.memory.events import EventTable

    device = cuda_runtime.CUDADevice(0)
    assert device.describe().startswith("cuda: ") and f"sm_{device.arch}" in device.describe()
    free, total = device.mem_get_info()
    assert 0 < free <= total == device.global_memory
    source = ('extern "C" __global__ void k_axpy(float* __restrict__ b0, float* __restrict__ b1, '
              'unsigned long long p0, long long end) {\n'
              '  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < end; '
              'i += (long long)gridDim.x * blockDim.x) b0[i] = 2.0f * b1[i] + (float)p0;\n}\n')
    program = device.compile("k_axpy", source)
    ctx = SimpleNamespace(pool=device.pool, events=EventTable())
    n = 1_000_003
    x = torch.randn(n)
    src, dst = Buffer(ctx, dtypes.float32, n), Buffer(ctx, dtypes.float32, n)
    src.write_from_host(x.data_ptr(), x, fresh=True)
    wait = ctx.events.take([src.id, dst.id])
    event = program.launch([dst, src], [3], n, n, wait)
    ctx.events.record([src.id, dst.id], event)
    out = torch.empty(n)
    device.pool.pool_to_host(dst.raw, out.data_ptr(), dst.nbytes, ctx.events.take([dst.id]))
    torch.testing.assert_close(out, 2 * x + 3)


def test_ops_on_the_gpu_match_cpu_torch(gpu):
    x, y = torch.randn(1000, 257), torch.randn(1000, 257)
    w, b = torch.randn(257), torch.randn(257)
    checks = [
        (lambda a, c: F.gelu(a) * torch.sigmoid(c) + a.tanh(), (x, y), 1e-5),
        (lambda a: torch.softmax(a, -1), (x,), 1e-5),
        (lambda a: F.layer_norm(a, (257,), w.to(a.device), b.to(a.device)), (x,), 1e-4),
        (lambda a: (a.sum(-1), a.sum(0), a.var(-1), a.amax(0)), (x,), 1e-4),
        (lambda a, c: a @ c.t(), (x[:64], y[:32]), 1e-4),
        (lambda a: (a.half() * 3).exp().float(), (x / 4,), 1e-2),
        (lambda a: a.bfloat16().sigmoid().float(), (x,), 1e-2),
        (lambda a: (a * 100).long() // 7, (x,), 0),
    ]
    for fn, inputs, tol in checks:
        expect = fn(*inputs)
        got = fn(*(t.to(gpu) for t in inputs))
        expect, got = (v if isinstance(v, tuple) else (v,) for v in (expect, got))
        for e, g in zip(expect, got):
            torch.testing.assert_close(g.cpu(), e, rtol=tol, atol=tol)


def test_copies_with_torch_cuda_tensors_stay_on_the_gpu(gpu):
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA")
    a = torch.randn(4096, 33, device="cuda")
    z = a.to(gpu)
    assert z.device == gpu
    torch.testing.assert_close(z.cpu(), a.cpu())
    back = (z * 2 + 1).to("cuda")
    assert back.device.type == "cuda"
    torch.testing.assert_close(back, a * 2 + 1)
    view = z.t()[3:7].to("cuda")  # a strided view
    torch.testing.assert_close(view, a.t()[3:7])
    target = torch.empty(4096, 33, device="cuda")
    target.copy_(z.neg())
    torch.testing.assert_close(target, -a)
    # The copy is ordered on torch's stream: reusing the source right away is safe.
    a.fill_(7)
    torch.testing.assert_close(z.cpu(), (target * -1).cpu())


def test_copies_between_zyx_devices(gpu):
    others = [ctx for ctx in contexts.devices() if ctx.index != gpu.index]
    if not others:
        pytest.skip("only one zyx device: run with ZYX_BACKENDS=cuda,cpu or on several GPUs")
    x = torch.randn(1234, 7)
    z = x.to(gpu) * 3
    for ctx in others:
        other = torch.device("zyx", ctx.index)
        moved = z.to(other)
        assert moved.device == other
        torch.testing.assert_close(moved.cpu(), x * 3)
        torch.testing.assert_close((moved + 1).to(gpu).cpu(), x * 3 + 1)
        torch.testing.assert_close(z.t()[1:3].to(other).cpu(), (x * 3).t()[1:3])


def test_device_reports_the_gpu(gpu):
    name = torch.zyx.get_device_name(gpu.index)
    assert name.startswith("cuda: ")
    properties = torch.zyx.get_device_properties(gpu.index)
    runtime = contexts.devices()[gpu.index].runtime
    assert properties.multi_processor_count == runtime.compute_units
    free, total = torch.zyx.mem_get_info(gpu.index)
    assert 0 < free <= total == runtime.global_memory
    if torch.cuda.is_available():  # the same GPU as torch's own: the same facts
        ordinal = runtime.ordinal
        theirs = torch.cuda.get_device_properties(ordinal)
        assert torch.cuda.get_device_name(ordinal) in name
        assert (properties.major, properties.minor) == (theirs.major, theirs.minor)
        assert properties.total_memory == theirs.total_memory
        assert properties.multi_processor_count == theirs.multi_processor_count


def test_pool_reuses_memory_in_stream_order_and_frees(gpu):
    import gc

    pool = contexts.devices()[gpu.index].pool
    torch_zyx.synchronize()
    before = pool.allocated
    x = torch.randn(1 << 20).to(gpu)
    grown = pool.allocated
    assert grown == before + (4 << 20)
    y = (x * 2).sum()
    assert y.item() == pytest.approx((x.cpu() * 2).sum().item(), rel=1e-4, abs=1e-2)
    del x, y  # (y: the sum's 4 bytes)
    gc.collect()
    torch_zyx.synchronize()
    assert pool.allocated <= grown - (4 << 20)
    # Freed memory is reused at once (stream order), not held back until the GPU is idle.
    reserved = pool.reserved
    z = torch.randn(1 << 20).to(gpu)
    assert pool.reserved == reserved
    del z
    gc.collect()
    pool.empty_cache()
    assert pool.reserved == pool.allocated
