"""Benchmarks: zyx against CPU torch eager, side by side, with the ratio to each target.

Run ``python bench/bench.py`` (``make bench``); ``--markdown`` prints the table for README.md.
Every case is warmed up first (kernels compiled and cached, schedule cached), then timed as
the median of several runs; the sync point is ``torch.zyx.synchronize()`` after the call for zyx
(the result realized on the device, every kernel finished, as ``torch.cuda.synchronize()`` in GPU
benchmarks), and the eager result itself for CPU torch; the ".cpu()" cases also read the result
back into a CPU tensor. Results are checked against CPU torch once before timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from report import add_block_arguments, print_table, threads_line


def chain(x):
    # Ten elementwise ops.
    return (((x * 2 + 1).relu() * x - 3) * 0.5 + x).sigmoid() * x + 1


def median_time(fn, repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (also used by bench_training.py)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _run_synced(fn, args):
    # Like torch.cuda.synchronize() in GPU benchmarks: the result is computed on the device
    # (realized into its buffer) and every kernel has finished; no copy to the host is timed.
    result = fn(*args)
    torch.zyx.synchronize()
    return result


def bench_case(name, fn, cpu_args, repeats, warmup=3, rounds=5, settle=3):
    """Median times of zyx and CPU torch over ``rounds`` alternating blocks of ``repeats``
    calls each: on a shared machine the speed drifts over seconds, and alternating blocks
    expose both sides to the same drift. Each block starts with ``settle`` untimed calls of
    its side: the first calls after a switch time the switch, not the op (each side finds its
    data evicted from the cores' caches by the other's, and after each parallel op CPU torch's
    OpenMP threads keep spinning on the cores for a while). On the 2-core box, layer norm
    1024x4096 took ~1.4, ~1.3, ~1.1, ~0.8 ms in the first four calls after a switch and
    ~0.68 ms from then on, zyx and CPU torch alike."""
    zyx_args = [a.to("zyx") for a in cpu_args]
    torch.zyx.synchronize()
    for _ in range(warmup):
        fn(*zyx_args).cpu()
        fn(*cpu_args)
    # Check the result once, so a fast wrong answer never shows up as a win.
    torch.testing.assert_close(fn(*zyx_args).cpu(), fn(*cpu_args), rtol=1e-3, atol=1e-3)
    t_zyx, t_cpu = [], []
    for _ in range(rounds):
        for _ in range(settle):
            _run_synced(fn, zyx_args)
        t_zyx.append(median_time(lambda: _run_synced(fn, zyx_args), repeats))
        for _ in range(settle):
            fn(*cpu_args)
        t_cpu.append(median_time(lambda: fn(*cpu_args), repeats))
    return name, statistics.median(t_zyx), statistics.median(t_cpu)


def _chain_us(x, n_ops: int, rounds: int = 5) -> float:
    """Thread CPU microseconds per op of ``n_ops`` alternating ``* 1.0001`` / ``+ 0.5`` on ``x``
    (the best of ``rounds``). Recording is single-threaded Python: its CPU time is its cost, and
    unlike wall time it does not grow with other jobs on a shared machine."""
    best = float("inf")
    for _ in range(rounds):
        y = x
        start = time.thread_time_ns()
        for i in range(n_ops):
            y = y * 1.0001 if i % 2 else y + 0.5
        best = min(best, time.thread_time_ns() - start)
        del y
        torch.zyx.synchronize()
    return best / n_ops / 1e3


def bench_recording(n_ops: int = 2000) -> float:
    """Microseconds per lazily recorded op: many ops recorded, nothing realized until the end."""
    from torch_zyx.config import CONFIG

    x = torch.randn(64, device="zyx")
    torch.zyx.synchronize()
    old = CONFIG.max_pending
    CONFIG.max_pending = 10 ** 9  # do not let the pending-graph trigger realize mid-way
    try:
        return _chain_us(x, n_ops)
    finally:
        CONFIG.max_pending = old


class _FloorTensor(torch.Tensor):
    """A wrapper subclass whose ``__torch_dispatch__`` does nothing but return a pre-made tensor:
    what any Python-level device pays per op before doing any work (PyTorch's dispatch into
    Python and back)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls):
        return torch.Tensor._make_wrapper_subclass(cls, (64,), dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return args[0]


def bench_dispatch_floor(n_ops: int = 2000) -> float:
    """Microseconds per op of the same chain on ``_FloorTensor`` (the floor of recording)."""
    return _chain_us(_FloorTensor(), n_ops)


# (name, fn, args, target: minimum speedup of zyx over CPU torch)
def cases():
    big, other = torch.randn(4 * 1024 * 1024), torch.randn(4 * 1024 * 1024)
    rows = torch.randn(1024, 4096)
    w, b = torch.randn(4096), torch.randn(4096)
    a, m = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return [
        ("elementwise chain 10 ops, 4M f32", chain, [big], 1.5),
        ("softmax 1024x4096", lambda x: torch.softmax(x, -1), [rows], 1.0),
        ("layer_norm 1024x4096", lambda x, w, b: F.layer_norm(x, (4096,), w, b), [rows, w, b], 1.0),
        ("matmul 1024x1024", lambda x, y: x @ y, [a, m], 0.3),
        # What users time: the result read back with .cpu() (a no-op for CPU torch's result).
        ("gelu chain 4M f32, .cpu()", lambda x, y: (F.gelu(x * 1.5 + y) * torch.sigmoid(y) - x).cpu(),
         [big, other], 1.0),
        ("softmax 1024x4096, .cpu()", lambda x: torch.softmax(x, -1).cpu(), [rows], 1.0),
        ("layer_norm 1024x4096, .cpu()", lambda x: F.layer_norm(x, (4096,)).cpu(), [rows], 1.0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser)
    args = parser.parse_args()
    results = []
    for name, fn, cpu_args, target in cases():
        row = bench_case(name, fn, cpu_args, args.repeats, rounds=args.rounds, settle=args.settle)
        results.append((*row, target))
    record_us = bench_recording()
    floor_us = bench_dispatch_floor()
    header = ("case", "zyx ms", "torch ms", "speedup", "target", "ok")
    lines = []
    for name, t_zyx, t_cpu, target in results:
        speedup = t_cpu / t_zyx
        lines.append((name, f"{t_zyx * 1e3:.2f}", f"{t_cpu * 1e3:.2f}", f"{speedup:.2f}x", f">= {target}x",
                      "yes" if speedup >= target else "NO"))
    lines.append(("recording cost per lazy op", f"{record_us:.1f} us", f"floor {floor_us:.1f} us",
                  f"{record_us / floor_us:.1f}x floor", "<= 30 us", "yes" if record_us <= 30 else "NO"))
    print_table(header, lines, f"{threads_line()}; median over {args.rounds} alternating blocks of {args.repeats} "
                f"calls, each after {args.settle} untimed calls of its side.", args.markdown)


if __name__ == "__main__":
    main()
