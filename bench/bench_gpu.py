"""GPU benchmark: zyx on a CUDA device against torch CUDA eager and torch.compile (Inductor).

Run on a machine with an NVIDIA GPU and the ``cuda`` extra installed::

    .venv/bin/python bench/bench_gpu.py [--markdown] [--rounds 5] [--repeats 10] [--scale 1]

The zyx devices come from ``ZYX_BACKENDS`` (default here ``cuda,cpu``); the first CUDA one is
used, and the CPU device measures the recording cost next to it. Each case is checked once
against torch CUDA eager, warmed up (zyx: kernels compiled and the plan cached; Inductor: the
graph compiled), then timed as the median over ``--rounds`` interleaved blocks (zyx, eager,
compiled, each block ``--repeats`` calls after a few untimed ones) of each block's median. A
call's time is wall time up to its side's synchronization (``torch.zyx.synchronize()``,
``torch.cuda.synchronize()``), so launch and recording overheads count.

GB/s counts the bytes an ideal kernel moves (each input read once, each output written once).
The reference is the copy bandwidth this script measures on the same GPU (torch's
device-to-device ``copy_`` of a 1 GiB tensor: read + write). Targets (DESIGN.md, the CUDA issue):

- the chain (gelu/sigmoid over 64M f32: two inputs, one output) at >= 80% of the copy
  bandwidth and at least Inductor's throughput;
- softmax and layer_norm 8192x4096 no slower than CUDA eager;
- sum over the rows and over the columns of 8192x8192 f32 at >= 75% of the copy bandwidth;
- recording cost per lazy op on the CUDA device no higher than on the CPU device;
- the MLP Adam step (784-512-512-10, batch 256) reported.

A second table times matrix products against cuBLAS (torch CUDA eager, float32 without tf32):
4096^3 float32 (target >= 70% of cuBLAS) and bfloat16 (>= 60%), and ``gelu(x @ w + b)`` fused
(at least cuBLAS plus eager's epilogue; the GPU kernels issue); and scaled dot-product
attention's forward in bfloat16 against torch's SDPA kernel (>= 50% of its throughput). The
first table also has a TransformerEncoderLayer's forward and backward (target: at most 1.5x
CUDA eager's time).

A third table times ``torch.compile``: the chain compiled with ``backend="zyx"`` on torch
``cuda`` tensors (run by zyx's CUDA device in their memory) against Inductor on the same tensors,
and the MLP Adam step with the model compiled by each backend (zyx's on ``zyx`` tensors: a CUDA
backward cannot run in a process that loaded zyx, see ``serve_torch_training``); target (the
torch.compile issue): no slower than Inductor.

``--scale 0.25`` shrinks every tensor (a GPU with little memory, or a quick look).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import time

from report import print_table


def _arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved blocks per side (>= 3)")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per block")
    parser.add_argument("--settle", type=int, default=2, help="untimed calls before each block")
    parser.add_argument("--scale", type=float, default=1.0, help="scale every tensor's size")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (Inductor)")
    parser.add_argument("--cases", default="", help="comma-separated substrings of case names to run")
    parser.add_argument("--torch-training-side", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.torch_training_side:
        serve_torch_training(args)
        return
    os.environ.setdefault("ZYX_BACKENDS", "cuda,cpu")
    import torch  # after ZYX_BACKENDS: importing torch loads torch_zyx

    from torch_zyx.execute import contexts

    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu: this torch build has no CUDA (install a CUDA build of torch)")
    devices = contexts.devices()
    gpu = next((ctx for ctx in devices if ctx.runtime.renderer == "cuda"), None)
    if gpu is None:
        reason = contexts.cuda_unavailable() or "ZYX_BACKENDS has no cuda"
        raise SystemExit(f"bench_gpu: no zyx CUDA device: {reason}")
    cpu = next((ctx for ctx in devices if ctx.runtime.renderer == "llvm"), None)
    zyx = torch.device("zyx", gpu.index)
    cuda = torch.device("cuda", gpu.runtime.ordinal)
    torch.cuda.set_device(cuda)
    print(f"zyx:{gpu.index} {gpu.runtime.describe()}; torch {torch.__version__} on "
          f"{torch.cuda.get_device_name(cuda)}")
    Bench(torch, args, zyx, cuda, cpu).run()


def block(fn, inputs, sync, args) -> float:
    """Median seconds of ``args.repeats`` calls, after ``args.settle`` untimed ones."""
    for _ in range(args.settle):
        result = fn(*inputs)
        sync()
        del result
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = fn(*inputs)  # held through the sync: a lazy result nobody holds is never computed
        sync()
        times.append(time.perf_counter() - start)
        del result
    return statistics.median(times)


def mlp_and_data(torch):
    """The MLP 784-512-512-10 (seeded weights), a batch of 256 and its labels, on the CPU."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    gen = torch.Generator().manual_seed(0)
    return model, torch.randn(256, 784, generator=gen), torch.randint(0, 10, (256,), generator=gen)


def adam_step(torch, model, x, y, device, compiled=False, backend="inductor"):
    """One training step's function (zero_grad, forward, cross entropy, backward, Adam) of a
    copy of ``model`` on ``device``; ``compiled``: the model through torch.compile."""
    net = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    forward = torch.compile(net, backend=backend) if compiled else net
    xs, ys = x.to(device), y.to(device)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(xs), ys)
        loss.backward()
        opt.step()
        return loss

    return step


def transformer_step(torch, device):
    """One forward and backward of a TransformerEncoderLayer (d512, 8 heads, seq 256, batch 8,
    float32, no dropout) on ``device``: the step's function."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, dropout=0.0, batch_first=True).to(device)
    x = torch.randn(8, 256, 512, generator=torch.Generator().manual_seed(0)).to(device)

    def step():
        layer.zero_grad(set_to_none=True)
        loss = layer(x).square().mean()
        loss.backward()
        return loss

    return step


def serve_torch_training(args) -> None:
    """The torch CUDA side of the training case, in a process without zyx: while a PrivateUse1
    backend is registered, PyTorch (2.8 on) makes it the process's only accelerator and its
    autograd engine fails every backward over ``cuda`` tensors (pytorch/pytorch#161129). Reads
    a side's name per line (``eager``, ``inductor``), answers that side's block time."""
    import torch

    model, x, y = mlp_and_data(torch)
    cuda = torch.device("cuda", torch.cuda.current_device())
    steps = {"eager": adam_step(torch, model, x, y, cuda), "transformer eager": transformer_step(torch, cuda)}
    if not args.no_compile:
        steps["inductor"] = adam_step(torch, model, x, y, cuda, compiled=True)
    for step in steps.values():  # warm up (Inductor: forward and backward compiled)
        for _ in range(3):
            step()
    torch.cuda.synchronize()
    print("ready", flush=True)
    for line in sys.stdin:
        seconds = block(steps[line.strip()], (), torch.cuda.synchronize, args)
        print(seconds, flush=True)


class TorchTrainingSide:
    """The parent's handle on ``serve_torch_training``'s process (same arguments, no zyx)."""

    def __init__(self, args):
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        command = [sys.executable, os.path.abspath(__file__), "--torch-training-side",
                   "--repeats", str(args.repeats), "--settle", str(args.settle)]
        if args.no_compile:
            command.append("--no-compile")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=env)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("bench_gpu: the torch training side did not start")

    def side(self, name: str):
        def one_block() -> float:
            self.process.stdin.write(name + "\n")
            self.process.stdin.flush()
            return float(self.process.stdout.readline())

        return one_block

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


class Bench:
    def __init__(self, torch, args, zyx, cuda, cpu_ctx):
        self.torch, self.args, self.zyx, self.cuda, self.cpu_ctx = torch, args, zyx, cuda, cpu_ctx
        self.rows: list[tuple] = []

    # ------------------------------------------------------------------ timing

    def _sync_zyx(self):
        self.torch.zyx.synchronize()

    def _sync_cuda(self):
        self.torch.cuda.synchronize(self.cuda)

    def timed(self, sides: dict) -> dict:
        """``sides``: name → (fn, inputs, sync), or name → a callable giving one block's time
        (a side timed in another process). Interleaved blocks, median of block medians."""
        times: dict = {name: [] for name in sides}
        for _ in range(max(3, self.args.rounds)):
            for name, side in sides.items():
                times[name].append(side() if callable(side) else block(*side, self.args))
        return {name: statistics.median(values) for name, values in times.items()}

    # ------------------------------------------------------------------ cases

    def size(self, n: int) -> int:
        return max(1024, int(n * self.args.scale))

    def copy_bandwidth(self) -> float:
        """GB/s of torch's device-to-device copy of 1 GiB (read + write)."""
        torch = self.torch
        n = self.size(1 << 28)
        src = torch.randn(n, device=self.cuda)
        dst = torch.empty_like(src)
        t = self.timed({"copy": (lambda a, b: b.copy_(a), (src, dst), self._sync_cuda)})["copy"]
        # zyx's side: the simplest kernel that reads and writes every element (a clone of a
        # realized tensor copies nothing: zyx shares the buffer until one of them is written).
        zyx_src = src.to(self.zyx)
        t_zyx = self.timed({"zyx": (lambda a: a + 1, (zyx_src,), self._sync_zyx)})["zyx"]
        gbs = 2 * src.nbytes / t / 1e9
        self.rows.append(("copy 1 GiB f32 (reference; zyx: x + 1)", t_zyx, t, None, 2 * src.nbytes, None,
                          "the reference bandwidth"))
        del src, dst, zyx_src
        return gbs

    def wanted(self, name: str) -> bool:
        """Whether ``--cases`` (comma-separated substrings; empty: all) selects the case ``name``."""
        return not self.args.cases or any(part and part in name for part in self.args.cases.split(","))

    def case(self, name: str, fn, make_inputs, nbytes: int, target: str, tol: float = 1e-3):
        if not self.wanted(name):
            return
        torch = self.torch
        inputs = make_inputs()
        zyx_inputs = [t.to(self.zyx) for t in inputs]
        expect = fn(*inputs)
        got = fn(*zyx_inputs)
        # Checked first: a fast wrong answer is no win.
        torch.testing.assert_close(got.cpu(), expect.cpu(), rtol=tol, atol=tol)
        del got, expect
        sides = {"zyx": (fn, zyx_inputs, self._sync_zyx), "eager": (fn, inputs, self._sync_cuda)}
        if not self.args.no_compile:
            compiled = torch.compile(fn)
            compiled(*inputs)  # compile before timing
            self._sync_cuda()
            sides["inductor"] = (compiled, inputs, self._sync_cuda)
        times = self.timed(sides)
        self.rows.append((name, times["zyx"], times["eager"], times.get("inductor"), nbytes, target, ""))
        print(f"  {name}: " + ", ".join(f"{side} {t * 1e3:.3f} ms" for side, t in times.items()),
              file=sys.stderr, flush=True)

    def run(self) -> None:
        torch, F = self.torch, self.torch.nn.functional
        copy_gbs = self.copy_bandwidth()
        gen = torch.Generator(device=self.cuda).manual_seed(0)

        def randn(*shape):
            return torch.randn(*shape, device=self.cuda, generator=gen)

        n = self.size(64 << 20)
        self.case("gelu/sigmoid chain, 64M f32 (2 in, 1 out)", lambda a, b: F.gelu(a) * torch.sigmoid(b) + a,
                  lambda: (randn(n), randn(n)), 3 * 4 * n,
                  f">= 80% copy ({0.8 * copy_gbs:.0f} GB/s), >= inductor")
        rows, cols = self.size(8192 * 4096) // 4096, 4096
        self.case(f"softmax {rows}x{cols}", lambda x: torch.softmax(x, -1), lambda: (randn(rows, cols),),
                  2 * 4 * rows * cols, "<= eager time")
        self.case(f"layer_norm {rows}x{cols}", lambda x, w, b: F.layer_norm(x, (cols,), w, b),
                  lambda: (randn(rows, cols), randn(cols), randn(cols)), 2 * 4 * rows * cols, "<= eager time")
        side = int(self.size(8192 * 8192) ** 0.5)
        self.case(f"sum over rows {side}x{side}", lambda x: x.sum(-1), lambda: (randn(side, side),),
                  4 * side * side, f">= 75% copy ({0.75 * copy_gbs:.0f} GB/s)", tol=1e-2)
        self.case(f"sum over columns {side}x{side}", lambda x: x.sum(0), lambda: (randn(side, side),),
                  4 * side * side, f">= 75% copy ({0.75 * copy_gbs:.0f} GB/s)", tol=1e-2)
        mlp = self.mlp_step()
        self.transformer()
        record = self.recording()
        self.report(copy_gbs, mlp, record)
        self.report_matmuls(self.matmul_cases(randn))
        if not self.args.no_compile:
            self.report_compiled(self.compiled_cases(n, randn))

    def matmul_cases(self, randn) -> list[tuple]:
        """(case, zyx s, cuBLAS s, flops, target) for the matrix products, each checked first."""
        torch, F = self.torch, self.torch.nn.functional
        side = max(256, int(4096 * self.args.scale ** (1 / 3)) // 256 * 256)
        flops = 2 * side ** 3
        # (name, function, dtype, tolerance, target, whether it takes a bias)
        cases = [(f"matmul {side}^3 f32", lambda a, b: a @ b, torch.float32, 2e-3, ">= 70% of cuBLAS", False),
                 (f"matmul {side}^3 bf16", lambda a, b: a @ b, torch.bfloat16, 3e-2, ">= 60% of cuBLAS", False),
                 (f"gelu(x @ w + b) {side}^3 f32", lambda a, b, c: F.gelu(a @ b + c), torch.float32, 2e-3,
                  "<= cuBLAS + eager epilogue", True)]
        rows = []
        for name, fn, dtype, tol, target, bias in cases:
            if not self.wanted(name):
                continue
            inputs = [randn(side, side).to(dtype), randn(side, side).to(dtype)]
            if bias:
                inputs.append(randn(side).to(dtype))
            zyx_inputs = [t.to(self.zyx) for t in inputs]
            expect = fn(*[t.double() for t in inputs])
            got = fn(*zyx_inputs).cpu().double()
            error = ((got - expect.cpu()).norm() / expect.norm().cpu()).item()
            if not error < tol:
                raise AssertionError(f"{name}: relative error {error:.2e} (tolerance {tol})")
            times = self.timed({"zyx": (fn, zyx_inputs, self._sync_zyx), "eager": (fn, inputs, self._sync_cuda)})
            rows.append((name, times["zyx"], times["eager"], flops, target))
            print(f"  {name}: zyx {times['zyx'] * 1e3:.3f} ms, eager {times['eager'] * 1e3:.3f} ms "
                  f"(relative error {error:.1e})", file=sys.stderr, flush=True)
            del inputs, zyx_inputs, expect, got
        return rows + self.attention_cases(randn)

    def attention_cases(self, randn) -> list[tuple]:
        """F.scaled_dot_product_attention forward, bfloat16 (batch 8, 16 heads, seq 1024, head 64):
        zyx's fused kernel against torch's (flash attention), each checked first."""
        torch, F = self.torch, self.torch.nn.functional
        rows = []
        batch, heads, length, depth = 8, 16, max(128, int(1024 * self.args.scale ** 0.5)), 64
        for causal in (False, True):
            name = f"sdpa {batch}x{heads}x{length}x{depth} bf16{' causal' if causal else ''}"
            if not self.wanted(name):
                continue
            inputs = [randn(batch, heads, length, depth).to(torch.bfloat16) for _ in range(3)]
            zyx_inputs = [t.to(self.zyx) for t in inputs]

            def fn(q, k, v, causal=causal):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            expect = fn(*[t.float() for t in inputs]).double()
            got = fn(*zyx_inputs).cpu().double()
            error = ((got - expect.cpu()).norm() / expect.norm().cpu()).item()
            if not error < 1e-2:
                raise AssertionError(f"{name}: relative error {error:.2e} (tolerance 1e-2)")
            times = self.timed({"zyx": (fn, zyx_inputs, self._sync_zyx),
                                "eager": (fn, inputs, self._sync_cuda)})
            flops = 4 * batch * heads * length * length * depth // (2 if causal else 1)
            rows.append((name, times["zyx"], times["eager"], flops, ">= 50% of torch's SDPA"))
            print(f"  {name}: zyx {times['zyx'] * 1e3:.3f} ms, eager {times['eager'] * 1e3:.3f} ms "
                  f"(relative error {error:.1e})", file=sys.stderr, flush=True)
            del inputs, zyx_inputs, expect, got
        return rows

    def report_matmuls(self, rows: list[tuple]) -> None:
        lines = [(name, f"{t_zyx * 1e3:.3f}", f"{t_eager * 1e3:.3f}", f"{flops / t_zyx / 1e12:.1f}",
                  f"{flops / t_eager / 1e12:.1f}", f"{t_eager / t_zyx:.0%}", target)
                 for name, t_zyx, t_eager, flops, target in rows]
        print_table(("matmul case", "zyx ms", "cuBLAS ms", "zyx TFLOP/s", "cuBLAS TFLOP/s", "zyx/cuBLAS",
                     "target"), lines, "eager: torch CUDA (cuBLAS; float32 without tf32); same timing as above",
                    self.args.markdown)

    def compiled_cases(self, n: int, randn) -> list[tuple]:
        """(case, zyx backend s, Inductor s) for the chain on ``cuda`` tensors and the MLP step."""
        torch, F = self.torch, self.torch.nn.functional
        rows = []
        if not self.args.cases or "chain" in self.args.cases:
            def fn(a, b):
                return F.gelu(a) * torch.sigmoid(b) + a

            inputs = (randn(n), randn(n))
            zyx, inductor = torch.compile(fn, backend="zyx"), torch.compile(fn)
            torch.testing.assert_close(zyx(*inputs), inductor(*inputs), rtol=1e-3, atol=1e-3)
            times = self.timed({"zyx": (zyx, inputs, self._sync_cuda),
                                "inductor": (inductor, inputs, self._sync_cuda)})
            rows.append(("gelu/sigmoid chain, 64M f32, cuda tensors", times["zyx"], times["inductor"]))
        if not self.args.cases or "mlp" in self.args.cases.lower():
            model, x, y = mlp_and_data(torch)
            step = adam_step(torch, model, x, y, self.zyx, compiled=True, backend="zyx")
            for _ in range(3):
                step()
            self._sync_zyx()
            other = TorchTrainingSide(self.args)
            try:
                times = self.timed({"zyx": (step, (), self._sync_zyx), "inductor": other.side("inductor")})
            finally:
                other.close()
            rows.append(("MLP Adam step, model compiled (zyx: zyx tensors)", times["zyx"], times["inductor"]))
        return rows

    def report_compiled(self, rows: list[tuple]) -> None:
        lines = [(name, f"{t_zyx * 1e3:.3f}", f"{t_ind * 1e3:.3f}", f"{t_ind / t_zyx:.2f}x", "<= inductor time")
                 for name, t_zyx, t_ind in rows]
        print_table(("torch.compile case", "zyx backend ms", "inductor ms", "inductor/zyx", "target"), lines,
                    "each side compiled and warmed up first; same timing as above", self.args.markdown)

    def mlp_step(self) -> tuple[float, float, float | None] | None:
        """Seconds per Adam step of the MLP 784-512-512-10, batch 256: zyx, eager, compiled
        (torch's two in a process without zyx, ``serve_torch_training``)."""
        if self.args.cases and "mlp" not in self.args.cases.lower():
            return None
        torch = self.torch
        model, x, y = mlp_and_data(torch)
        step = adam_step(torch, model, x, y, self.zyx)
        for _ in range(3):  # warm up: every plan of a step cached
            step()
        self._sync_zyx()
        other = TorchTrainingSide(self.args)
        try:
            sides = {"zyx": (step, (), self._sync_zyx), "eager": other.side("eager")}
            if not self.args.no_compile:
                sides["inductor"] = other.side("inductor")
            times = self.timed(sides)
        finally:
            other.close()
        return times["zyx"], times["eager"], times.get("inductor")

    def transformer(self) -> None:
        """The TransformerEncoderLayer's forward and backward (``transformer_step``): zyx against
        CUDA eager in the training side's process."""
        if not self.wanted("transformer"):
            return
        step = transformer_step(self.torch, self.zyx)
        for _ in range(3):
            step()
        self._sync_zyx()
        other = TorchTrainingSide(self.args)
        try:
            times = self.timed({"zyx": (step, (), self._sync_zyx), "eager": other.side("transformer eager")})
        finally:
            other.close()
        self.rows.append(("TransformerEncoderLayer d512 fwd+bwd (8x256)", times["zyx"], times["eager"], None,
                          0, "<= 1.5x eager time", ""))
        print(f"  transformer: zyx {times['zyx'] * 1e3:.3f} ms, eager {times['eager'] * 1e3:.3f} ms",
              file=sys.stderr, flush=True)

    def recording(self) -> tuple[float, float | None]:
        """Thread CPU microseconds per lazily recorded op on the CUDA device and on the CPU
        device (best of five chains of 2000 ops, nothing realized mid-way)."""
        torch = self.torch
        from torch_zyx.config import CONFIG

        def per_op(device) -> float:
            x = torch.randn(64).to(device)
            self._sync_zyx()
            best = float("inf")
            old, CONFIG.max_pending = CONFIG.max_pending, 10 ** 9
            try:
                for _ in range(5):
                    y = x
                    start = time.thread_time_ns()
                    for i in range(2000):
                        y = y * 1.0001 if i % 2 else y + 0.5
                    best = min(best, time.thread_time_ns() - start)
                    del y
                    self._sync_zyx()
            finally:
                CONFIG.max_pending = old
            return best / 2000 / 1e3

        on_cpu = per_op(torch.device("zyx", self.cpu_ctx.index)) if self.cpu_ctx is not None else None
        return per_op(self.zyx), on_cpu

    # ------------------------------------------------------------------ report

    def report(self, copy_gbs: float, mlp, record) -> None:
        header = ("case", "zyx ms", "eager ms", "inductor ms", "zyx GB/s", "zyx/copy", "eager/zyx",
                  "inductor/zyx", "target")
        lines = []
        for name, t_zyx, t_eager, t_ind, nbytes, target, note in self.rows:
            gbs = nbytes / t_zyx / 1e9
            lines.append((name, f"{t_zyx * 1e3:.3f}", f"{t_eager * 1e3:.3f}",
                          f"{t_ind * 1e3:.3f}" if t_ind else "-", f"{gbs:.0f}",
                          f"{gbs / copy_gbs:.0%}", f"{t_eager / t_zyx:.2f}x",
                          f"{t_ind / t_zyx:.2f}x" if t_ind else "-", target or note))
        if mlp is not None:
            t_zyx, t_eager, t_ind = mlp
            lines.append(("MLP 784-512-512-10 Adam step, batch 256", f"{t_zyx * 1e3:.3f}",
                          f"{t_eager * 1e3:.3f}",
                          f"{t_ind * 1e3:.3f}" if t_ind else "-", "-", "-", f"{t_eager / t_zyx:.2f}x",
                          f"{t_ind / t_zyx:.2f}x" if t_ind else "-", "reported"))
        on_gpu, on_cpu = record
        lines.append(("recording cost per lazy op", f"{on_gpu:.1f} us", "-", "-", "-", "-", "-", "-",
                      f"<= CPU device's {on_cpu:.1f} us" if on_cpu is not None else "(no CPU device)"))
        footer = (f"copy bandwidth (torch device-to-device copy_): {copy_gbs:.0f} GB/s; median over "
                  f"{max(3, self.args.rounds)} interleaved blocks of {self.args.repeats} calls, each after "
                  f"{self.args.settle} untimed calls of its side; ratios > 1x: zyx faster")
        print_table(header, lines, footer, self.args.markdown)


if __name__ == "__main__":
    main()
