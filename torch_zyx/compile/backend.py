"""The Dynamo backend ``"zyx"``: AOTAutograd's forward and backward graphs become zyx plans.

``torch.compile(fn, backend="zyx")`` finds ``backend`` through the ``torch_dynamo_backends``
entry point (pyproject.toml), so ``torch._dynamo.list_backends()`` lists it after a plain
``import torch``; importing this package registers it too (a checkout used from ``PYTHONPATH``
has no entry points). AOTAutograd gives functionalized aten graphs, forward and backward, with
input mutations (BatchNorm's running statistics) applied to the inputs by its runtime wrapper
as in eager mode; no decompositions are asked for: every aten op reaches zyx's dispatch when
the graph is traced, which lowers it, decomposes it where zyx has no lowering, or marks the
graph as one that runs op by op (graph.py).
"""

from __future__ import annotations

import logging

import torch
from torch._dynamo.backends import registry
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.variables.builder import VariableBuilder

from ..record.tensor import ZyxTensor
from .graph import CompiledGraph

log = logging.getLogger("torch_zyx")


def _compiler(kind: str):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> CompiledGraph:
        return CompiledGraph(gm, kind)

    return compile_graph


backend = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                       inference_compiler=_compiler("inference"))


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


def register() -> None:
    """Register ``backend`` as "zyx" unless the entry point already names it."""
    registry._lazy_import()
    if "zyx" not in registry._BACKENDS:
        registry.register_backend(compiler_fn=backend, name="zyx")


treat_zyx_tensors_as_tensors()
register()
