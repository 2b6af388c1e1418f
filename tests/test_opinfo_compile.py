"""OpInfo conformance through ``torch.compile(backend="zyx")``: float32 forward of ``op_db``.

For every op that test_opinfo.py's ``test_forward`` runs in float32, each sample input goes
through ``torch.compile(..., backend="zyx", dynamic=False)`` on zyx tensors and is compared
with eager CPU torch as ``test_forward`` compares (random ops: shape and dtype only). Test ids
follow test_opinfo.py's, e.g. ``TestZyxOpInfoCompileZYX::test_compile_forward_add_zyx_float32``.

The machinery is test_opinfo.py's (imported, not copied): the slice by a stable hash of the
test id, ``ZYX_OPINFO_FULL`` and ``ZYX_OPINFO_RECORD``, isolation in forked children or spawned
workers (``ZYX_OPINFO_ISOLATE``), ``ZYX_OPINFO_STRICT`` and ``ZYX_OPINFO_TIMEOUT``, and the
expected failures as non-strict xfails (this file's: ``opinfo_expected_failures_compile.json``).

- An op whose eager float32 forward is an expected failure (``opinfo_expected_failures.json``)
  is skipped ("fails in eager zyx too"): the compiled rate is over the ops eager zyx passes.
- Dynamo is reset before each sample (each sample compiles afresh: no recompile limit to hit,
  no sample's guards or plans reused by the next) and its errors are not suppressed; where
  Dynamo cannot trace the op's Python it breaks the graph and runs that part eagerly, as for
  any user. The callable Dynamo sees is a plain closure over the op's function.
- CPU fallback stays off for the ops (test_opinfo.py's rule), except that a compiled graph
  that needs a value while it is traced may run op by op (``compile_fallbacks``), as it does
  for users: ``CONFIG.cpu_fallback`` is on during the compiled call, and a sample whose call
  ran any op on the CPU (``cpu_fallbacks``) fails. A graph run op by op with right results
  passes; ``ZYX_OPINFO_RECORD`` notes it (an ``info`` record per test: graphs compiled, ops in
  them, samples Dynamo ran without a graph, op-by-op graph calls) and tests/opinfo_report.py
  prints the rate against the eager one with those counts.

Each sample costs a Dynamo and AOTAutograd trace and a zyx plan (~0.3 s on one core, against
~0.01 s for an eager sample whose kernels are cached), and a few ops have over 500 samples
(max_pool2d 1440, logspace 1201): in the full run a test may take ``ZYX_OPINFO_TIMEOUT`` seconds
(default 900 there; 120 in the slice, as test_opinfo.py's).

Environment: ``ZYX_OPINFO_COMPILE_STRIDE`` (default 20) is this file's slice, about 1/20 of the
tests, chosen by a stable hash of the test id (``make test``), and there each op runs at most
``ZYX_OPINFO_COMPILE_SAMPLES`` (default 24) of its samples, evenly spaced, so that an op with
hundreds cannot dominate the slice; ``ZYX_OPINFO_FULL=1`` runs every test and every sample
(``make test-ops``). With an OpenCL device as zyx:0 the slice is empty unless the stride is
set: PoCL builds every new kernel for ~0.5 s and each sample compiles its own plan.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import warnings
from pathlib import Path

import test_opinfo
import torch._dynamo
import torch._dynamo.testing
import torch._dynamo.utils
from test_opinfo import BACKEND, OpInfoChecks, apply_slice, compare, is_random, record, sample_to_zyx
from torch.testing._internal import common_methods_invocations
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, set_rng_seed

import torch_zyx
from torch_zyx.config import CONFIG

_DEFAULT_STRIDE = "0" if BACKEND == "opencl" else "20"
STRIDE = int(os.environ.get("ZYX_OPINFO_COMPILE_STRIDE", "") or _DEFAULT_STRIDE)
# Samples per op in the slice (0: all, as in the full run).
MAX_SAMPLES = 0 if test_opinfo.FULL else int(os.environ.get("ZYX_OPINFO_COMPILE_SAMPLES", "") or 24)
# One test's limit: the full run's largest take ~10 min on a busy core; the slice's (at most
# MAX_SAMPLES samples) take under 30 s, and one that hangs must not hold make test for long.
TIMEOUT_S = int(os.environ.get("ZYX_OPINFO_TIMEOUT", "") or (900 if test_opinfo.FULL else 120))

EXPECTED_FILE = Path(__file__).with_name("opinfo_expected_failures_compile.json")
EXPECTED: dict[str, str] = test_opinfo._load(EXPECTED_FILE)

PREFIX = "test_compile_forward_"
# The seed of test_forward's samples: OpInfo's, a hash of the qualified name of the test function
# that draws them (common_utils.TrackedInputIter; instantiation keeps the generic name).
EAGER_SEED = int.from_bytes(hashlib.sha256(b"TestZyxOpInfo.test_forward").digest()[:4], "little")


def eager_name(name: str) -> str:
    """The test_opinfo.py test of the same op and dtype in eager mode."""
    return "test_forward_" + name[len(PREFIX):]


def samples_of(op, dtype):
    """(index, sample, whether to run it): the op's samples, with the inputs test_forward gets,
    at most ``MAX_SAMPLES`` of them (evenly spaced) to run."""
    keep = None
    if MAX_SAMPLES:
        total = sum(1 for _ in op.sample_inputs("cpu", dtype, requires_grad=False))
        if total > MAX_SAMPLES:
            keep = {k * total // MAX_SAMPLES for k in range(MAX_SAMPLES)}
    # OpInfo seeds the RNG before drawing each sample with a hash of the calling test
    # function's qualified name (TrackedInputIter): this test would draw other inputs than
    # test_forward, whose outcome is the baseline (seen: a tie in mode's 3000 values that only
    # this test's inputs had). It draws with test_forward's seed instead.
    samples = op.sample_inputs("cpu", dtype, requires_grad=False, set_seed=False)
    for i in itertools.count():
        set_rng_seed(EAGER_SEED)
        sample = next(samples, None)
        if sample is None:
            return
        yield i, sample, keep is None or i in keep


class CompileError(Exception):
    """A Dynamo exception, named by its own type and by its innermost cause: Dynamo wraps the
    error (zyx's, or a fake-tensor run's) in a message whose first line is generic."""

    def __str__(self):
        return str(self.args[0])


def explained(exc: BaseException) -> BaseException:
    if not type(exc).__module__.startswith("torch._dynamo"):
        return exc
    # Dynamo raises some of its errors ``from None``: the original is the context then.
    cause = exc.__cause__ or exc.__context__
    if cause is None:
        return exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return CompileError(f"{type(exc).__name__} <- {test_opinfo.one_line(cause)}")


def through_dynamo(fn):
    """``fn`` behind a plain function, compiled with the zyx backend (counted): Dynamo traces
    the closure into ``fn`` (a torch function, or the OpInfo's Python), never the harness."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("zyx")

    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    return torch.compile(call, backend=counter, dynamic=False, fullgraph=False), counter


def _unseeded(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def run_compiled(op, sample):
    """The sample's result through ``torch.compile`` on zyx, and what the call did.

    OpInfo wraps most random ops in ``wrapper_set_seed``, which freezes the RNG state under
    ``no_dispatch()``: Dynamo cannot trace that for any backend (CPU tensors with the ``eager``
    backend fail the same way), so the compiled call runs the op unwrapped (their values are not
    compared, only shape and dtype)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled, counter = through_dynamo(op.op)
    zs = sample_to_zyx(sample)
    torch_zyx.reset_counters()
    saved = CONFIG.cpu_fallback
    CONFIG.cpu_fallback = True  # (the op-by-op run of a graph that cannot be one plan)
    seeded = common_methods_invocations.wrapper_set_seed
    common_methods_invocations.wrapper_set_seed = _unseeded
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if not is_random(op):
                torch.manual_seed(0)
            try:
                out = compiled(zs.input, *zs.args, **zs.kwargs)
                torch_zyx.synchronize()
            except Exception as exc:
                named = explained(exc)
                if named is exc:
                    raise
                raise named from exc
    finally:
        CONFIG.cpu_fallback = saved
        common_methods_invocations.wrapper_set_seed = seeded
    counts = torch_zyx.counters()
    if counts["cpu_fallbacks"]:
        on_cpu = sorted({str(w.message).split(" has no")[0] for w in caught
                         if "has no zyx lowering" in str(w.message)})
        raise NotImplementedError(f"compiled call ran {counts['cpu_fallbacks']} op(s) on the CPU: "
                                  f"{', '.join(on_cpu) or '?'}")
    breaks = sorted(torch._dynamo.utils.counters["graph_break"])
    return out, counter, counts["compile_fallbacks"], breaks


class TestZyxOpInfoCompile(OpInfoChecks, TestCase):
    """test_forward's float32 samples through torch.compile(backend="zyx")."""

    expected = EXPECTED
    expected_file = EXPECTED_FILE
    timeout_s = TIMEOUT_S

    @ops(op_db, allowed_dtypes=(torch.float32,))
    def test_compile_forward(self, device, dtype, op):
        eager_reason = test_opinfo.EXPECTED.get(eager_name(self._testMethodName))
        if eager_reason is not None:
            self.skipTest(f"fails in eager zyx too: {eager_reason}")
        name = self._testMethodName

        def body():
            values = not is_random(op)
            graphs = ops_in_graphs = no_graph = fallbacks = 0
            breaks: set[str] = set()
            samples = 0
            for i, sample, run in samples_of(op, dtype):
                if not run:
                    continue
                samples += 1
                if values:
                    torch.manual_seed(0)
                cpu_out = op(sample.input, *sample.args, **sample.kwargs)
                out, counter, sample_fallbacks, sample_breaks = run_compiled(op, sample)
                compare(out, cpu_out, dtype, values=values, what=f"sample {i} output")
                graphs += counter.frame_count
                ops_in_graphs += counter.op_count
                no_graph += counter.op_count == 0
                fallbacks += sample_fallbacks
                breaks.update(sample_breaks)
            # From inside the isolated body (the parent only learns pass or fail).
            record(name, "info", samples=samples, graphs=graphs, ops=ops_in_graphs, no_graph=no_graph,
                   compile_fallbacks=fallbacks, graph_breaks=sorted(b[:150] for b in breaks)[:5])
        self.run_checked(body)


instantiate_device_type_tests(TestZyxOpInfoCompile, globals(), only_for=("privateuse1",))

apply_slice(globals(), "TestZyxOpInfoCompile", STRIDE)
