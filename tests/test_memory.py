"""Memory: pool accounting, free-buffer cache reuse, events before reuse, empty_cache, disk kernel cache."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ZYX0_BACKEND

from torch_zyx.execute.contexts import devices
from torch_zyx.memory.events import Event, EventTable
from torch_zyx.memory.host import HostPool

REPO = Path(__file__).resolve().parent.parent


def test_buffer_returns_to_pool_when_last_tensor_dies():
    zyx = torch.zyx
    # Earlier tests' garbage (reference cycles) must not be collected mid-test: its buffers
    # would leave the pool's accounting between the two readings.
    gc.collect()
    torch.zyx.synchronize()
    base = zyx.memory_allocated()
    x = torch.ones(1 << 16, device="zyx") * 3  # 256 KiB realized into a fresh buffer
    x.cpu()
    view = x[10:20]
    assert zyx.memory_allocated() >= base + (1 << 18)
    del x
    # A view keeps the storage (and its buffer) alive.
    assert zyx.memory_allocated() >= base + (1 << 18)
    assert view.cpu().tolist() == [3.0] * 10
    del view
    assert zyx.memory_allocated() == base


@pytest.mark.parametrize("program", ["elementwise", "softmax", "matmul", "gather"])
def test_del_frees_at_once_without_the_garbage_collector(program):
    # Memory comes back at ``del``, as with CPU and CUDA tensors, also after a graph compiled for
    # the first time (its kernelization held the graph's buffers in reference cycles before).
    import torch.nn.functional as F

    # A size no other test uses: the schedule cache misses, so the graph is kernelized.
    n = 1000 + 37 * ["elementwise", "softmax", "matmul", "gather"].index(program)
    make = {"elementwise": lambda x: F.gelu(x * 2 + 1) * x.sigmoid(),
            "softmax": lambda x: torch.softmax(x, -1),
            "matmul": lambda x: torch.relu(x @ x.t() + 1),
            "gather": lambda x: x[torch.tensor([0, 5, 3], device="zyx")].cumsum(1)}[program]
    gc.collect()
    torch.zyx.synchronize()
    base = torch.zyx.memory_allocated()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = make(torch.randn(64, n).to("zyx"))
        out.cpu()
        assert torch.zyx.memory_allocated() > base
        del out
        torch.zyx.synchronize()
        assert torch.zyx.memory_allocated() == base
    finally:
        if was_enabled:
            gc.enable()


def test_free_cache_reuse_does_not_grow_reserved():
    zyx = torch.zyx
    n = 12345  # an unusual size, so the cache has no buffer of it yet
    gc.collect()
    # Fill values that are graph constants (0, +-1, 2, 0.5 are; others become scalar parameters,
    # whose small per-realization buffer would be a new allocation when none is cached).
    x = torch.full((n,), 2.0, device="zyx")
    x.cpu()
    reserved = zyx.memory_reserved()
    del x
    assert zyx.memory_reserved() == reserved  # freed into the cache, not released
    y = torch.full((n,), 0.5, device="zyx")
    assert y.cpu()[0].item() == 0.5
    assert zyx.memory_reserved() == reserved  # the cached buffer was reused


def test_empty_cache_trims_reserved():
    zyx = torch.zyx
    x = torch.full((54321,), 1.0, device="zyx")
    x.cpu()
    del x
    before = zyx.memory_reserved()
    zyx.empty_cache()
    after = zyx.memory_reserved()
    assert after <= before - 54321 * 4
    assert after >= zyx.memory_allocated()


def test_pool_waits_for_events_before_reuse():
    pool = HostPool()
    first, _ = pool.allocate(4096)
    pending = Event()
    pool.free(first, [pending])
    assert pool.allocated == 0
    # The work on ``first`` is not finished: it must not be handed out again.
    second, _ = pool.allocate(4096)
    assert second is not first
    pool.free(second, [])
    third, _ = pool.allocate(4096)
    assert third is second
    pending.set()
    fourth, _ = pool.allocate(4096)
    assert fourth is first  # reused once its event completed
    pool.empty_cache()
    assert pool.reserved == 8192  # third and fourth are still live


def test_event_table_takes_events_touching_a_buffer():
    table = EventTable()
    e1, e2 = Event(), Event()
    table.record([1, 2], e1)
    table.record([3], e2)
    assert table.take([2]) == [e1]
    # Taking for buffer 2 must not hide the pending work from buffer 1 (same kernel): a
    # pending event stays until it completes.
    assert table.take([1]) == [e1]
    e2.set()
    assert table.take([3]) == []  # completed events need no wait
    table.record([4], Event())
    assert len(table.take_all()) == 2  # e1 and the new one are pending
    e1.set()
    assert len(table.take_all()) == 1


class _ReentrantEvent(Event):
    """An event whose first ``is_done`` runs ``hook``: what a garbage collection in the middle
    of a table walk does when it frees a Buffer (its ``__del__`` calls back into the table and
    the pool on the same thread)."""

    def __init__(self, hook):
        super().__init__()
        self.hook = hook

    def is_done(self) -> bool:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().is_done()


def test_event_table_walk_survives_reentrant_take():
    table = EventTable()
    finished = [Event() for _ in range(4)]
    for i, event in enumerate(finished):
        table.record([10 + i], event)
    pending = Event()
    # Re-entrant ``take`` prunes the finished events while the outer call is walking the table
    # (it raised "dictionary changed size during iteration" in OpInfo gradient tests).
    table.record([1], _ReentrantEvent(lambda: [e.set() for e in finished] and table.take([99])))
    table.record([2], pending)
    assert table.take([2]) == [pending]
    assert table.take_all() == [table.take([1])[0], pending]


def test_pool_empty_cache_survives_reentrant_free():
    class HookedPool(HostPool):
        hook = None

        def _release_buffer(self, buffer) -> None:
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()
            super()._release_buffer(buffer)

    pool = HookedPool()
    small, _ = pool.allocate(4096)
    other, _ = pool.allocate(8192)
    pool.free(small, [])
    # A Buffer of another size freed (by the garbage collector) while the cache is released:
    # the walk over the cache must not fail, and the late buffer stays cached and counted.
    pool.hook = lambda: pool.free(other, [])
    pool.empty_cache()
    assert pool.allocated == 0
    assert pool.reserved == 8192
    again, _ = pool.allocate(8192)
    assert again is other


def test_synchronize_waits_for_outputs_after_temporaries_are_freed():
    # A kernel's event covers its temporaries and its output; freeing the temporaries at the
    # end of realize must not drop the output's pending work from synchronize().
    x = torch.randn(512, 1024, device="zyx")
    for _ in range(3):
        y = torch.softmax(x * 2, -1)
        torch.zyx.synchronize()
        assert not devices()[0].events.take_all()
        torch.testing.assert_close(y.cpu(), torch.softmax(x.cpu() * 2, -1))


def test_launch_event_waited_before_buffer_reuse():
    # Large enough to run asynchronously on the thread pool; the result buffer is freed and
    # reallocated right away: the next kernel must see the finished values, never a race.
    ctx = devices()[0]
    for _ in range(5):
        a = torch.arange(1 << 20, device="zyx", dtype=torch.float32)
        b = (a * 2 + 1).sum()
        del a
        # A race reads stale or foreign values: far off. The tolerance is float32 rounding, which
        # depends on the device's reduction order (OpenCL reduces in a work-group tree).
        assert b.item() == pytest.approx(float(sum(range(1 << 20)) * 2 + (1 << 20)), rel=1e-6)
    ctx.synchronize()


_CACHE_SCRIPT = """
import torch, torch_zyx
x = torch.arange(777, dtype=torch.float32, device='zyx')
print(((x * 0.25 + 7.5).sin() * x).sum().item())
print('compiled', torch_zyx.counters()['kernels_compiled'])
"""


def _run(cache_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ZYX_CACHE_DIR=str(cache_dir), ZYX_DISK_CACHE="1")
    return subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False, timeout=120)


@pytest.mark.skipif(ZYX0_BACKEND != "cpu", reason="this checks the CPU backend's LLVM objects in zyx's "
                    "disk cache; OpenCL programs are cached by pyopencl and the driver (PoCL's kcache), "
                    "CUDA CUBINs under <cache>/cuda (tests/test_cuda.py)")
def test_disk_kernel_cache_reused_by_second_process(tmp_path, monkeypatch):
    from torch_zyx.config import CONFIG

    # This process plays the first run: point the live device's object cache at tmp_path.
    ctx = devices()[0]
    monkeypatch.setattr(CONFIG, "disk_cache", True)
    monkeypatch.setattr(ctx.runtime, "_cache_dir", tmp_path / "llvm")
    monkeypatch.setattr(ctx, "programs", {})
    monkeypatch.setattr("torch_zyx.execute.realize._plans", {})
    x = torch.arange(777, dtype=torch.float32, device="zyx")
    ((x * 0.25 + 7.5).sin() * x).sum().item()  # the same graph as _CACHE_SCRIPT
    objects = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "llvm").glob("*.obj")}
    assert objects, "no kernel object written to the disk cache"
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    compiled = int(result.stdout.split("compiled")[1])
    assert compiled >= 1  # programs are still built (loaded) in the new process...
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "llvm").glob("*.obj")}
    assert after == objects  # ...but from the cached objects: nothing new written


def test_pinned_host_memory():
    """zyx is the accelerator once torch_zyx is loaded: pin_memory() and DataLoader(pin_memory=
    True) ask its hooks for pinned memory (they raised "register PrivateUse1HooksInterface")."""
    from torch.utils.data import DataLoader, TensorDataset

    from torch_zyx.integration import device_guard

    if not device_guard.native_hooks():
        pytest.skip("pinned memory needs zyx's C++ hooks (no C++ compiler, or ZYX_NATIVE=0)")
    x = torch.arange(1000.0).reshape(10, 100)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and pinned[3:].is_pinned() and not x.is_pinned()
    assert pinned.device.type == "cpu" and torch.equal(pinned, x)
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()  # already pinned: itself
    assert torch.equal(pinned.to("zyx", non_blocking=True).cpu(), x)
    assert not torch.empty(0).is_pinned()
    batches = list(DataLoader(TensorDataset(x, torch.arange(10)), batch_size=4, pin_memory=True))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert all(b[0].is_pinned() and b[1].is_pinned() for b in batches)
    assert torch.equal(torch.cat([b[0] for b in batches]), x)
    del pinned, batches
    gc.collect()
