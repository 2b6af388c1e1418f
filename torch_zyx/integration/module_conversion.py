"""``nn.Module`` conversions to and from zyx keep parameters what they are on CUDA: the same
objects, and shared ones shared.

Part of registering the device (``torch_zyx._register`` installs it). ``Module.to("zyx")``,
``.cpu()``, ``.to_empty(device=...)`` all run ``Module._apply(fn)``, which converts each
module's own parameters and buffers. Between PyTorch's built-in dense devices the old parameter
takes the converted tensor's place in C++ (``param.data = new``): every module sharing a weight
still shares it, and an optimizer built before the move updates the model. PyTorch allows that
in-place swap for no PrivateUse1 device, and a zyx tensor is a Python wrapper whose state such a
C++ copy would not carry: each module got a new parameter of its own, so a shared weight (a
language model's embedding tied to its output projection) became two unrelated parameters that
trained apart, and an optimizer made before the move kept updating the CPU tensors, silently.
``_apply`` here converts each tensor once per conversion, then gives each old parameter object
its new contents with ``torch.utils.swap_tensors`` (class, ``__dict__`` and tensor swapped, as
PyTorch's own ``swap_module_params_on_conversion`` does) and puts it back in every module that
held it. Where a swap is refused (the old parameter is held by a saved autograd graph or a weak
reference), the modules that shared it share its one new parameter instead.
"""

from __future__ import annotations

import threading

import torch

from ..record.tensor import ZyxTensor
from . import lazy_parameters

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
        if lazy_parameters.is_placeholder(tensor):  # a lazy module's, before its first forward
            return lazy_parameters.convert(tensor, fn)
        result = fn(tensor)
        if _touches_zyx(tensor, result):
            converted[id(tensor)] = (tensor, result)
        return result

    _local.inside = True
    try:
        result = _original_apply(self, convert_once, recurse)
    finally:
        _local.inside = False
    # Each old parameter, with every (module, name) that held it.
    holders: dict[int, tuple[torch.Tensor, list]] = {}
    for module, key, old in before:
        holders.setdefault(id(old), (old, []))[1].append((module, key))
    for old, places in holders.values():
        first_module, first_key = places[0]
        new = first_module._parameters.get(first_key)
        if new is None or new is old or not _touches_zyx(old, new):
            continue
        keep = new
        try:
            torch.utils.swap_tensors(old, new)
            keep = old
        except RuntimeError:
            pass
        for module, key in places:
            module._parameters[key] = keep
    return result


def install() -> None:
    """Make ``nn.Module._apply`` keep parameter objects, and shared ones shared, across zyx
    conversions, and lazy modules' placeholders work on zyx (lazy_parameters.py)."""
    torch.nn.Module._apply = _apply
    lazy_parameters.install()
