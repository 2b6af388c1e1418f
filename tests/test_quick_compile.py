"""Small CPU kernels compile without optimization passes first and are optimized once their plans
keep running (runtime/cpu.py ``quick_compile``/``CPUProgram.upgrade``, execute/realize.py
``QUICK_RUNS``): a program run once (a new shape) skips the optimizer, one in a loop gets it.
Those quick kernels read their sizes from a buffer (codegen/generalize.py): kernels that differ
only in a size share one program, and a plan that keeps running gets programs of its own sizes."""

from __future__ import annotations

import pytest
import torch

import torch_zyx
from torch_zyx.execute import realize
from torch_zyx.execute.contexts import devices

pytestmark = pytest.mark.skipif(devices()[0].runtime.renderer != "llvm",
                                reason="quick compiles are the CPU backend's (LLVM passes)")


def _counts() -> dict:
    counts = torch_zyx.counters()
    return {k: counts[k] for k in ("kernels_compiled", "kernels_compiled_quick", "kernels_optimized")}


def test_a_small_kernel_is_optimized_once_its_plan_keeps_running():
    x = torch.randn(97)
    z = x.to("zyx")
    torch_zyx.reset_counters()
    for run in range(realize.QUICK_RUNS + 2):
        got = ((z * 2.5 + 1).sin() - z).cpu()  # a graph no other test makes (a fresh program)
        torch.testing.assert_close(got, (x * 2.5 + 1).sin() - x)
        counts = _counts()
        assert counts["kernels_compiled"] == counts["kernels_compiled_quick"] == 1
        assert counts["kernels_optimized"] == (1 if run + 1 >= realize.QUICK_RUNS else 0)


def test_large_kernels_are_optimized_from_the_start():
    x = torch.randn(1 << 20)
    torch_zyx.reset_counters()
    torch.testing.assert_close((x.to("zyx") * 3.5 - 0.25).cpu(), x * 3.5 - 0.25)
    counts = _counts()
    assert counts["kernels_compiled"] >= 1 and counts["kernels_compiled_quick"] == 0


def test_many_shapes_share_size_generic_programs_and_match():
    """Each new shape is a new plan, but not a new program: the sizes are read from a buffer."""
    torch_zyx.reset_counters()
    for n in range(3, 40):
        idx = torch.arange(n) % 5
        expected = torch.zeros(n, 4).index_put_((idx,), torch.ones(n, 4), accumulate=True)
        got = torch.zeros(n, 4, device="zyx").index_put_((idx.to("zyx"),), torch.ones(n, 4, device="zyx"),
                                                          accumulate=True)
        torch.testing.assert_close(got.cpu(), expected)
    counts = _counts()
    assert 0 < counts["kernels_compiled_quick"] <= 6 and counts["kernels_optimized"] == 0, counts


def test_index_put_accumulate_over_many_shapes():
    """PyTorch's test_index_put_accumulate_duplicate_indices (a random walk of indices, a size
    read back every shape): values exact, programs compiled a bounded number of times."""
    torch.manual_seed(0)
    torch_zyx.reset_counters()
    for i in range(1, 160):
        delta = torch.empty(i, dtype=torch.double, device="zyx").uniform_(-1, 1)
        indices = delta.cumsum(0).long()
        source = torch.randn(indices.abs().max() + 1, device="zyx")
        values = torch.randn(indices.size(0), device="zyx")
        output = source.index_put((indices,), values, accumulate=True)
        expected = source.cpu().index_put((indices.cpu(),), values.cpu(), accumulate=True)
        torch.testing.assert_close(output.cpu(), expected)
    counts = _counts()
    assert counts["kernels_compiled"] <= 40, counts


def test_a_generic_plan_that_keeps_running_gets_programs_of_its_sizes(monkeypatch):
    monkeypatch.setattr(realize, "_plans", {})
    x = torch.randn(37, 5)
    z = x.to("zyx")
    for run in range(realize.QUICK_RUNS + 1):
        got = (z[1:, 2:].cumsum(0) * 1.5).cpu()  # (literals in its indices and loop bounds)
        torch.testing.assert_close(got, x[1:, 2:].cumsum(0) * 1.5)
        generic = [p for p in realize._plans.values() if p.literal_buffers]
        assert bool(generic) == (run + 1 < realize.QUICK_RUNS)


def test_sizes_that_keep_changing_specialize_a_bounded_number_of_programs(monkeypatch):
    """A loop over many shapes, run a few times over (every plan reaches ``QUICK_RUNS``): a
    size-generic program is specialized for ``SIZES_PER_DOUBLING`` sizes, then a size needs
    twice the runs, so the optimizer runs a bounded number of times, not once per size."""
    monkeypatch.setattr(realize, "_specializations", {})
    sizes = range(41, 41 + 3 * realize.SIZES_PER_DOUBLING)
    inputs = [torch.randn(n, 3) for n in sizes]
    torch_zyx.reset_counters()
    for run in range(realize.QUICK_RUNS):
        for x in inputs:
            got = (x.to("zyx")[1:].cumsum(0) * 0.75).cpu()
            torch.testing.assert_close(got, x[1:].cumsum(0) * 0.75)
    counts = _counts()
    assert counts["kernels_compiled_quick"] < len(sizes) // 2, counts
    bound = realize.SIZES_PER_DOUBLING * counts["kernels_compiled_quick"]
    assert 0 < counts["kernels_optimized"] <= bound, counts
    assert counts["kernels_optimized"] < len(sizes), counts
    optimized = counts["kernels_optimized"]
    for run in range(realize.QUICK_RUNS):  # 6 runs in all: the next sizes' turn
        for x in inputs:
            torch.testing.assert_close((x.to("zyx")[1:].cumsum(0) * 0.75).cpu(), x[1:].cumsum(0) * 0.75)
    assert optimized < _counts()["kernels_optimized"] <= 2 * optimized, _counts()


def test_the_same_source_for_more_work_runs_optimized():
    """A program compiled quick and then needed by a launch of much more work (the same source:
    the outer range is a parameter) is optimized first."""
    device = devices()[0]
    source_program = None
    x = torch.randn(64)
    torch_zyx.reset_counters()
    (x.to("zyx") + 7.25).cpu()
    for program in device.programs.values():
        if getattr(program, "quick", False):
            source_program = program
    assert source_program is not None
    source = source_program.source
    again = device.program(source_program.name, source)  # asked for without quick
    assert again is source_program and not again.quick and torch_zyx.counters()["kernels_optimized"] == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_sign_bit_of_widened_halves_compiles_quick(dtype):
    """signbit and copysign read the sign bit of a value widened from 16 bits; compiled without
    the passes, LLVM's code generator aborted the process on bfloat16 (math_ir.signbit)."""
    x = torch.tensor([[-0.0, 0.0, -1.5, 2.0], [float("nan"), -float("inf"), 3.0, -7.0]], dtype=dtype)
    torch.testing.assert_close(torch.signbit(x.to("zyx")).cpu(), torch.signbit(x))
    torch.testing.assert_close(torch.copysign(x.to("zyx"), -1.0).cpu(), torch.copysign(x, -1.0),
                               equal_nan=True)
