"""Long runs: device memory and process RSS over many training steps and many different programs.

Run ``python bench/long_run.py`` (``--steps`` and ``--programs`` set the lengths, 10,000 each by
default; ``--markdown`` prints the README table). Two runs in one process:

- training: an MLP (784-256-10, batch 64) trained with Adam for ``--steps`` steps, each read back
  (its loss), as a training loop logging every step does; zyx's pool (allocated, reserved) and
  the process's RSS after 100 warm-up steps and at the end must be flat;
- programs: ``--programs`` small programs that differ in shape and ops (each a new graph, a new
  plan and new kernels for the first of its kind), with the in-memory caches bounded by
  ``ZYX_CACHE_ENTRIES``; RSS at a tenth of the way and at the end.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from torch import nn

import torch_zyx


def _rss_mb() -> float:
    """The process's resident set now (Linux /proc), in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _pool_mb() -> tuple[float, float]:
    return torch.zyx.memory_allocated() / 2**20, torch.zyx.memory_reserved() / 2**20


def training(steps: int) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to("zyx")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 784).to("zyx"), torch.randint(0, 10, (64,)).to("zyx")

    def step() -> float:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(100):
        step()
    start = (_pool_mb(), _rss_mb())
    began = time.perf_counter()
    for _ in range(steps):
        loss = step()
    seconds = time.perf_counter() - began
    return {"start": start, "end": (_pool_mb(), _rss_mb()), "seconds": seconds, "loss": loss}


def programs(count: int) -> dict:
    ops = (lambda a: (a * 1.5 + 1).relu(), lambda a: a.softmax(-1), lambda a: a.sum(0) * 2,
           lambda a: a.cumsum(-1) - a, lambda a: (a @ a.T).tanh(), lambda a: a.flip(0)[1:] + a[:-1])
    gen = torch.Generator().manual_seed(0)
    marks = {}
    for n in range(count):
        rows, cols = 2 + n % 37, 3 + (n // 37) % 41
        a = torch.randn(rows, cols, generator=gen)
        fn = ops[n % len(ops)]
        torch.testing.assert_close(fn(a.to("zyx")).cpu(), fn(a), rtol=1e-4, atol=1e-4)
        if n + 1 in (count // 10, count):
            marks[n + 1] = _rss_mb()
    return {"marks": marks, "counters": torch_zyx.counters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--programs", type=int, default=10_000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    train = training(args.steps)
    many = programs(args.programs)
    (alloc0, res0), rss0 = train["start"]
    (alloc1, res1), rss1 = train["end"]
    first, last = sorted(many["marks"])
    lines = [
        ("case", "at the start", "at the end"),
        (f"training, {args.steps} Adam steps ({train['seconds']:.0f} s): pool allocated / reserved MiB",
         f"{alloc0:.1f} / {res0:.1f}", f"{alloc1:.1f} / {res1:.1f}"),
        ("training: process RSS MiB", f"{rss0:.0f}", f"{rss1:.0f}"),
        (f"{args.programs} different programs: RSS MiB after {first} / after {last}",
         f"{many['marks'][first]:.0f}", f"{many['marks'][last]:.0f}"),
    ]
    counters = many["counters"]
    if args.markdown:
        print("| " + " | ".join(lines[0]) + " |")
        print("| --- | --- | --- |")
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        for line in lines:
            print(f"{line[0]:75s} {line[1]:>16s} {line[2]:>16s}")
    print(f"(kernels compiled {counters['kernels_compiled']}, cache evictions {counters['cache_evictions']}; "
          f"last loss {train['loss']:.4f})")


if __name__ == "__main__":
    main()
