"""OpenCL benchmark: GB/s of an elementwise chain, a softmax and a full sum on the zyx OpenCL
device, next to torch CUDA eager when CUDA is available (and CPU torch otherwise).

Run ``.venv/bin/python bench/bench_opencl.py [--size-mb 256] [--repeats 20]``. The zyx devices
come from ``ZYX_BACKENDS`` (default here ``opencl,cpu``); the first OpenCL device is used.

NVIDIA's OpenCL without an ICD file: the driver ships ``libnvidia-opencl.so.1`` but some
installs (containers) lack ``/etc/OpenCL/vendors/nvidia.icd``. The ICD loader (also the one
bundled in pyopencl's wheel) reads ``OCL_ICD_VENDORS``, a directory of .icd files or one .icd
file whose first line is the library name::

    mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
    OCL_ICD_VENDORS=/tmp/icd/nvidia.icd .venv/bin/python bench/bench_opencl.py

(use the full path of the library, from ``ldconfig -p | grep nvidia-opencl``, if it is not on
the loader path). ZYX_DEBUG=1 prints the devices found.

GB/s counts the bytes a perfect kernel moves (inputs read once, output written once) over
the median wall time of one call including its synchronization, so launch and recording
overheads count against zyx as they do in eager torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("ZYX_BACKENDS", "opencl,cpu")

import torch  # after setting ZYX_BACKENDS: importing torch loads torch_zyx


def chain(x):
    # Ten elementwise ops, one fused kernel on zyx.
    return (((x * 2 + 1).relu() * x - 3) * 0.5 + x).sigmoid() * x + 1


def softmax(x):
    return torch.softmax(x, -1)


def total(x):
    # One long reduction to a scalar: the grouped (local-memory tree) reduce on GPUs.
    return x.sum()


def row_sum(x):
    return x.sum(-1)


def _median(fn, x, sync, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(x)  # held through the sync: a lazy result nobody holds is never computed
        sync()
        times.append(time.perf_counter() - start)
        del result
    return statistics.median(times)


def _device_sync() -> None:
    # torch.zyx.synchronize() realizes every pending result, then waits on the event table;
    # but freeing a kernel's temporaries takes the events that also cover its output, so the
    # table can be empty while kernels still run. Finishing the OpenCL queues waits for real.
    from torch_zyx.execute import contexts

    torch.zyx.synchronize()
    for ctx in contexts.devices():
        queue = getattr(ctx.runtime, "queue", None)
        if queue is not None:
            queue.finish()


def _opencl_device() -> torch.device | None:
    from torch_zyx.execute import contexts

    for ctx in contexts.devices():
        if ctx.runtime.name == "opencl":
            print(f"zyx:{ctx.index} {ctx.runtime.describe()}")
            return torch.device("zyx", ctx.index)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=256.0, help="input size in MiB (float32)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    dev = _opencl_device()
    if dev is None:
        raise SystemExit("no zyx OpenCL device: install pyopencl and an OpenCL driver (`make ocl`), "
                         "or point OCL_ICD_VENDORS at an .icd file (see this file's docstring)")
    numel = int(args.size_mb * 2**20 // 4)
    cols = 4096
    rows = max(1, numel // cols)
    cases = [("chain x10", chain, (rows * cols,)), ("softmax", softmax, (rows, cols)),
             ("sum", total, (rows * cols,)), ("row sum", row_sum, (rows, cols))]
    ref_name = "cuda eager" if torch.cuda.is_available() else "cpu eager"
    print(f"{'case':<12} {'shape':>16} {'zyx opencl GB/s':>16} {ref_name + ' GB/s':>16}")
    for name, fn, shape in cases:
        x = torch.randn(*shape)
        # Read the input once, write the output once (reductions write next to nothing).
        nbytes = x.numel() * 4 + fn(x).numel() * 4
        xz = x.to(dev)
        for _ in range(3):  # compile and cache the kernels
            fn(xz).cpu()
        torch.testing.assert_close(fn(xz).cpu(), fn(x), rtol=1e-3, atol=1e-3)
        t_zyx = _median(fn, xz, _device_sync, args.repeats)
        if torch.cuda.is_available():
            xc = x.cuda()
            fn(xc)
            torch.cuda.synchronize()
            t_ref = _median(fn, xc, torch.cuda.synchronize, args.repeats)
        else:
            t_ref = _median(fn, x, lambda: None, max(3, args.repeats // 4))
        print(f"{name:<12} {tuple(shape)!s:>16} {nbytes / t_zyx / 1e9:16.1f} {nbytes / t_ref / 1e9:16.1f}")


if __name__ == "__main__":
    main()
