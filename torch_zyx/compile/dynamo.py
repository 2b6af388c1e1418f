"""What Dynamo must know of zyx before it traces anything: zyx tensors are tensors, and the
backend "zyx" exists.

Run when Dynamo has been imported (integration/registration.py), possibly while another part of
torch (Inductor) is still being imported: it touches only modules Dynamo's own import loaded
(``variables.builder``, ``backends.registry``) and defers the backend's heavier imports
(AOTAutograd) to its first use.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from torch._dynamo.backends import registry
from torch._dynamo.variables.builder import VariableBuilder

from ..record.tensor import ZyxTensor


def treat_zyx_tensors_as_tensors() -> None:
    """Let Dynamo see a zyx tensor as a tensor of the zyx device.

    Dynamo models a tensor subclass that has its own ``__torch_dispatch__`` as a Python object
    and traces into its methods: zyx's whole dispatch, one graph break after another, and the
    backend never saw a graph. A zyx tensor holds no inner tensors for Dynamo to trace through;
    to a graph it is a plain tensor of the device (fakeified with its sizes, strides and
    device, guarded as one), which is how Dynamo wraps exact ``torch.Tensor``s. Its
    ``_type_dispatch_impl`` table (a cached dict per ``trace_numpy``) maps exact types to the
    wrapping function, and ``ZyxTensor`` joins ``torch.Tensor`` there."""
    for trace_numpy in (False, True):
        VariableBuilder._type_dispatch_impl(trace_numpy)[ZyxTensor] = VariableBuilder.wrap_tensor


def _backend(gm, example_inputs):
    from .backend import backend  # (AOTAutograd: loaded at the first compile)

    return backend(gm, example_inputs)


def register_backend() -> None:
    """Name the backend "zyx" where the ``torch_dynamo_backends`` entry point does not (a checkout
    used from ``PYTHONPATH``, never installed)."""
    if "zyx" in entry_points(group="torch_dynamo_backends").names or "zyx" in registry._COMPILER_FNS:
        return
    registry.register_backend(compiler_fn=_backend, name="zyx")


def install() -> None:
    treat_zyx_tensors_as_tensors()
    register_backend()
