"""Many shapes: a loop whose every iteration has new sizes, on zyx and on CPU torch, cold.

Run ``python bench/many_shapes.py`` (``--runs`` processes per side, interleaved; ``--shapes``
iterations; ``--markdown`` prints the README row). The loop is the body of PyTorch's
``test_index_put_accumulate_duplicate_indices``: indices from a random walk whose extent is read
back (``.item()`` through ``torch.randn``'s size), then ``index_put(..., accumulate=True)``
checked against a Python loop over ``tolist()``; iteration ``i`` has ``i`` indices, so every
iteration is a new graph (two realizations, each a schedule-cache miss on zyx). Each timed pass
runs in a fresh process with an empty kernel cache (``ZYX_CACHE_DIR``), as a test process
starts (after two iterations on CPU torch, which pay torch's own first-call costs, as the
tests before it did in a test process). The zyx process then runs the loop again with the schedule cache holding every plan
(``ZYX_CACHE_ENTRIES`` raised): that second pass is what the loop costs once its plans exist,
the floor a shape-generic plan could reach.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def loop(device: str, shapes: int) -> float:
    import torch

    torch.manual_seed(0)
    start = time.perf_counter()
    for i in range(1, shapes + 1):
        delta = torch.empty(i, dtype=torch.double, device=device).uniform_(-1, 1)
        indices = delta.cumsum(0).long()
        source = torch.randn(indices.abs().max() + 1, device=device)
        values = torch.randn(indices.size(0), device=device)
        output = source.index_put((indices,), values, accumulate=True)
        expected = source.tolist()
        for index, value in zip(indices.tolist(), values.tolist()):
            expected[index] += value
        torch.testing.assert_close(output.cpu(), torch.tensor(expected))
    return time.perf_counter() - start


def child(device: str, shapes: int) -> None:
    import torch_zyx

    loop("cpu", 2)  # (torch's own first-call costs, which the test process paid long before)
    result = {"cold": loop(device, shapes)}
    if device == "zyx":
        counters = torch_zyx.counters()
        result["compiled"] = counters["kernels_compiled"]
        result["misses"] = counters["schedule_cache_misses"]
        result["warm"] = loop(device, shapes)
    print(json.dumps(result))


def run(device: str, shapes: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ZYX_CACHE_DIR=cache, ZYX_CACHE_ENTRIES=str(4 * shapes + 64))
        out = subprocess.run([sys.executable, __file__, "--child", device, "--shapes", str(shapes)],
                             env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=511)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--child", choices=("cpu", "zyx"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.shapes)
        return
    results = []
    for _ in range(args.runs):  # (interleaved: the machine's noise falls on both sides)
        results.append((run("cpu", args.shapes), run("zyx", args.shapes)))
    ratios = sorted(z["cold"] / c["cold"] for c, z in results)
    cpu_ms = statistics.median(c["cold"] for c, _ in results) * 1e3
    zyx_ms = statistics.median(z["cold"] for _, z in results) * 1e3
    warm_ms = statistics.median(z["warm"] for _, z in results) * 1e3
    zyx = results[0][1]
    if args.markdown:
        print(f"| index_put accumulate, {args.shapes} shapes, cold | {zyx_ms:.0f} | {cpu_ms:.0f} | "
              f"{statistics.median(ratios):.1f}x | {ratios[0]:.1f}-{ratios[-1]:.1f}x | {warm_ms:.0f} |")
    else:
        print(f"{args.shapes} shapes: zyx {zyx_ms:.0f} ms, CPU torch {cpu_ms:.0f} ms, zyx/CPU torch "
              f"{statistics.median(ratios):.1f}x (range {ratios[0]:.1f}-{ratios[-1]:.1f}x over {args.runs} runs); "
              f"zyx with its plans cached {warm_ms:.0f} ms; {zyx['misses']} schedule misses, "
              f"{zyx['compiled']} kernels compiled")


if __name__ == "__main__":
    main()
