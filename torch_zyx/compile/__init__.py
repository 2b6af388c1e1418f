"""``torch.compile(model, backend="zyx")``: FX graphs compiled once into zyx plans.

The compile layer, between PyTorch's integration and dispatch. ``backend.py`` is the Dynamo
backend (AOTAutograd's forward and backward compilers), registered through the
``torch_dynamo_backends`` entry point and when this package is imported; ``graph.py`` turns
each FX graph into plans (traced once on placeholders, kernelized once) that a call only binds
and launches.
"""

from .backend import backend

__all__ = ["backend"]
