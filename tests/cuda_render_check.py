"""CUDA render check (CI has no GPU): ZYX_CHECK_CUDA_RENDER=1 renders every kernel the fusion
and op tests schedule as CUDA C, as a CUDA device would lower it (a representative H200:
132 SMs, 1024 threads and 48 KiB of shared memory per block), and compiles them all with
NVRTC for sm_90 at the end of the session (NVRTC needs no GPU), so a renderer bug fails CI.
Each process (xdist workers, forked OpInfo children) wraps the executor's plan building and
writes each new plan's kernel sources to a directory shared by the session; every 25 tests and
at its end, each process that runs tests compiles, in batches (runtime/cuda.py
``compile_each``), the kernels no other process has claimed yet (the cost spreads over the
session), and the controller compiles what is left and fails the session on any error, with
the kernel's source and NVRTC's log. Without cuda-bindings or NVRTC the check is skipped with
the reason in the summary. The compile stops at PTX for compute_90 (the C++ front end and
NVVM: every error of a rendered source), which takes a fifth of the time of CUBIN, whose
extra step (ptxas) checks resources the lowering options already bound (shared memory);
ZYX_CHECK_CUDA_RENDER=cubin compiles to sm_90 CUBIN (~40 s more for ~2800 kernels on 2 cores;
tests/test_cuda.py always goes to CUBIN for its representative kernels).
ZYX_CHECK_CUDA_RENDER_KEEP=1 keeps the directory of sources (its path is in the environment
variable ZYX_CHECK_CUDA_RENDER_DIR) for a look at them.
"""

import hashlib as _hashlib
import os as _os
import tempfile as _tempfile
import time as _time
import traceback as _traceback
from pathlib import Path as _Path

import pytest

_CUDA_CHECK_ENV = "ZYX_CHECK_CUDA_RENDER"
_CUDA_CHECK_DIR_ENV = "ZYX_CHECK_CUDA_RENDER_DIR"
# The test files whose kernels are checked (the fusion and op tests, the OpInfo slice).
_CUDA_CHECK_FILES = ("test_fusion.py", "test_ops.py", "test_ops_families.py", "test_ops_more.py",
                     "test_opinfo.py", "test_cuda.py")
_CUDA_CHECK_ARCH = 90
_cuda_check = {"active": False, "seen": set(), "skip": "", "errors": [], "count": 0, "seconds": {}}


def _cuda_check_reason() -> str:
    """Why the check cannot run here ("" when it can)."""
    try:
        from torch_zyx.runtime.cuda import nvrtc_version
        nvrtc_version()
    except Exception as exc:  # noqa: BLE001  (ImportError, or libnvrtc not found)
        return f"cuda-bindings / NVRTC not available ({type(exc).__name__}: {exc})"
    return ""


def _cuda_check_options():
    from types import SimpleNamespace

    from torch_zyx.execute.contexts import lowering_options

    h200 = SimpleNamespace(renderer="cuda", is_gpu=True, compute_units=132, max_group_size=1024,
                           local_memory=48 * 1024, tensor_cores=("bfloat16", "float16"))
    return lowering_options(h200)


_KERNEL_MARK = "//@zyx-kernel "


def _install_cuda_render_check(directory: _Path) -> None:
    from torch_zyx.codegen import cuda as cuda_renderer
    from torch_zyx.codegen.lower import kept_composites, lower
    from torch_zyx.execute import realize
    from torch_zyx.lazy.kernelize import kernelize

    options = _cuda_check_options()
    build_plan = realize._build_plan
    lowered = set()  # kernels lowered already (the key of realize._lowered)
    written = {"files": 0}
    installed_by = _os.getpid()

    def checked_build_plan(device, roots, sig, **options):
        plan = build_plan(device, roots, sig, **options)
        if _cuda_check["active"]:
            start = _time.thread_time()  # CPU time: wall time on a loaded machine says little
            try:
                kernels = _render_for_cuda(roots, sig)
            except Exception:  # noqa: BLE001  (a lowering or renderer failure is the finding)
                kernels = [("error", _traceback.format_exc())]
            if kernels:
                # One file per plan (the sources of its new kernels), written then renamed.
                written["files"] += 1
                fd, tmp = _tempfile.mkstemp(dir=directory, suffix=".tmp")
                with _os.fdopen(fd, "w") as out:
                    out.write("".join(f"{_KERNEL_MARK}{name}\n{source}" for name, source in kernels))
                _os.replace(tmp, directory / f"{_os.getpid()}-{written['files']}.cu")
            pid, seconds = _os.getpid(), _cuda_check["seconds"]
            seconds[pid] = seconds.get(pid, 0.0) + _time.thread_time() - start  # (forks: their own)
            if pid != installed_by:  # a forked child (OpInfo): no session end of its own
                (directory / f"time-{pid}.txt").write_text(str(seconds[pid]))
        return plan

    def _render_for_cuda(roots, sig):
        schedule = kernelize(roots, sig, None if options.block_tiles else options.matmul_tile,
                             kept_composites(options))
        kernels = []
        for kernel in schedule.kernels:
            dtypes_ = tuple(sig.buffers[ref].dtype if kind == "in" else sig.scalar_dtypes[ref]
                            if kind == "scalars" else schedule.temps[ref][0] for kind, ref in kernel.slots)
            stores = tuple((kernel.slots.index(("tmp", s.target)), s.value, s.view) for s in kernel.stores)
            key = (dtypes_, len(kernel.slots), stores)
            if key in lowered:
                continue
            lowered.add(key)
            source = cuda_renderer.render(lower(kernel, "zyx_kernel", list(dtypes_), options))
            digest = _hashlib.sha1(source.encode()).hexdigest()
            if digest not in _cuda_check["seen"]:
                _cuda_check["seen"].add(digest)
                name = f"k_{digest[:16]}"
                kernels.append((name, source.replace("zyx_kernel(", f"{name}(")))
        return kernels

    realize._build_plan = checked_build_plan


def pytest_configure(config):
    if _os.environ.get(_CUDA_CHECK_ENV, "") in ("", "0"):
        return
    reason = _cuda_check_reason()
    if reason:
        _cuda_check["skip"] = reason
        return
    directory = _os.environ.get(_CUDA_CHECK_DIR_ENV)
    if not directory:  # the controller (or a run without xdist): workers inherit it
        directory = _tempfile.mkdtemp(prefix="zyx-cuda-check-")
        _os.environ[_CUDA_CHECK_DIR_ENV] = directory
        _cuda_check["owner"] = True
    _cuda_check["forked_from"] = _os.getpid()  # (a forked OpInfo child has another pid)
    _install_cuda_render_check(_Path(directory))


def pytest_runtest_setup(item):
    _cuda_check["active"] = item.path.name in _CUDA_CHECK_FILES


# Every this many tests a process (the run without xdist, each xdist worker) compiles the kernels
# written so far that no process has claimed, when there are enough for a batch: the compile
# cost is spread over the session instead of waiting for its end.
_COMPILE_EVERY_TESTS = 25
_COMPILE_MIN_FILES = 16


def pytest_runtest_teardown(item):
    directory = _os.environ.get(_CUDA_CHECK_DIR_ENV)
    if not directory or _cuda_check.get("forked_from", _os.getpid()) != _os.getpid():
        return
    _cuda_check["tests"] = _cuda_check.get("tests", 0) + 1
    if _cuda_check["tests"] % _COMPILE_EVERY_TESTS == 0:
        with _os.scandir(directory) as entries:
            files = sum(1 for entry in entries if entry.name.endswith(".cu"))
        if files >= _COMPILE_MIN_FILES:
            _compile_claimed(_Path(directory))


def _compile_part(part):
    """Compile ``(name, source)`` pairs (in a forked process): the errors as text."""
    from torch_zyx.runtime.cuda import compile_each

    ptx = _os.environ.get(_CUDA_CHECK_ENV, "") != "cubin"
    return [str(error) for error in compile_each(part, _CUDA_CHECK_ARCH, fast=True, ptx=ptx)]


def _claim_kernels(directory: _Path) -> tuple[list, list]:
    """The kernels written so far that no process has claimed, claimed for this one (a file by
    renaming it into done/, a kernel by a marker file per name made exclusively: the same
    kernel comes from several processes), and the lowering or rendering failures."""
    done = directory / "done"
    done.mkdir(exist_ok=True)
    kernels, errors = {}, []
    for path in sorted(directory.glob("*.cu")):
        claimed = done / path.name
        try:
            _os.rename(path, claimed)
        except FileNotFoundError:  # another process claimed it
            continue
        for part in claimed.read_text().split(_KERNEL_MARK)[1:]:
            name, _, source = part.partition("\n")
            if name == "error":
                name = "error-" + _hashlib.sha1(source.encode()).hexdigest()[:16]
            if name in kernels:
                continue
            try:
                _os.close(_os.open(done / name, _os.O_CREAT | _os.O_EXCL))
            except FileExistsError:
                continue
            if name.startswith("error-"):
                errors.append(f"lowering or rendering for CUDA failed:\n{source}")
            else:
                kernels[name] = source
    return sorted(kernels.items()), errors


def _compile_claimed(directory: _Path, processes: int = 1) -> None:
    """Claim and compile the unclaimed kernels (in ``processes`` forked processes), adding to
    this process's count, time and errors."""
    start = _time.perf_counter()
    sources, errors = _claim_kernels(directory)
    processes = max(1, min(len(sources) // 64, processes))
    if processes > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            for found in pool.map(_compile_part, [sources[i::processes] for i in range(processes)]):
                errors.extend(found)
    elif sources:
        errors.extend(_compile_part(sources))
    _cuda_check["count"] += len(sources)
    _cuda_check["errors"].extend(errors)
    _cuda_check["compile_seconds"] = _cuda_check.get("compile_seconds", 0.0) + _time.perf_counter() - start


def pytest_sessionfinish(session, exitstatus):
    # Every process that ran tests compiles what is left unclaimed when its tests are done; the
    # controller compiles the rest, gathers the errors and counts, and fails the session on any
    # error.
    directory = _os.environ.get(_CUDA_CHECK_DIR_ENV)
    if not directory:
        return
    directory = _Path(directory)
    owner = _cuda_check.pop("owner", False)
    if not owner and not hasattr(session.config, "workerinput"):
        return  # (a forked child that happens to finish a session: nothing of its own)
    start = _time.perf_counter()
    _compile_claimed(directory, processes=(_os.cpu_count() or 1) if owner else 1)
    pid = _os.getpid()
    (directory / f"result-{pid}.txt").write_text(
        f"{_cuda_check['count']} {_cuda_check.get('compile_seconds', 0.0)} "
        f"{_cuda_check['seconds'].get(pid, 0.0)}\n")
    (directory / f"errors-{pid}.txt").write_text("\0".join(_cuda_check["errors"]))
    if not owner:
        return
    import shutil

    count = compile_seconds = render_seconds = 0
    errors = []
    for path in directory.glob("result-*.txt"):
        n, compiling, rendering = path.read_text().split()
        count, compile_seconds, render_seconds = (count + int(n), compile_seconds + float(compiling),
                                                  render_seconds + float(rendering))
    for path in directory.glob("time-*.txt"):
        render_seconds += float(path.read_text() or 0)
    for path in directory.glob("errors-*.txt"):
        errors.extend(e for e in path.read_text().split("\0") if e)
    if not _os.environ.get("ZYX_CHECK_CUDA_RENDER_KEEP"):
        shutil.rmtree(directory, ignore_errors=True)
    _cuda_check.update(errors=errors, count=count, compile_seconds=compile_seconds,
                       render_seconds=render_seconds, final_seconds=_time.perf_counter() - start)
    if errors and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _os.environ.get(_CUDA_CHECK_ENV, "") in ("", "0"):
        return
    if _cuda_check["skip"]:
        terminalreporter.write_line(f"zyx CUDA render check skipped: {_cuda_check['skip']}")
        return
    if "compile_seconds" not in _cuda_check:
        return
    errors = _cuda_check["errors"]
    for error in errors:
        terminalreporter.write_sep("-", "CUDA render check failure", red=True)
        terminalreporter.write_line(error)
    terminalreporter.write_line(
        f"zyx CUDA render check: {_cuda_check['count']} kernels rendered (lowering and rendering: "
        f"{_cuda_check['render_seconds']:.1f} s of CPU) and compiled with NVRTC for "
        f"{'sm' if _os.environ.get(_CUDA_CHECK_ENV) == 'cubin' else 'compute'}_{_CUDA_CHECK_ARCH} "
        f"({_cuda_check['compile_seconds']:.1f} s, summed over the processes; "
        f"{_cuda_check['final_seconds']:.1f} s after the last test): {len(errors)} failed"
        + (f"; sources kept in {_os.environ[_CUDA_CHECK_DIR_ENV]}"
           if _os.environ.get("ZYX_CHECK_CUDA_RENDER_KEEP") else ""), red=bool(errors), green=not errors)
