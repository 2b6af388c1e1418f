"""Demo (``python -m torch_zyx.demo``, ``make demo``): train a small MLP on zyx and on CPU torch.

Both runs start from the same initial weights and see the same synthetic data; the demo prints
the two losses side by side every few steps, the kernels zyx launched and compiled, and the
wall time of each run. The update is plain SGD under ``no_grad`` so the demo only needs
autograd of the forward ops.
"""

from __future__ import annotations

import copy
import time

import torch

import torch_zyx


def make_data(n: int = 512, features: int = 32, classes: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    true_w = torch.randn(features, classes, generator=generator)
    y = (x @ true_w + 0.1 * torch.randn(n, classes, generator=generator)).argmax(-1)
    return x, torch.nn.functional.one_hot(y, classes).float()


def make_model(features: int = 32, hidden: int = 64, classes: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def train(model, x, target, steps: int, lr: float, log_every: int, losses: list) -> float:
    """Run ``steps`` SGD steps; returns seconds. Loss values are read only every ``log_every``."""
    start = time.perf_counter()
    for step in range(steps):
        logits = model(x)
        # Softmax cross-entropy written out, so it only needs elementwise and reduce ops.
        log_probs = logits - logits.logsumexp(-1, keepdim=True)
        loss = -(log_probs * target).sum(-1).mean()
        for p in model.parameters():
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(lr * p.grad)
        if step % log_every == 0 or step == steps - 1:
            losses.append((step, loss.item()))
    for p in model.parameters():
        p.detach().cpu()  # the last update is part of the work
    return time.perf_counter() - start


def main(steps: int = 50, lr: float = 0.5, log_every: int = 5) -> None:
    x, target = make_data()
    cpu_model = make_model()
    zyx_model = copy.deepcopy(cpu_model).to("zyx")
    zyx_x, zyx_target = x.to("zyx"), target.to("zyx")
    torch.zyx.synchronize()

    torch_zyx.reset_counters()
    zyx_losses: list = []
    zyx_time = train(zyx_model, zyx_x, zyx_target, steps, lr, log_every, zyx_losses)
    counts = torch_zyx.counters()
    cpu_losses: list = []
    cpu_time = train(cpu_model, x, target, steps, lr, log_every, cpu_losses)

    print(f"MLP 32-64-4 on {x.shape[0]} samples, {steps} SGD steps (lr {lr}), same init on both devices")
    print(f"{'step':>5}  {'loss zyx':>10}  {'loss cpu':>10}")
    for (step, z_loss), (_, c_loss) in zip(zyx_losses, cpu_losses):
        print(f"{step:5d}  {z_loss:10.5f}  {c_loss:10.5f}")
    diff = max((p.detach().cpu() - q.detach()).abs().max().item()
               for p, q in zip(zyx_model.parameters(), cpu_model.parameters()))
    print(f"max |weight difference| after training: {diff:.2e}")
    print(f"zyx: {counts['kernels_launched']} kernels launched "
          f"({counts['kernels_launched'] / steps:.1f} per step), "
          f"{counts['kernels_compiled']} compiled, schedule cache {counts['schedule_cache_hits']} hits / "
          f"{counts['schedule_cache_misses']} misses, {counts['cpu_fallbacks']} CPU fallbacks")
    print(f"time: zyx {zyx_time:.2f} s (first run: includes compiling), CPU torch {cpu_time:.2f} s")


if __name__ == "__main__":
    main()
