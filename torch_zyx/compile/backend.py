"""The Dynamo backend ``"zyx"``: AOTAutograd's forward and backward graphs become zyx plans.

``torch.compile(fn, backend="zyx")`` finds ``backend`` through the ``torch_dynamo_backends``
entry point (pyproject.toml), so ``torch._dynamo.list_backends()`` lists it after a plain
``import torch``; dynamo.py names it too where the package is not installed. (Importing this
module imports torch_zyx, whose registration sets up Dynamo's view of zyx tensors: dynamo.py.) AOTAutograd gives functionalized aten graphs, forward and backward, with
input mutations (BatchNorm's running statistics) applied to the inputs by its runtime wrapper
as in eager mode; no decompositions are asked for: every aten op reaches zyx's dispatch when
the graph is traced, which lowers it, decomposes it where zyx has no lowering, or marks the
graph as one that runs op by op (graph.py).
"""

from __future__ import annotations

import logging

import torch
from torch._dynamo.backends.common import aot_autograd

from .graph import CompiledGraph

log = logging.getLogger("torch_zyx")


def _compiler(kind: str):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> CompiledGraph:
        return CompiledGraph(gm, kind)

    return compile_graph


backend = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                       inference_compiler=_compiler("inference"))
