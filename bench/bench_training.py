"""Training benchmarks: one optimizer step of an MLP, a transformer layer forward+backward and
one AdamW step of a small GPT-style model, on zyx and on CPU torch eager in the same process, with
the zyx/CPU time ratio against the target (no slower than CPU torch).

Run ``python bench/bench_training.py`` (``--markdown`` prints the README table, ``--quick``
uses smaller shapes for a smoke run). Each case is warmed up first (kernels compiled and
cached, the schedule cached: a training loop's steady state), then timed as the median of
several steps. zyx steps end with ``torch.zyx.synchronize()`` (every kernel finished, as
``torch.cuda.synchronize()`` in GPU benchmarks); CPU torch eager is synchronous. The first
line says how many threads each side used and the load average while the cases ran: on a
busy machine torch's spinning OpenMP threads lose more than zyx's pool, so compare ratios
measured under similar load (``ZYX_THREADS=1 ... --torch-threads 1`` compares one core each).
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
from torch import nn

import torch_zyx  # registers the zyx device; its config says the thread count
from bench import median_time  # bench/ is on sys.path when this script runs


def _mlp_step_fn(model, device, batch):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 784, generator=gen).to(device)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    return _classifier_step(model, opt, x, y, device)


def _classifier_step(model, opt, x, y, device):
    """One training step: zero_grad, forward, cross entropy over the last axis (every position
    of a sequence model), backward, the optimizer's step; synchronized on zyx."""

    def step():
        opt.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if device == "zyx":
            torch.zyx.synchronize()
        return loss

    return step


def _transformer_fn(layer, device, batch, seq, d_model):
    layer = copy.deepcopy(layer).to(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, seq, d_model, generator=gen).to(device)

    def step():
        for p in layer.parameters():
            p.grad = None
        out = layer(x)
        out.square().mean().backward()
        if device == "zyx":
            torch.zyx.synchronize()
        return out

    return step


class TinyGPT(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm causal transformer blocks
    (GELU MLPs), a final layer norm and a language-model head tied to the token embedding."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq, d_model)
        block = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        h = self.tokens(idx) + self.positions(positions)
        h = self.blocks(h, mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def _gpt_step_fn(model, device, batch, seq, vocab):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
    return _classifier_step(model, opt, tokens[:, :-1].to(device), tokens[:, 1:].to(device), device)


def bench(make_step, repeats: int, warmup: int) -> tuple[float, float, float]:
    """(zyx seconds, CPU seconds, warm-up seconds of zyx including compilation)."""
    zyx_step, cpu_step = make_step("zyx"), make_step("cpu")
    start = time.perf_counter()
    for _ in range(warmup):
        zyx_step()
    warm = time.perf_counter() - start
    for _ in range(warmup):
        cpu_step()
    # Same model, data and number of steps: the next step must give the same loss on both (a
    # fast wrong answer must never show up as a win).
    torch.testing.assert_close(zyx_step().detach().cpu(), cpu_step().detach(), rtol=1e-3, atol=1e-3)
    return median_time(zyx_step, repeats), median_time(cpu_step, repeats), warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small shapes (smoke run)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--torch-threads", type=int, default=0, help="CPU torch threads (0: its default)")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    hidden, batch = (64, 32) if args.quick else (512, 256)
    mlp = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                        nn.Linear(hidden, 10))
    d, heads, seq, tbatch = (32, 4, 16, 2) if args.quick else (512, 8, 256, 8)
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
    vocab, gd, gheads, glayers, gseq, gbatch = (256, 32, 4, 2, 16, 2) if args.quick else (2048, 256, 4, 4, 128, 8)
    gpt = TinyGPT(vocab, gd, gheads, glayers, gseq)
    # Targets: no slower than CPU torch eager.
    cases = [
        (f"MLP 784-{hidden}-{hidden}-10 Adam step, batch {batch}", 1.0,
         lambda dev: _mlp_step_fn(mlp, dev, batch)),
        (f"TransformerEncoderLayer d={d} h={heads} seq={seq} batch={tbatch} fwd+bwd", 1.0,
         lambda dev: _transformer_fn(layer, dev, tbatch, seq, d)),
        (f"GPT-style {glayers} layers d={gd} h={gheads} seq={gseq} batch={gbatch} vocab={vocab} AdamW step", 1.0,
         lambda dev: _gpt_step_fn(gpt, dev, gbatch, gseq, vocab)),
    ]
    rows = []
    for name, target, make_step in cases:
        t_zyx, t_cpu, warm = bench(make_step, args.repeats, warmup=3)
        rows.append((name, t_zyx, t_cpu, t_zyx / t_cpu, target, warm))
    print(f"threads: zyx {torch_zyx.config.CONFIG.threads}, CPU torch {torch.get_num_threads()}; "
          f"load average {os.getloadavg()[0]:.1f} (1 min) at the end, {os.cpu_count()} cores")
    if args.markdown:
        print("| case | zyx ms | CPU torch ms | zyx/CPU | target | zyx warm-up s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, tz, tc, ratio, target, warm in rows:
            mark = "met" if ratio <= target else "not met"
            print(f"| {name} | {tz * 1e3:.1f} | {tc * 1e3:.1f} | {ratio:.2f}x | <= {target}x ({mark}) "
                  f"| {warm:.1f} |")
    else:
        for name, tz, tc, ratio, target, warm in rows:
            print(f"{name:70s} zyx {tz * 1e3:9.1f} ms  cpu {tc * 1e3:9.1f} ms  ratio {ratio:5.2f}x "
                  f"(target <= {target}x)  warm-up {warm:.1f} s")


if __name__ == "__main__":
    main()
