"""Demo (``python -m torch_zyx.demo``, ``make demo``): what zyx is for, measured against CPU torch.

Two parts, both compared with CPU torch on the same inputs:

1. A chain of elementwise ops. CPU torch runs each op as its own pass over memory, with a
   temporary tensor between ops; zyx records the chain lazily and runs it as one fused kernel.
   The demo prints the kernels zyx launched for it (from ``torch_zyx.counters()``), the first
   call's time (which includes compiling the kernel) and the warm, steady-state time of both,
   timed interleaved.
2. A small MLP trained with ``torch.optim.SGD`` on zyx and on the CPU from the same initial
   weights and data: the losses side by side, the kernels zyx launches per step once warm, and
   the largest weight difference at the end, checked against a tolerance.

The process exits with status 1 when a result does not match CPU torch within its tolerance,
so tests (tests/test_tools.py) can run it as a check, not only as a printout.
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_zyx
from torch_zyx.config import CONFIG

# The chain's inputs: 4 Mi float32 each (16 MiB; with the output and CPU torch's temporaries
# more than the caches hold), so its time is memory traffic, which is what fusing saves.
CHAIN_NUMEL = 1 << 22
CHAIN_TEXT = "silu(x * 1.5 + y) * sigmoid(y) - x"
CHAIN_OPS = 6  # mul, add, silu, sigmoid, mul, sub: CPU torch's passes over memory
# Interleaved timing: REPEATS blocks of CALLS timed calls per side, alternating zyx and torch,
# each block after one untimed call (the first call after a switch finds the other side's data
# in the caches). Median of the blocks' per-call times.
REPEATS = 7
CALLS = 5
# zyx computes silu and sigmoid with its own float32 code, in one fused expression, so an
# element can differ from CPU torch's in its last bits (measured: ~1e-6 at values up to ~10).
CHAIN_RTOL = CHAIN_ATOL = 1e-5

STEPS = 40
LOG_EVERY = 5
LR = 0.1
MOMENTUM = 0.9
# Weights are O(0.1-1); one float32 rounding there is ~1e-8-1e-7 (measured difference after 40
# steps: ~1e-7). The tolerances leave room for rounding differences that SGD carries from step
# to step on other CPUs and thread counts, and are still far below what a wrong result gives.
WEIGHT_ATOL = 1e-5
LOSS_RTOL = 1e-4


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.silu(x * 1.5 + y) * torch.sigmoid(y) - x


def _sync(device: str) -> None:
    if device == "zyx":
        torch.zyx.synchronize()


def _timed_calls(fn, device: str, calls: int) -> float:
    """Seconds per call of ``fn`` on ``device`` over ``calls`` calls, the device synchronized
    after each call (inside the timed region: zyx runs lazily, so an unsynchronized call only
    records the work)."""
    out = fn()  # untimed: see REPEATS
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        out = fn()
        _sync(device)
    elapsed = time.perf_counter() - start
    del out
    return elapsed / calls


def interleaved(zyx_fn, cpu_fn, repeats: int = REPEATS, calls: int = CALLS) -> tuple[float, float]:
    """Median seconds per call of zyx and of CPU torch, from alternating blocks: whatever else
    the machine does at the time (a 2-core box is rarely idle) falls on both sides alike."""
    zyx_times, cpu_times = [], []
    for _ in range(repeats):
        zyx_times.append(_timed_calls(zyx_fn, "zyx", calls))
        cpu_times.append(_timed_calls(cpu_fn, "cpu", calls))
    return statistics.median(zyx_times), statistics.median(cpu_times)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _kernels(count: int) -> str:
    return f"{count} kernel{'' if count == 1 else 's'}"


def _compiled(count: int) -> str:
    return f"compiling {_kernels(count)} included" if count else "nothing to compile"


def _ratio(zyx_time: float, cpu_time: float) -> str:
    if zyx_time <= cpu_time:
        return f"zyx {cpu_time / zyx_time:.1f}x faster"
    return f"zyx {zyx_time / cpu_time:.1f}x slower"


def demo_chain() -> bool:
    """Part 1; True when zyx's result matches CPU torch's."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(CHAIN_NUMEL, generator=generator)
    y = torch.randn(CHAIN_NUMEL, generator=generator)
    zx, zy = x.to("zyx"), y.to("zyx")
    torch.zyx.synchronize()

    print(f"1. Elementwise chain {CHAIN_TEXT} on x, y of {CHAIN_NUMEL:,} float32 each")
    torch_zyx.reset_counters()
    start = time.perf_counter()
    result = chain(zx, zy)
    torch.zyx.synchronize()
    first = time.perf_counter() - start
    compiled = _compiled(torch_zyx.counters()["kernels_compiled"])

    torch_zyx.reset_counters()
    zyx_time, cpu_time = interleaved(lambda: chain(zx, zy), lambda: chain(x, y))
    counts = torch_zyx.counters()
    calls = REPEATS * (CALLS + 1)
    per_call = counts["kernels_launched"] / calls
    print(f"   kernels zyx launched per call: {per_call:g} (CPU torch runs {CHAIN_OPS} ops: {CHAIN_OPS} passes "
          f"over memory, {CHAIN_OPS - 1} temporaries)")
    print(f"   first call: {_ms(first)} ({compiled})")
    print(f"   warm call: zyx {_ms(zyx_time)}, CPU torch {_ms(cpu_time)}: {_ratio(zyx_time, cpu_time)}")
    print(f"     (medians of {REPEATS} blocks of {CALLS} calls, zyx's and torch's alternating; zyx synchronized "
          "in the timing)")

    expected = chain(x, y)
    diff = (result.cpu() - expected).abs().max().item()
    ok = torch.allclose(result.cpu(), expected, rtol=CHAIN_RTOL, atol=CHAIN_ATOL)
    print(f"   max |zyx - CPU torch|: {diff:.1e}, {'within' if ok else 'OUTSIDE'} the tolerance "
          f"(rtol = atol = {CHAIN_ATOL:g})")
    return ok


def make_data(n: int = 512, features: int = 64, classes: int = 10, seed: int = 0):
    """A learnable synthetic classification set: labels of a random linear map, with noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    true_w = torch.randn(features, classes, generator=generator)
    labels = (x @ true_w + 0.5 * torch.randn(n, classes, generator=generator)).argmax(-1)
    return x, labels


def make_model(features: int = 64, hidden: int = 128, classes: int = 10) -> torch.nn.Module:
    # SiLU rather than ReLU: a ReLU input that rounds to +1e-7 on one device and -1e-7 on the
    # other switches that unit's gradient off on one side only, and the two runs then differ by
    # far more than rounding (README, Set-up); SiLU's gradient is continuous.
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.SiLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.SiLU(),
                               torch.nn.Linear(hidden, classes))


def _ulp(value: float) -> float:
    """The spacing of float32 numbers at ``value`` (one unit in the last place)."""
    return math.ulp(value) * 2.0 ** (52 - 23) if value else 0.0


def _step(model, optimizer, x, labels) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    optimizer.step()
    return loss


def demo_training() -> bool:
    """Part 2; True when zyx's losses and weights match CPU torch's."""
    x, labels = make_data()
    cpu_model = make_model()
    zyx_model = copy.deepcopy(cpu_model).to("zyx")
    zyx_x, zyx_labels = x.to("zyx"), labels.to("zyx")
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=LR, momentum=MOMENTUM)
    zyx_opt = torch.optim.SGD(zyx_model.parameters(), lr=LR, momentum=MOMENTUM)
    torch.zyx.synchronize()
    sizes = "-".join(str(m.in_features) for m in cpu_model if isinstance(m, torch.nn.Linear))
    print(f"2. Training an MLP {sizes}-10 (SiLU, cross-entropy) with torch.optim.SGD (lr {LR}, momentum "
          f"{MOMENTUM})")
    print(f"   {x.shape[0]} samples, {STEPS} steps; the same initial weights and data on zyx and on the CPU")

    rows, kernels, zyx_times, cpu_times = [], [], [], []
    compiled = ""
    for step in range(STEPS):
        # Lockstep: one zyx step (synchronized, so its time is the work, not the recording),
        # then one CPU step; the steady-state times are medians over the warm steps.
        torch_zyx.reset_counters()
        start = time.perf_counter()
        zyx_loss = _step(zyx_model, zyx_opt, zyx_x, zyx_labels)
        torch.zyx.synchronize()
        zyx_times.append(time.perf_counter() - start)
        counts = torch_zyx.counters()
        kernels.append(counts["kernels_launched"])
        if step == 0:
            compiled = _compiled(counts["kernels_compiled"])
        start = time.perf_counter()
        cpu_loss = _step(cpu_model, cpu_opt, x, labels)
        cpu_times.append(time.perf_counter() - start)
        if step % LOG_EVERY == 0 or step == STEPS - 1:
            rows.append((step, zyx_loss.item(), cpu_loss.item()))

    print(f"   {'step':>4}  {'loss zyx':>10}  {'loss CPU':>10}")
    loss_ok = True
    for step, zyx_value, cpu_value in rows:
        loss_ok &= abs(zyx_value - cpu_value) <= LOSS_RTOL * max(1.0, abs(cpu_value))
        print(f"   {step:4d}  {zyx_value:10.6f}  {cpu_value:10.6f}")
    warm = slice(STEPS // 4, None)  # after the first steps' compiling and schedule-cache misses
    steady = sorted(set(kernels[warm]))
    n_params = len(list(cpu_model.parameters()))
    print(f"   kernels zyx launched per step once warm: {', '.join(map(str, steady))} (forward, loss, "
          f"backward, SGD update of {n_params} tensors)")
    print(f"   first step: {zyx_times[0]:.2f} s ({compiled})")
    zyx_step, cpu_step = statistics.median(zyx_times[warm]), statistics.median(cpu_times[warm])
    print(f"   warm step: zyx {_ms(zyx_step)}, CPU torch {_ms(cpu_step)}: {_ratio(zyx_step, cpu_step)} "
          f"(medians of steps {STEPS // 4}-{STEPS - 1}, zyx synchronized)")
    if zyx_step > cpu_step:
        print(f"     (a step of this small model is {steady[-1]} small kernels: per-op recording and launch "
              "costs decide its time,")
        print("     not memory traffic)")

    diff = max((p.detach().cpu() - q.detach()).abs().max().item()
               for p, q in zip(zyx_model.parameters(), cpu_model.parameters()))
    largest = max(q.detach().abs().max().item() for q in cpu_model.parameters())
    weights_ok = diff <= WEIGHT_ATOL
    print("   Why the last digits differ: zyx's fused, multi-threaded kernels add float32 sums up in")
    print("   another order than CPU torch, so the runs agree to float32 rounding, not bit for bit.")
    print(f"   max |weight difference| after {STEPS} steps: {diff:.1e} (largest weight {largest:.2f}, one "
          f"float32 step there {_ulp(largest):.0e}),")
    print(f"   {'within' if weights_ok else 'OUTSIDE'} the tolerance {WEIGHT_ATOL:g}")
    if not loss_ok:
        print(f"   losses differ by more than {LOSS_RTOL:g} (relative)")
    return loss_ok and weights_ok


def main() -> int:
    """Run both parts; 0 when every result matched CPU torch within its tolerance, else 1."""
    # The first calls' times below are to show a fresh compile, not machine code a previous run
    # left in zyx's disk cache (which every later process of a program loads instead).
    disk_cache, CONFIG.disk_cache = CONFIG.disk_cache, False
    try:
        print(f"torch_zyx demo: zyx:0 is {torch.zyx.get_device_name(0)}; "
              f"CPU torch {torch.__version__} with {torch.get_num_threads()} threads")
        print("(zyx's disk cache of compiled kernels is off here, so first calls show a fresh compile)")
        ok = demo_chain()
        print()
        ok = demo_training() and ok
        print()
    finally:
        CONFIG.disk_cache = disk_cache
    print("result: zyx matches CPU torch within tolerance" if ok
          else "result: MISMATCH: zyx differs from CPU torch beyond tolerance (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
