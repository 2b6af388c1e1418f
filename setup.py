"""Build hook for the C extensions: torch_zyx.lazy._native (the lazy graph's node table) and
torch_zyx.runtime._launch (the CPU runtime's foreign calls).

Everything else is in pyproject.toml. The extensions are optional: without a C compiler or the
Python headers the install still succeeds and torch_zyx uses its Python node table
(torch_zyx/lazy/nodes_py.py) and ctypes calls (torch_zyx/runtime/cpu_calls.py), only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("torch_zyx.lazy._native", ["torch_zyx/lazy/_native.c"], optional=True),
    Extension("torch_zyx.runtime._launch", ["torch_zyx/runtime/_launch.c"], optional=True),
])
