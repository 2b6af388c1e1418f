"""``nn.Module`` conversions to and from zyx keep shared parameters shared.

Part of registering the device (``torch_zyx._register`` installs it). ``Module.to("zyx")``,
``.cpu()``, ``.to_empty(device=...)`` all run ``Module._apply(fn)``, which converts each
module's own parameters and buffers. Between PyTorch's built-in dense devices the old parameter
takes the converted tensor's place in C++ (``param.data = new``), so a weight that two modules
share stays one object. PyTorch allows that in-place swap for no PrivateUse1 device, and a zyx
tensor is a Python wrapper whose state such a C++ copy would not carry: each module then gets a
new parameter of its own, and a shared weight (a language model's embedding tied to its output
projection) became two unrelated parameters that trained apart, silently. ``_apply`` here
converts each tensor once per conversion and hands every module that shared a parameter the
same new one. As on any device of that kind the old parameter objects are replaced (PyTorch's
advice holds: build optimizers after moving the model).
"""

from __future__ import annotations

import threading

import torch

from .tensor import ZyxTensor

_original_apply = torch.nn.Module._apply
_local = threading.local()  # ``inside``: an outer ``_apply`` of this thread is running


def _touches_zyx(old, new) -> bool:
    return isinstance(new, ZyxTensor) or isinstance(old, ZyxTensor)


def _apply(self, fn, recurse=True):
    if getattr(_local, "inside", False):  # a child module: the outermost call does the work
        return _original_apply(self, fn, recurse)
    modules = list(self.modules()) if recurse else [self]
    before = [(module, key, param) for module in modules
              for key, param in module._parameters.items() if param is not None]
    converted: dict[int, tuple] = {}  # id(tensor) → (tensor, its conversion); the tensor kept alive

    def convert_once(tensor):
        hit = converted.get(id(tensor))
        if hit is not None:
            return hit[1]
        result = fn(tensor)
        if _touches_zyx(tensor, result):
            converted[id(tensor)] = (tensor, result)
        return result

    _local.inside = True
    try:
        result = _original_apply(self, convert_once, recurse)
    finally:
        _local.inside = False
    # Every module whose old parameter was shared gets the first new parameter made for it.
    first: dict[int, torch.Tensor] = {}
    for module, key, old in before:
        new = module._parameters.get(key)
        if new is None or new is old or not _touches_zyx(old, new):
            continue
        shared = first.setdefault(id(old), new)
        if shared is not new:
            module._parameters[key] = shared
    return result


def install() -> None:
    """Make ``nn.Module._apply`` keep shared parameters shared across zyx conversions."""
    torch.nn.Module._apply = _apply
