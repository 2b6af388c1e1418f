"""Registering the zyx device with PyTorch: the step ``import torch_zyx`` (or torch's backend
autoload) runs once.

The top of the flow: it wires PyTorch to the device. It installs the C++ device guard and
hooks (device_guard.py) before PyTorch's PrivateUse1 Python-backend set-up, registers
``torch.zyx`` (device_module.py), the factory kernels that never reach the Python key, the
fallback for ops with no kernel, autocast, storage copies and module conversions, tells
dispatch whether errors may propagate out of a backward (``dispatch.set_native_guard``), and
loads the torch.compile backend (compile/) once something imports Dynamo.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from .. import dispatch
from ..ops.core import factory
from ..ops.nn import ctc, layer_norm
from . import autocast, device_guard, device_module, module_conversion, storage

_registered = False


def register() -> None:
    """Register the zyx device (idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    # Before the set-up below, which registers PyTorch's Python guard unless one exists.
    dispatch.set_native_guard(device_guard.install())
    _setup_privateuseone_for_python_backend("zyx", backend_module=device_module.ZyxModule(),
                                            hook=device_module.Hooks(), device_guard=device_module.Guard())
    if device_guard.native_hooks():
        storage.install()
    else:
        storage.refuse_loads()
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", factory.empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", factory.empty_strided, "PrivateUse1")
    lib.impl("_copy_from", factory._copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    # Factories with only backend kernels (no composite form reaching __torch_dispatch__).
    lib.impl("tril_indices", factory.tril_indices, "PrivateUse1")
    lib.impl("triu_indices", factory.triu_indices, "PrivateUse1")
    # arange as the device's kernel, not its composite form (an empty tensor, then arange.out
    # through __torch_dispatch__ with its own result resized and copied in): 110-175 -> ~20-45
    # us per call on the 2-core box; position ids make one every forward of a transformer.
    lib.impl("arange", factory.arange_end, "PrivateUse1")
    lib.impl("arange.start", factory.arange_start_end, "PrivateUse1")
    lib.impl("arange.start_step", factory.arange, "PrivateUse1")
    lib.impl("_efficientzerotensor", factory.efficient_zero_tensor, "PrivateUse1")
    # torch.tensor([t0, t1]) of zyx 0-d tensors reads each with the Python key excluded, so
    # item() must be the device's kernel too (it was an internal assert).
    lib.impl("_local_scalar_dense", factory.local_scalar_dense, "PrivateUse1")
    # ctc_loss with length tensors: PyTorch's composite form for tensor subclasses divides the
    # zyx losses by the (usually CPU) target lengths; the lengths as lists take the path CPU
    # and CUDA tensors take (ops/nn/ctc.py).
    lib.impl("ctc_loss.Tensor", ctc.ctc_loss_tensor_lengths, "AutogradPrivateUse1")
    # layer_norm without a gradient to record: the normalized tensor alone (ops/nn/layer_norm.py).
    lib.impl("layer_norm", layer_norm.layer_norm, "AutogradPrivateUse1")
    _LIBRARIES.append(lib)
    # What reaches the zyx backend without a kernel of its own (a CPU op given a zyx generator).
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(dispatch.no_kernel, "PrivateUse1")
    _LIBRARIES.append(fallback)
    autocast.install()
    module_conversion.install()
    _when_dynamo_is_imported(_install_compile)


def _install_compile() -> None:
    """Dynamo's view of zyx tensors as tensors and the backend's name (compile/dynamo.py), once
    Dynamo is loaded: importing Dynamo here would add ~1.4 s to every ``import torch_zyx``."""
    from ..compile import dynamo

    dynamo.install()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` right after the module ``name`` is first imported (by anyone)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, then = spec.loader.exec_module, self.then

        def exec_then_hook(module) -> None:
            exec_module(module)
            then()

        spec.loader.exec_module = exec_then_hook
        return spec


def _when_dynamo_is_imported(then) -> None:
    if "torch._dynamo" in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", then))


def _copy_from_and_resize(src, dst):
    if tuple(dst.shape) != tuple(src.shape):
        dst.resize_(src.shape)
    return factory.copy_(dst, src)


_LIBRARIES: list = []
