"""``torch.compile(model, backend="zyx")``: FX graphs compiled once into zyx plans.

The compile layer, between PyTorch's integration and dispatch. ``dynamo.py`` makes Dynamo see
zyx tensors as tensors and names the backend (light: run as soon as Dynamo is loaded);
``backend.py`` is the backend itself (AOTAutograd's forward and backward compilers), found
through the ``torch_dynamo_backends`` entry point; ``graph.py`` turns each FX graph into plans
(traced once on placeholders, kernelized once) that a call only binds and launches.
"""
