"""OpInfo conformance: every op in torch's ``op_db`` on ``zyx`` against CPU torch.

The tests are instantiated for the zyx device (PrivateUse1, renamed "zyx") through PyTorch's own
``instantiate_device_type_tests`` + ``@ops`` machinery, so test ids follow PyTorch's scheme, e.g.
``TestZyxOpInfoPRIVATEUSE1::test_forward_add_privateuse1_float32``. Three variants per op:

- ``test_forward``: every sample input on CPU and on zyx; values, dtypes and shapes must match
  (random ops: shape and dtype only).
- ``test_grad`` (float32, ops with autograd): input gradients for the same grad outputs.
- ``test_errors``: each of the op's ``error_inputs`` raises the same exception type on zyx.

CPU fallback is disabled inside every test, so an op that would fall back counts as a failure.

Environment:
- ``ZYX_OPINFO_FULL=1`` runs everything (``make test-ops``); unset, a deterministic slice of
  about 1/``ZYX_OPINFO_STRIDE`` (default 12) of the tests chosen by a stable hash of the test
  id runs (``make test``).
- ``ZYX_OPINFO_RECORD=<dir>`` appends each test's outcome to ``<dir>/<worker>.jsonl``;
  ``tests/opinfo_report.py <dir>`` prints pass rates and rewrites the expected failures.
- ``ZYX_OPINFO_ISOLATE`` says where a test body runs: ``fork`` (default on the CPU backend: a
  forked child per test), ``worker`` (default when an OpenCL backend is enabled: one spawned
  worker process per pytest process, restarted after a crash or a hang) or ``none`` (in-process,
  for debugging; ``ZYX_OPINFO_FORK=0`` means the same). OpenCL cannot fork: a child of a process
  that has touched OpenCL at all (even ``clGetPlatformIDs``; PoCL starts its driver threads there)
  hangs in its first OpenCL call, and ``import torch.testing._internal.common_utils`` already
  asks ``torch.zyx.is_available()``, so the pytest process always has. A spawned worker is a
  fresh process; it also keeps its compiled kernels from test to test, which a fork loses.
- ``ZYX_OPINFO_STRICT=1`` makes an expected failure that now passes fail (stale entry).
- ``ZYX_OPINFO_TIMEOUT``: seconds one test may take (default 120; 240 on OpenCL).

Known failures live in ``tests/opinfo_expected_failures.json`` (test name -> one-line reason)
and are applied as non-strict xfails: the ops helper fixes lowerings concurrently, so a fixed
op must not break ``make test``; the report script lists such stale entries instead. When zyx:0
is an OpenCL or a CUDA device, ``tests/opinfo_expected_failures_opencl.json`` (written by
``tests/opinfo_report.py --write --backend opencl``) or ``..._cuda.json`` adds the failures only
seen there.
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import unittest
import zlib
from pathlib import Path

import pytest
import torch
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

import torch_zyx
from torch_zyx.config import CONFIG

DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16,
          torch.bfloat16, torch.uint16, torch.uint32, torch.uint64, torch.complex64, torch.complex128)
FULL = os.environ.get("ZYX_OPINFO_FULL", "") not in ("", "0")
STRIDE = int(os.environ.get("ZYX_OPINFO_STRIDE", "12") or 12)
RECORD_DIR = os.environ.get("ZYX_OPINFO_RECORD", "")
# The zyx device the tests run on (zyx:0) is the first configured backend.
BACKEND = CONFIG.backends[0] if CONFIG.backends else "cpu"
# Isolate each test (default): a zyx kernel that segfaults would otherwise kill the xdist worker
# and lose every outcome after it. Forking is cheap but a child cannot use OpenCL or CUDA (docstring);
# with the CPU as zyx:0 the children never touch the OpenCL devices test_backends.py adds.
_DEFAULT_ISOLATE = "worker" if BACKEND in ("opencl", "cuda") else "fork"
if os.environ.get("ZYX_OPINFO_FORK", "1") in ("", "0"):
    _DEFAULT_ISOLATE = "none"
ISOLATE = os.environ.get("ZYX_OPINFO_ISOLATE", "") or _DEFAULT_ISOLATE
if ISOLATE not in ("fork", "worker", "none"):
    raise ValueError(f"ZYX_OPINFO_ISOLATE={ISOLATE!r}: expected fork, worker or none")
CRASH = "Crash:"
STRICT = os.environ.get("ZYX_OPINFO_STRICT", "") not in ("", "0")
# A hung kernel compile must not stall the whole (2-core) run; the alarm turns it into a failure.
# PoCL compiles each new kernel for ~1 s (more on a busy machine), and a test makes dozens.
_DEFAULT_TIMEOUT_S = 240 if BACKEND == "opencl" else 120
TEST_TIMEOUT_S = int(os.environ.get("ZYX_OPINFO_TIMEOUT", "") or _DEFAULT_TIMEOUT_S)


def _load(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.exists() else {}


EXPECTED_FILE = Path(__file__).with_name("opinfo_expected_failures.json")
# Test name -> reason. On a GPU backend the CPU file's entries apply too (most failures are
# missing lowerings, the same on every backend); the backend's file lists only the failures seen
# there alone.
EXPECTED: dict[str, str] = _load(EXPECTED_FILE)
if BACKEND in ("opencl", "cuda"):
    EXPECTED.update(_load(Path(__file__).with_name(f"opinfo_expected_failures_{BACKEND}.json")))

# Outputs of these ops are random or uninitialized: only shape and dtype are comparable.
_RANDOM_WORDS = ("rand", "normal", "bernoulli", "multinomial", "dropout", "uniform", "empty",
                 "exponential", "geometric", "cauchy", "rrelu", "poisson")

# (atol, rtol) per dtype. zyx reduces in another order than ATen and fuses (no intermediate
# rounding), so float tolerances are looser than torch's defaults; integer results are exact.
TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}


def is_random(op) -> bool:
    return any(word in op.name for word in _RANDOM_WORDS)


def to_zyx(value):
    """Move one sample-input leaf to zyx, keeping leaf-ness and requires_grad. A meta tensor stays
    meta: error inputs use one as a tensor on another device (it has no data to copy). A partial
    view of a larger storage (``base[5:15]``) moves with its whole storage and stays that view:
    ops that address the storage (as_strided's storage_offset) must see the same elements."""
    if isinstance(value, torch.Tensor) and not value.is_meta:
        base = value._base
        if (base is not None and base.dtype == value.dtype and base.is_contiguous()
                and value.storage_offset() + value.numel() < base.numel()):
            view = base.detach().to("zyx").as_strided(value.shape, value.stride(), value.storage_offset())
            return view.requires_grad_(value.requires_grad)
        return value.detach().to("zyx").requires_grad_(value.requires_grad)
    return value


def device_to_zyx(value):
    """A positional device argument naming the CPU (``x.to("cpu", torch.float64)``, the samples
    being made for the CPU) names zyx instead, as a ``device=`` keyword does."""
    if isinstance(value, torch.device) and value.type == "cpu" or value == "cpu":
        return torch.device("zyx")
    return value


def sample_to_zyx(sample):
    """The sample with its tensors on zyx; a factory op's ``device=`` kwarg is pointed at zyx too."""
    moved = sample.transform(to_zyx)
    moved.args = tuple(device_to_zyx(a) if isinstance(a, (torch.device, str)) else a for a in moved.args)
    if "device" in moved.kwargs:
        moved.kwargs = {**moved.kwargs, "device": "zyx"}
    return moved


def no_tensors(sample) -> bool:
    """Whether a sample has no tensor at all (a factory called without ``device=``, as
    ``linspace(1, 3, 1)``: run on zyx as the default device, its result is zyx's to compare)."""
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return not any(isinstance(v, torch.Tensor) for v in leaves)


def realize_all(value):
    """Bring every zyx tensor in ``value`` to the CPU (forces lazy work, surfaces its errors)."""
    return tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, value)


def float32_reference(op, sample, cpu_out):
    """CPU torch's result for a half/bfloat16 ``sample`` computed in float32 and rounded to the
    dtypes of ``cpu_out``, or None when the op does not run so. CPU torch's own half results
    depend on the CPU's kernels: on an AVX-512 Xeon its half conv_transpose2d was 0.067 off
    the float64 result where zyx's (float32 sums rounded once) was 0.031, and where large terms
    cancel that exceeds the tolerance. A zyx result that matches neither is wrong."""
    def up(value):
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
            return value.detach().float()
        return value

    try:
        out = op(up(sample.input), *tree_map(up, sample.args), **tree_map(up, sample.kwargs))
    except (RuntimeError, TypeError, ValueError, NotImplementedError):  # (no float32 form)
        return None
    leaves, spec = tree_flatten(out)
    expected = tree_flatten(cpu_out)[0]
    if len(leaves) != len(expected):
        return None
    rounded = [v.to(e.dtype) if isinstance(v, torch.Tensor) and isinstance(e, torch.Tensor) else v
               for v, e in zip(leaves, expected)]
    return tree_unflatten(rounded, spec)


def compare(zyx_out, cpu_out, dtype, values=True, what="output"):
    """Assert that two (nested) results match: structure, shapes, dtypes and (optionally) values."""
    zyx_leaves = tree_flatten(zyx_out)[0]
    cpu_leaves = tree_flatten(cpu_out)[0]
    assert len(zyx_leaves) == len(cpu_leaves), f"{what}: {len(zyx_leaves)} vs {len(cpu_leaves)} leaves"
    atol, rtol = TOLERANCES.get(dtype, (0, 0))
    for i, (z, c) in enumerate(zip(zyx_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor):
            assert isinstance(z, torch.Tensor), f"{what}[{i}]: {type(z)} is not a tensor"
            assert z.device.type == "zyx", f"{what}[{i}] on {z.device}, not zyx"
            assert z.dtype == c.dtype, f"{what}[{i}] dtype {z.dtype} != {c.dtype}"
            assert z.shape == c.shape, f"{what}[{i}] shape {tuple(z.shape)} != {tuple(c.shape)}"
            if values:
                tol = TOLERANCES.get(c.dtype, (atol, rtol))
                where = f"{what}[{i}]"
                torch.testing.assert_close(z.detach().cpu(), c.detach(), atol=tol[0], rtol=tol[1],
                                           equal_nan=True, check_device=False,
                                           msg=lambda m, where=where: f"{where}: {m}")
        elif values:
            both_nan = isinstance(z, float) and isinstance(c, float) and math.isnan(z) and math.isnan(c)
            assert z == c or both_nan, f"{what}[{i}]: {z!r} != {c!r}"


def record(name: str, outcome: str, reason: str = "", **extra) -> None:
    """Append an outcome (``pass``/``fail``; test_opinfo_compile.py adds ``info`` records with
    ``extra`` fields, written from inside the isolated test body) to the worker's record file."""
    if not RECORD_DIR:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(RECORD_DIR).mkdir(parents=True, exist_ok=True)
    with open(Path(RECORD_DIR) / f"{worker}.jsonl", "a") as f:
        f.write(json.dumps({"test": name, "outcome": outcome, "reason": reason, **extra}) + "\n")


def one_line(exc: BaseException) -> str:
    if isinstance(exc, ForkedFailure):
        return str(exc)
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def run_inline(body, timeout_s: int = TEST_TIMEOUT_S) -> None:
    def alarm(signum, frame):
        raise TimeoutError(f"test ran longer than {timeout_s}s")

    saved = CONFIG.cpu_fallback
    CONFIG.cpu_fallback = False
    old_handler = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    try:
        body()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        CONFIG.cpu_fallback = saved


class ForkedFailure(Exception):
    """A failure inside the forked child; the message starts with the child's exception type."""

    def __str__(self):
        return str(self.args[0])


def run_forked(body, timeout_s: int = TEST_TIMEOUT_S) -> None:
    """Run ``body`` in a forked child so a segfault in a kernel fails one test, not the worker."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        os.close(read_fd)
        try:
            run_inline(body, timeout_s)
            msg = ""
        except BaseException as exc:  # noqa: BLE001 - the parent turns it into the test failure
            msg = one_line(exc) or "failure"
        with os.fdopen(write_fd, "w") as f:
            f.write(msg)
        os._exit(0)
    os.close(write_fd)
    # The child may deadlock in C (a lock held by another thread at fork time), where its own
    # SIGALRM handler never runs: the parent enforces the timeout and kills it.
    ready, _, _ = select.select([read_fd], [], [], timeout_s + 5)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_fd)
        raise ForkedFailure(f"Timeout: forked test did not finish in {timeout_s}s (killed)")
    with os.fdopen(read_fd) as f:
        msg = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise ForkedFailure(f"{CRASH} killed by signal {signal.Signals(os.WTERMSIG(status)).name}")
    if msg:
        raise ForkedFailure(msg)


class Worker:
    """A spawned Python process that runs test bodies by test id (``serve``), one at a time.

    Requests and replies are lines on two pipes of their own (the test's prints cannot mix
    in). The worker is started on first use and again after it crashed or was killed.
    """

    proc: subprocess.Popen | None = None

    @classmethod
    def start(cls) -> None:
        to_read, to_write = os.pipe()  # parent -> worker
        from_read, from_write = os.pipe()  # worker -> parent
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import torch_zyx; "
                f"import test_opinfo; test_opinfo.serve({to_read}, {from_write})")
        # torch_zyx first: it registers the zyx device before torch's test modules look for it.
        env = {**os.environ, "ZYX_OPINFO_ISOLATE": "none"}
        cls.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_read, from_write),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
        os.close(to_read)
        os.close(from_write)
        cls.requests = os.fdopen(to_write, "w")
        cls.replies = os.fdopen(from_read, "r")

    @classmethod
    def close(cls) -> None:
        """At exit: end of requests; the worker's loop ends and it exits, and is waited for."""
        if cls.proc is not None:
            cls.requests.close()
            try:
                cls.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls.proc.kill()
                cls.proc.wait()
            cls.replies.close()
            cls.proc = None

    @classmethod
    def stop(cls) -> None:
        if cls.proc is not None:
            cls.proc.kill()
            cls.proc.wait()
            cls.requests.close()
            cls.replies.close()
            cls.proc = None

    @classmethod
    def run(cls, test_id: str, timeout_s: int = TEST_TIMEOUT_S) -> None:
        """Run the test ``test_id`` (``module.Class.method``) in the worker; raise its failure."""
        if cls.proc is None:
            cls.start()
        try:
            cls.requests.write(test_id + "\n")
            cls.requests.flush()
        except BrokenPipeError:
            pass  # it died since the last test: the reply read below finds out how
        # Importing torch and op_db takes the new worker ~10-20 s on a busy machine.
        ready, _, _ = select.select([cls.replies], [], [], timeout_s + 60)
        if not ready:
            cls.stop()
            raise ForkedFailure(f"Timeout: test did not finish in {timeout_s}s in the worker (killed)")
        reply = cls.replies.readline()
        if not reply:  # EOF: the worker died in the test
            code = cls.proc.wait()
            cls.proc = None
            cls.requests.close()
            cls.replies.close()
            how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            raise ForkedFailure(f"{CRASH} {how}")
        msg = json.loads(reply)
        if msg:
            raise ForkedFailure(msg)


atexit.register(Worker.close)

# Set once autograd has started its device threads in this process (any backward does, once a
# zyx device is registered): torch then refuses backward in every forked child, so the tests
# of this pytest worker go to the spawned Worker from there on.
_fork_unusable = [False]
_BAD_AUTOGRAD_FORK = "Unable to handle autograd's threading in combination with fork"


def run_forked_or_spawned(body, test_id: str, timeout_s: int = TEST_TIMEOUT_S) -> None:
    """``run_forked``, or the spawned ``Worker`` when this process can no longer fork autograd.

    Under pytest-xdist the OpInfo tests share a process with other test files, whose training
    tests run backward in the parent; a child forked after that fails every gradient test.
    """
    try:
        run_forked(body, timeout_s)
    except ForkedFailure as exc:
        if _BAD_AUTOGRAD_FORK not in str(exc):
            raise
        _fork_unusable[0] = True
        Worker.run(test_id, timeout_s)

# True in the worker process (``serve``): run_checked runs the body in-process there.
IN_WORKER = False
# In the worker: the message of the last failure inside run_checked ("" when it passed).
_worker_failure = [""]


def serve(read_fd: int, write_fd: int) -> None:
    """The worker's loop: read a test id (``module.Class.method``: test_opinfo_compile.py's tests
    run here too), run that test in-process, reply its failure or ""."""
    global IN_WORKER
    IN_WORKER = True
    replies = os.fdopen(write_fd, "w")
    set_up: set[type] = set()
    for line in os.fdopen(read_fd):
        module, cls_name, method = line.strip().rsplit(".", 2)
        cls = getattr(importlib.import_module(module), cls_name)
        if cls not in set_up:
            cls.setUpClass()
            set_up.add(cls)
        _worker_failure[0] = ""
        result = unittest.TestResult()
        cls(method).run(result)
        msg = _worker_failure[0]
        if not msg and (result.errors or result.failures):  # failed outside the test body
            msg = (result.errors + result.failures)[0][1].strip().splitlines()[-1][:200]
        replies.write(json.dumps(msg) + "\n")
        replies.flush()


class OpInfoChecks:
    """``run_checked`` for an OpInfo test class: isolation, recording and expected failures
    (``expected``: test name -> reason, from ``expected_file``). A mixin, not a ``Test*`` class,
    so that test_opinfo_compile.py imports it without pytest collecting it there."""

    expected: dict[str, str] = EXPECTED
    expected_file: Path = EXPECTED_FILE
    timeout_s: int = TEST_TIMEOUT_S

    def run_checked(self, body):
        """Run ``body`` without CPU fallback; record the outcome; xfail known failures."""
        name = self._testMethodName
        expected = self.expected
        test_id = f"{type(self).__module__}.{type(self).__name__}.{name}"
        if IN_WORKER:
            try:
                run_inline(body, self.timeout_s)
            except BaseException as exc:  # the parent turns it into the test failure
                _worker_failure[0] = one_line(exc) or "failure"
                raise
            return
        # A crash cannot be xfailed in-process (it kills the worker); isolated runs still try it.
        if expected.get(name, "").startswith(CRASH) and ISOLATE == "none":
            self.skipTest(f"known crash, run with ZYX_OPINFO_ISOLATE=fork to retry: {expected[name]}")
        # A known hang costs the whole timeout; only the full run (make test-ops) retries it.
        if expected.get(name, "").startswith("Timeout:") and not FULL:
            self.skipTest(f"known hang, ZYX_OPINFO_FULL=1 retries it: {expected[name]}")
        try:
            if ISOLATE == "fork" and not _fork_unusable[0]:
                run_forked_or_spawned(body, test_id, self.timeout_s)
            elif ISOLATE in ("fork", "worker"):
                Worker.run(test_id, self.timeout_s)
            else:
                run_inline(body, self.timeout_s)
        except Exception as exc:  # every failure is recorded, then re-raised or xfailed
            record(name, "fail", one_line(exc))
            if name in expected:
                pytest.xfail(f"expected failure: {expected[name]}")
            raise
        record(name, "pass")
        if STRICT and name in expected:
            self.fail(f"listed in {self.expected_file.name} but passes now; regenerate the file")


class TestZyxOpInfo(OpInfoChecks, TestCase):
    """PyTorch's device-generic OpInfo tests, instantiated for zyx only."""

    @ops(op_db, allowed_dtypes=DTYPES)
    def test_forward(self, device, dtype, op):
        def body():
            values = not is_random(op)
            for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
                if values:
                    torch.manual_seed(0)
                cpu_out = op(sample.input, *sample.args, **sample.kwargs)
                zs = sample_to_zyx(sample)
                if values:
                    torch.manual_seed(0)
                if no_tensors(zs) and "device" not in zs.kwargs:
                    with torch.device("zyx"):
                        zyx_out = op(zs.input, *zs.args, **zs.kwargs)
                else:
                    zyx_out = op(zs.input, *zs.args, **zs.kwargs)
                try:
                    compare(zyx_out, cpu_out, dtype, values=values, what=f"sample {i} output")
                except AssertionError as mismatch:
                    if not values or dtype not in (torch.float16, torch.bfloat16) \
                            or "not close" not in str(mismatch):
                        raise
                    reference = float32_reference(op, sample, cpu_out)
                    if reference is None:
                        raise
                    try:
                        compare(zyx_out, reference, dtype, what=f"sample {i} output")
                    except AssertionError:
                        raise mismatch from None  # (reported against CPU torch, as without it)
        self.run_checked(body)

    @ops([op for op in op_db if op.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_grad(self, device, dtype, op):
        if is_random(op):
            self.skipTest("random op: its gradient depends on the random values drawn")

        def body():
            for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=True)):
                cpu_in = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                          if isinstance(t, torch.Tensor) and t.requires_grad]
                if not cpu_in:
                    continue
                cpu_out = [t for t in tree_flatten(op(sample.input, *sample.args, **sample.kwargs))[0]
                           if isinstance(t, torch.Tensor) and t.requires_grad]
                if not cpu_out:
                    continue
                gen = torch.Generator().manual_seed(i)
                grads = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in cpu_out]
                cpu_g = torch.autograd.grad(cpu_out, cpu_in, grads, allow_unused=True)

                zs = sample_to_zyx(sample)
                zyx_in = [t for t in tree_flatten((zs.input, zs.args, zs.kwargs))[0]
                          if isinstance(t, torch.Tensor) and t.requires_grad]
                zyx_out = [t for t in tree_flatten(op(zs.input, *zs.args, **zs.kwargs))[0]
                           if isinstance(t, torch.Tensor) and t.requires_grad]
                assert len(zyx_out) == len(cpu_out), "different number of differentiable outputs"
                zyx_g = torch.autograd.grad(zyx_out, zyx_in, [g.to("zyx") for g in grads],
                                            allow_unused=True)
                compare(list(zyx_g), list(cpu_g), dtype, what=f"sample {i} grad")
        self.run_checked(body)

    @ops([op for op in op_db if op.error_inputs_func is not None], dtypes=OpDTypes.none)
    def test_errors(self, device, op):
        def body():
            # Made on the device, as PyTorch's own test_errors does: an input and an out= view of
            # it stay one storage there (copied over from CPU tensors they would be two, and an
            # overlap error could never be raised). An op whose error inputs cannot be made on
            # zyx gets them made on the CPU and copied.
            try:
                errors = [(err, err.sample_input) for err in op.error_inputs(device)]
            except Exception:  # noqa: BLE001  (any failure to make them: the CPU route below)
                errors = [(err, sample_to_zyx(err.sample_input)) for err in op.error_inputs("cpu")]
            # The type the OpInfo declares for this device (PyTorch's own expectation: for devices
            # other than the CPU some are the meta kernel's) or the one CPU torch raises; an error
            # input CPU torch no longer refuses may pass on zyx too.
            cpu_raises = [_raised(op, err.sample_input) for err in op.error_inputs("cpu")]
            for i, (err, zs) in enumerate(errors):
                accepted = (err.error_type,) + ((cpu_raises[i],) if i < len(cpu_raises) and cpu_raises[i] else ())
                try:
                    realize_all(op(zs.input, *zs.args, **zs.kwargs))
                except accepted:
                    continue
                except Exception as exc:
                    raise AssertionError(f"error input {i}: raised {one_line(exc)}, "
                                         f"expected {err.error_type.__name__}") from exc
                if i >= len(cpu_raises) or cpu_raises[i] is not None:
                    raise AssertionError(f"error input {i}: no {err.error_type.__name__} raised")
        self.run_checked(body)


def _raised(op, sample) -> type | None:
    """The type of the exception CPU torch raises for an error input's ``sample``, or None."""
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as exc:  # noqa: BLE001  (any type: it is what zyx must raise too)
        return type(exc)
    return None


instantiate_device_type_tests(TestZyxOpInfo, globals(), only_for=("privateuse1",))


def in_slice(test_name: str, stride: int = STRIDE) -> bool:
    """Deterministic 1/``stride`` subset by a stable (crc32) hash of the test name (none for 0)."""
    return FULL or (stride > 0 and zlib.crc32(test_name.encode()) % stride == 0)


def apply_slice(namespace: dict, base: str, stride: int = STRIDE) -> None:
    """Keep the slice of the tests instantiated into ``namespace`` from the class named ``base``
    (instantiate_device_type_tests removes that class from the namespace)."""
    # Drop the tests outside the slice before pytest collects them, rather than skipping them:
    # a skip per test would hide real skips among thousands of "not in slice" ones.
    for cls_name in [n for n in namespace if n.startswith(base) and n != base]:
        cls = namespace[cls_name]
        for attr in [a for a in list(vars(cls)) if a.startswith("test_")]:
            if not in_slice(attr, stride):
                delattr(cls, attr)


apply_slice(globals(), "TestZyxOpInfo")


def test_supports_dtype():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.complex64,
                  torch.complex128, torch.complex32):
        assert torch_zyx.supports_dtype(dtype), dtype
    assert not torch_zyx.supports_dtype(torch.float8_e5m2)


def test_unsupported_dtype_raises():
    # Documented behaviour: an unsupported dtype never silently falls back; creating or moving
    # a float8 tensor to zyx raises TypeError naming the dtype (complex32/64/128 are zyx dtypes:
    # tests/test_complex.py, tests/test_complex32.py).
    with pytest.raises(TypeError, match="float8_e5m2"):
        torch.zeros(3, dtype=torch.float8_e5m2, device="zyx")
    with pytest.raises(TypeError, match="float8_e5m2"):
        torch.ones(3).to(torch.float8_e5m2).to("zyx")
    assert torch.zeros(3, dtype=torch.complex64, device="zyx").dtype == torch.complex64
