"""Reliability: what users hit beyond the op tests (corrupted caches, ...).

The on-disk kernel caches (runtime/disk_cache.py): an entry that was garbled, truncated or written
by something else is ignored, compiled again and rewritten, reported once; it never aborts the
process (a garbled LLVM object file used to make MCJIT abort with "LLVM ERROR").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_zyx.config import CONFIG

_PROGRAM = """
import torch
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
for fn in (lambda a: (a * 2 + 1).sum(0), lambda a: a.cumsum(1), lambda a: torch.softmax(a @ a.T, -1),
           lambda a: a.flip(0)[:, 1:] - 1):
    torch.testing.assert_close(fn(x.to("zyx")).cpu(), fn(x))
print("ok")
"""

needs_cpu_backend = pytest.mark.skipif((CONFIG.backends[0] if CONFIG.backends else "cpu") != "cpu",
                                       reason="the LLVM object cache belongs to the CPU backend (zyx:0 is not it)")


def _run(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ZYX_CACHE_DIR=str(cache), ZYX_BACKENDS="cpu", ZYX_DISK_CACHE="1")
    return subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@needs_cpu_backend
def test_damaged_kernel_cache_entries_are_compiled_again(tmp_path):
    first = _run(tmp_path)
    assert first.returncode == 0 and "ok" in first.stdout, first.stderr[-2000:]
    entries = sorted((tmp_path / "llvm").glob("*.obj"))
    assert len(entries) >= 4, "the first run wrote too few kernel cache entries"
    # Each entry damaged one way: garbled, truncated, emptied, replaced by another object file.
    for n, entry in enumerate(entries):
        data = entry.read_bytes()
        entry.write_bytes([bytes(b ^ 0x5A for b in data[:4096]) + data[4096:], data[:len(data) // 2], b"",
                           b"\x7fELF" + os.urandom(600)][n % 4])
    second = _run(tmp_path)
    assert second.returncode == 0 and "ok" in second.stdout, second.stderr[-2000:]
    assert second.stderr.count("corrupt kernel cache entry") == 1  # reported once
    # Rewritten: a third run reads every entry back without a report.
    third = _run(tmp_path)
    assert third.returncode == 0 and "corrupt" not in third.stderr, third.stderr[-2000:]


# --------------------------------------------------------------------------- out of memory

_OOM_PROGRAM = """
import torch
n = 16 << 20  # float32 elements in 64 MiB
kept = []
for i in range(4):
    kept.append(torch.full((n,), float(i + 1), device="zyx") * 2)
    torch.zyx.synchronize()
try:
    extra = torch.full((n,), 7.0, device="zyx") * 2
    torch.zyx.synchronize()
except torch.OutOfMemoryError as exc:
    print("OOM:", exc)
    del extra  # the value that did not fit (lazy: it is still pending until dropped)
else:
    raise SystemExit("no out-of-memory error")
for i, t in enumerate(kept):  # the tensors that existed before are intact
    assert t[::4096].cpu().eq(2.0 * (i + 1)).all()
del kept[0]
again = torch.full((n,), 5.0, device="zyx") * 2  # fits again once one is freed
assert again[::4096].cpu().eq(10.0).all()
print("allocated", torch.zyx.memory_allocated(), "reserved", torch.zyx.memory_reserved())
"""


@needs_cpu_backend
@pytest.mark.parametrize("limit", ["300M", "300MiB", "314572800"])
def test_pool_limit_raises_torch_out_of_memory_and_keeps_tensors(limit):
    env = dict(os.environ, ZYX_BACKENDS="cpu", ZYX_MEMORY_LIMIT=limit)
    result = subprocess.run([sys.executable, "-c", _OOM_PROGRAM], env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    message = next(line for line in result.stdout.splitlines() if line.startswith("OOM:"))
    assert "Tried to allocate 64.00 MiB" in message and "ZYX_MEMORY_LIMIT" in message and "300.00 MiB" in message
    assert "192.00 MiB is allocated by tensors" in message or "256.00 MiB is allocated by tensors" in message


def test_memory_limit_setting_forms():
    from torch_zyx.config import Config

    assert Config(memory_limit=0.5).memory_limit_bytes(8 << 30) == 4 << 30
    assert Config(memory_limit=float(300 << 20)).memory_limit_bytes(8 << 30) == 300 << 20
    assert Config().memory_limit_bytes(8 << 30) == 0


# torch_zyx imported by name: a checkout run from PYTHONPATH has no entry point for torch's
# device autoload to find.
_ONES_PLUS_ONE = "import torch, torch_zyx; print((torch.ones(3, device='zyx') + 1).cpu().tolist())"


@pytest.mark.parametrize("setting, value, expected", [
    ("ZYX_MEMORY_LIMIT", "lots", "ZYX_MEMORY_LIMIT='lots': expected bytes"),
    ("ZYX_MEMORY_LIMIT", "1.5", "ZYX_MEMORY_LIMIT='1.5': expected bytes"),
    ("ZYX_CPU_TEAM", "gpu", "ZYX_CPU_TEAM='gpu': expected one of openmp, native, python"),
    ("ZYX_THREADS", "two", "ZYX_THREADS='two': not an integer"),
])
def test_an_invalid_setting_gives_one_clear_message_then_the_default(setting, value, expected):
    env = dict(os.environ, ZYX_BACKENDS="cpu", **{setting: value})
    program = _ONES_PLUS_ONE
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0 and "[2.0, 2.0, 2.0]" in result.stdout, result.stderr[-2000:]
    assert result.stderr.count(expected) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_a_broken_config_file_gives_one_clear_message(tmp_path):
    (tmp_path / "zyx").mkdir()
    (tmp_path / "zyx" / "config.json").write_text("{backends: cpu")  # not JSON
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path))
    env.pop("ZYX_BACKENDS", None)
    program = _ONES_PLUS_ONE
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0 and "[2.0, 2.0, 2.0]" in result.stdout, result.stderr[-2000:]
    assert result.stderr.count("ignoring the config file") == 1 and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- bounded caches


def test_plan_and_program_caches_keep_the_most_recently_used(monkeypatch):
    import torch

    import torch_zyx
    from torch_zyx.execute import realize
    from torch_zyx.execute.cache import BoundedCache
    from torch_zyx.execute.contexts import devices

    monkeypatch.setattr(realize, "_plans", BoundedCache(8))
    monkeypatch.setattr(realize, "_lowered", BoundedCache(16))
    device = devices()[0]
    monkeypatch.setattr(device, "programs", BoundedCache(16))
    torch_zyx.reset_counters()
    x = torch.arange(60, dtype=torch.float32)
    z = x.to("zyx")
    # 30 different graphs (a new shape each), then the first ones again: rebuilt, still right.
    for n in list(range(1, 31)) + [1, 2, 3]:
        torch.testing.assert_close((z[:n] * n + 1).sum().cpu(), (x[:n] * n + 1).sum())
    assert len(realize._plans) <= 8 and len(realize._lowered) <= 16 and len(device.programs) <= 16
    assert torch_zyx.counters()["cache_evictions"] >= 30
    # A plan used again is kept: the most recent graph is a hit.
    hits = torch_zyx.counters()["schedule_cache_hits"]
    torch.testing.assert_close((z[:3] * 3 + 1).sum().cpu(), (x[:3] * 3 + 1).sum())
    assert torch_zyx.counters()["schedule_cache_hits"] == hits + 1


# --------------------------------------------------------------------------- processes


@needs_cpu_backend
def test_dataloader_workers_over_zyx_tensors():
    # Forked workers index and collate zyx tensors (the CPU backend gets its own threads in a
    # child); the batches come back to the parent on zyx with the right values.
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.arange(40, dtype=torch.float32).reshape(20, 2)
    y = torch.arange(20)
    batches = list(DataLoader(TensorDataset(x.to("zyx"), y.to("zyx")), batch_size=4, num_workers=2))
    assert len(batches) == 5
    for k, (a, b) in enumerate(batches):
        assert a.device.type == "zyx" and b.device.type == "zyx"
        torch.testing.assert_close(a.cpu(), x[4 * k:4 * k + 4])
        assert b.cpu().tolist() == list(range(4 * k, 4 * k + 4))


# --------------------------------------------------------------------------- long runs


def test_training_memory_stays_flat():
    # Device memory after 40 warm-up steps of an Adam MLP equals the memory 200 steps later:
    # nothing a step allocates outlives the next one (bench/long_run.py runs 10,000 steps).
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to("zyx")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 32).to("zyx"), torch.randint(0, 10, (16,)).to("zyx")

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            torch.zyx.synchronize()  # (each step realized, as a loop reading its loss does)

    steps(40)
    allocated, reserved = torch.zyx.memory_allocated(), torch.zyx.memory_reserved()
    steps(200)
    assert torch.zyx.memory_allocated() == allocated
    assert torch.zyx.memory_reserved() == reserved
