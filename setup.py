"""Build hook for the C extensions: torch_zyx.lazy._native (the lazy graph's node table),
torch_zyx.runtime._launch (the CPU runtime's foreign calls) and torch_zyx.runtime._cuda_launch (a
CUDA plan's launches in one call; it calls the driver through an address, so it needs no CUDA
headers).

Everything else is in pyproject.toml. The extensions are optional: without a C compiler or the
Python headers the install still succeeds and torch_zyx uses its Python node table
(torch_zyx/lazy/nodes_py.py), ctypes calls (torch_zyx/runtime/cpu_calls.py) and a cuda-bindings
call per CUDA kernel, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("torch_zyx.lazy._native", ["torch_zyx/lazy/_native.c"], optional=True),
    Extension("torch_zyx.runtime._launch", ["torch_zyx/runtime/_launch.c"], optional=True,
              depends=["torch_zyx/runtime/_words.h"]),
    Extension("torch_zyx.runtime._cuda_launch", ["torch_zyx/runtime/_cuda_launch.c"], optional=True,
              depends=["torch_zyx/runtime/_words.h"]),
])
