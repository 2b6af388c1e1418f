"""Math benchmarks: transcendental functions on 4M floats, zyx against CPU torch side by side.

Run ``python bench/bench_math.py`` (``--markdown`` prints the table as markdown, ``--only tanh,erf``
picks cases). It measures the CPU renderer's inline math (codegen/llvm_math.py): each case is one
fused elementwise kernel on zyx, against CPU torch's vectorized (Sleef / ATen Vectorized) kernel.
Every case is warmed up and checked against CPU torch once, then timed as the median over
alternating blocks of zyx and CPU torch calls (on a shared machine the speed drifts over seconds;
alternating blocks expose both sides to the same drift), each block after a few untimed calls of
its side (bench.py's ``bench_case`` explains why).

``--stat min`` reports the fastest call of each side instead of the median: on a machine shared
with other jobs the calls that lost a core to them (wall times in scheduler ticks, 4 ms) drop
out. ``--thread-time`` runs both sides on one thread (ZYX_THREADS=1, ``torch.set_num_threads(1)``) and
times them with the thread's CPU clock: what each side computes, without the time the thread
waits for a core. On a box loaded by other jobs wall times come in scheduler ticks (4 ms) while
CPU time stays put.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--thread-time" in sys.argv:
    os.environ["ZYX_THREADS"] = "1"  # read once, when torch_zyx is imported

import torch
import torch.nn.functional as F
from report import add_block_arguments, print_table, threads_line

N = 4 * 1024 * 1024


# (name, fn, input): inputs span the range each function is used on.
def cases():
    gen = torch.Generator().manual_seed(0)
    normal = torch.randn(N, generator=gen) * 3
    positive = torch.rand(N, generator=gen) * 100 + 1e-3
    angles = (torch.rand(N, generator=gen) - 0.5) * 200
    return [
        ("exp", torch.exp, normal),
        ("log", torch.log, positive),
        ("tanh", torch.tanh, normal),
        ("sigmoid", torch.sigmoid, normal),
        ("erf", torch.erf, normal),
        ("sin", torch.sin, angles),
        ("cos", torch.cos, angles),
        ("gelu", F.gelu, normal),
        ("gelu tanh", lambda x: F.gelu(x, approximate="tanh"), normal),
        ("silu", F.silu, normal),
    ]


def _timed(fn, clock, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def bench_case(fn, x, clock, repeats: int, rounds: int, settle: int, stat=statistics.median):
    """``stat`` (median) of the times of zyx and CPU torch over ``rounds`` alternating blocks of
    ``repeats`` calls, each block after ``settle`` untimed calls of its side. zyx's calls end
    with ``torch.zyx.synchronize()`` (the result realized, every kernel finished)."""
    xz = x.to("zyx")
    torch.zyx.synchronize()

    def run_zyx():
        result = fn(xz)  # held until the sync: a dropped lazy result is never computed
        torch.zyx.synchronize()
        return result

    def run_cpu():
        fn(x)

    for _ in range(3):
        run_zyx()
        run_cpu()
    # A fast wrong answer must not show up as a win.
    torch.testing.assert_close(fn(xz).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    t_zyx, t_cpu = [], []
    for _ in range(rounds):
        for _ in range(settle):
            run_zyx()
        t_zyx += _timed(run_zyx, clock, repeats)
        for _ in range(settle):
            run_cpu()
        t_cpu += _timed(run_cpu, clock, repeats)
    return stat(t_zyx), stat(t_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser)
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--stat", choices=("median", "min"), default="median",
                        help="statistic of the timed calls")
    parser.add_argument("--thread-time", action="store_true",
                        help="one thread each side, timed by the thread's CPU clock")
    args = parser.parse_args()
    clock = time.perf_counter
    if args.thread_time:
        torch.set_num_threads(1)
        clock = time.thread_time
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    results = []
    for name, fn, x in cases():
        if only and name not in only:
            continue
        stat = statistics.median if args.stat == "median" else min
        t_zyx, t_cpu = bench_case(fn, x, clock, args.repeats, args.rounds, args.settle, stat)
        results.append((f"{name} 4M f32", t_zyx, t_cpu))
    header = ("case", "zyx ms", "torch ms", "torch / zyx", "ok")
    lines = [(name, f"{t_zyx * 1e3:.2f}", f"{t_cpu * 1e3:.2f}", f"{t_cpu / t_zyx:.2f}x",
              "yes" if t_zyx <= t_cpu else "NO") for name, t_zyx, t_cpu in results]
    clock_name = "thread CPU time" if args.thread_time else "wall time"
    setup = f"{threads_line()}, {clock_name}, {args.stat}"
    print_table(header, lines, f"{setup} of {args.rounds} alternating blocks of {args.repeats} calls, each "
                f"after {args.settle} untimed calls of its side.", args.markdown)


if __name__ == "__main__":
    main()
