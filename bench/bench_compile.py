"""torch.compile benchmarks: CPU torch eager, Inductor, and zyx compiled, side by side in one run.

Run ``python bench/bench_compile.py`` (``--markdown`` prints the table for README.md). Each case
times, in alternating blocks (as bench.py does), CPU torch eager, ``torch.compile`` with
Inductor on CPU tensors, ``torch.compile(backend="zyx")`` on CPU tensors (zyx's CPU backend
reads and writes the tensors in place) and on zyx tensors (synchronized after each call, as
``torch.cuda.synchronize()`` in GPU benchmarks). Every variant is compiled and warmed up before
timing, and its result checked against eager CPU torch once. The last row is the Python cost of
one call of a compiled 10-kernel graph on tiny zyx tensors (Dynamo's guards, AOTAutograd's
wrapper and zyx's plan launch; kernels of a few elements each).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

import torch_zyx

VARIANTS = ("eager", "inductor", "zyx-cpu", "zyx")


def chain(x, y):
    return (F.gelu(x * 1.5 + y) * torch.sigmoid(y) - x).relu() * 0.5 + y


def time_blocks(fns: dict, repeats: int, rounds: int, settle: int = 2) -> dict:
    """Median seconds per call of each function over ``rounds`` alternating blocks."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(settle):
                fn()
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            samples[name].append((time.perf_counter() - start) / repeats)
    return {name: statistics.median(values) for name, values in samples.items()}


def _synced(fn):
    def run():
        out = fn()
        torch.zyx.synchronize()
        return out
    return run


def case_chain(n: int):
    x, y = torch.randn(n), torch.randn(n)
    xz, yz = x.to("zyx"), y.to("zyx")
    inductor = torch.compile(chain)
    zyx = torch.compile(chain, backend="zyx")
    expected = chain(x, y)
    for out in (inductor(x, y), zyx(x, y), zyx(xz, yz)):
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    return {"eager": lambda: chain(x, y), "inductor": lambda: inductor(x, y),
            "zyx-cpu": lambda: zyx(x, y), "zyx": _synced(lambda: zyx(xz, yz))}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def case_mlp_adam(batch: int = 256):
    """One Adam step of an MLP 784-512-512-10: the model compiled (forward and backward), the
    optimizer's step eager (foreach) on the model's device."""
    x, labels = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
    steps = {}
    for name, device, backend in (("eager", "cpu", None), ("inductor", "cpu", "inductor"),
                                  ("zyx-cpu", "cpu", "zyx"), ("zyx", "zyx", "zyx")):
        model = _mlp().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        run = model if backend is None else torch.compile(model, backend=backend)
        xd, ld = x.to(device), labels.to(device)

        def step(run=run, opt=opt, xd=xd, ld=ld):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(run(xd), ld)
            loss.backward()
            opt.step()
            return loss

        steps[name] = _synced(step) if device == "zyx" else step
    return steps


def case_transformer(batch: int = 8, seq: int = 256, d_model: int = 512):
    """TransformerEncoderLayer (d512, 8 heads) forward and backward."""
    torch.manual_seed(0)
    base = nn.TransformerEncoderLayer(d_model, 8, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True)
    x = torch.randn(batch, seq, d_model)
    steps = {}
    for name, device, backend in (("eager", "cpu", None), ("inductor", "cpu", "inductor"),
                                  ("zyx-cpu", "cpu", "zyx"), ("zyx", "zyx", "zyx")):
        layer = copy.deepcopy(base).to(device)
        run = layer if backend is None else torch.compile(layer, backend=backend)
        xd = x.to(device)

        def step(run=run, layer=layer, xd=xd):
            for p in layer.parameters():
                p.grad = None
            out = run(xd)
            out.sum().backward()
            return out

        steps[name] = _synced(step) if device == "zyx" else step
    return steps


def call_overhead_us(calls: int = 2000) -> float:
    """Microseconds per call of a compiled 10-kernel graph on tiny zyx tensors, not synchronized
    (the cost of the call path: the kernels of 16 elements each take a few microseconds)."""
    def ten_kernels(x):
        for _ in range(10):
            x = (x - x.mean()) * 1.01  # a reduce, then its broadcast: a kernel boundary each
        return x

    fn = torch.compile(ten_kernels, backend="zyx")
    x = torch.randn(16).to("zyx")
    torch.testing.assert_close(fn(x).cpu(), ten_kernels(x.cpu()), rtol=1e-4, atol=1e-5)
    torch_zyx.reset_counters()
    fn(x)
    kernels = torch_zyx.counters()["kernels_launched"]
    torch.zyx.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn(x)
        torch.zyx.synchronize()
        samples.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(samples), kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=1 << 22, help="elements of the chain's tensors")
    parser.add_argument("--skip", default="", help="comma-separated cases to skip: chain,mlp,transformer")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    skip = set(filter(None, args.skip.split(",")))
    cases = [("chain", f"elementwise chain, 8 ops, {args.size:,} float32", lambda: case_chain(args.size), 10),
             ("mlp", "MLP 784-512-512-10 Adam step, batch 256", case_mlp_adam, 5),
             ("transformer", "TransformerEncoderLayer d512 fwd+bwd, 8x256", case_transformer, 1)]
    rows = []
    for key, title, make, repeats in cases:
        if key in skip:
            continue
        fns = make()
        for fn in fns.values():  # compile and warm up every variant before any timing
            for _ in range(3):
                fn()
        times = time_blocks(fns, repeats, args.rounds)
        rows.append((title, times))
        print(f"{title}: " + ", ".join(f"{name} {times[name] * 1e3:.3f} ms" for name in VARIANTS)
              + f"; inductor / zyx-cpu {times['inductor'] / times['zyx-cpu']:.2f}x, "
              f"inductor / zyx {times['inductor'] / times['zyx']:.2f}x", flush=True)
    overhead, kernels = call_overhead_us()
    print(f"compiled {kernels}-kernel graph, call path: {overhead:.1f} us per call")
    if args.markdown:
        print("\n| case | eager ms | Inductor ms | zyx (CPU tensors) ms | zyx (zyx tensors) ms "
              "| Inductor / zyx CPU | Inductor / zyx |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for title, t in rows:
            print(f"| {title} | {t['eager'] * 1e3:.3f} | {t['inductor'] * 1e3:.3f} | {t['zyx-cpu'] * 1e3:.3f} | "
                  f"{t['zyx'] * 1e3:.3f} | {t['inductor'] / t['zyx-cpu']:.2f}x | {t['inductor'] / t['zyx']:.2f}x |")
        print(f"| call of a compiled {kernels}-kernel graph | | | | {overhead:.1f} us | | |")
    print(f"(torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {args.rounds} "
          "alternating blocks; above 1x zyx is faster)")


if __name__ == "__main__":
    main()
