"""Build hook for the one C extension, torch_zyx.lazy._native (the lazy graph's node table).

Everything else is in pyproject.toml. The extension is optional: without a C compiler or the
Python headers the install still succeeds and torch_zyx uses its Python node table
(torch_zyx/lazy/nodes_py.py), only slower to record.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("torch_zyx.lazy._native", ["torch_zyx/lazy/_native.c"], optional=True)])
