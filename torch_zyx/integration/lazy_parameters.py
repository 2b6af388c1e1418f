"""Lazy modules (``nn.LazyLinear``, ``nn.LazyConv2d``, ...) on zyx, as on CUDA.

Part of registering the device (``torch_zyx._register`` installs it). A lazy module holds
``UninitializedParameter`` / ``UninitializedBuffer`` placeholders until its first forward
infers their shapes and ``materialize`` allocates them on the placeholder's device. PyTorch
makes a placeholder by wrapping a zero-element tensor of that device as the placeholder class
(``Tensor._make_subclass``) and materializes it by assigning ``.data`` and changing
``__class__``. Neither works for zyx: a zyx tensor is already a Python wrapper (``ZyxTensor``),
which ``_make_subclass`` refuses to wrap again (``nn.LazyLinear(4, device="zyx")`` raised), and
``.data =`` would not carry its lazy state (module_conversion.py); ``model.to("zyx")`` of a lazy
model raised at the placeholder's shape.

So a placeholder for zyx is PyTorch's CPU placeholder that remembers its zyx device
(``_zyx_device``, which its ``device`` reports, so ``next(model.parameters()).device`` says
zyx before the first forward as it says cuda), and ``materialize`` onto zyx swaps the
placeholder object for a new zyx tensor (``torch.utils.swap_tensors``: the module and any
optimizer keep the same object, then a zyx Parameter or tensor). Module conversions
(module_conversion.py) make placeholders of the target device and dtype.
"""

from __future__ import annotations

import inspect

import torch
from torch.nn.parameter import (
    Parameter,
    UninitializedBuffer,
    UninitializedParameter,
    UninitializedTensorMixin,
)

_ZYX_DEVICE = "_zyx_device"  # the placeholder's zyx device, in its __dict__
_TENSOR_DEVICE = torch._C.TensorBase.device
_originals: dict = {}


def _zyx_device(device) -> torch.device | None:
    """``device`` (a factory argument; None: the default device) when it is a zyx device,
    with its index."""
    device = torch.get_default_device() if device is None else torch.device(device)
    if device.type != "zyx":
        return None
    return device if device.index is not None else torch.device("zyx", torch.zyx.current_device())


def _placeholder_new(original):
    signature = inspect.signature(original)

    def __new__(cls, *args, **kwargs):
        bound = signature.bind(cls, *args, **kwargs)
        bound.apply_defaults()
        zyx = _zyx_device(bound.arguments.get("device"))
        if zyx is None:
            return original(*bound.args, **bound.kwargs)
        bound.arguments["device"] = "cpu"
        placeholder = original(*bound.args, **bound.kwargs)
        placeholder.__dict__[_ZYX_DEVICE] = zyx
        return placeholder

    __new__.__doc__ = original.__doc__
    return __new__


def _carry_state(placeholder, new) -> None:
    """Give ``new`` the Python attributes of ``placeholder`` it lacks (a buffer's ``persistent``:
    what PyTorch keeps by keeping the object), but the zyx device, which ``new`` has its own of."""
    for key, value in placeholder.__dict__.items():
        if key != _ZYX_DEVICE:
            new.__dict__.setdefault(key, value)


def _device(self) -> torch.device:
    zyx = self.__dict__.get(_ZYX_DEVICE)
    return zyx if zyx is not None else _TENSOR_DEVICE.__get__(self)


def _materialize(self, shape, device=None, dtype=None) -> None:
    """PyTorch's ``materialize``; onto zyx the placeholder object becomes the new zyx tensor."""
    target = _zyx_device(device) if device is not None else self.__dict__.get(_ZYX_DEVICE)
    if target is None:
        self.__dict__.pop(_ZYX_DEVICE, None)
        return _originals["materialize"](self, shape, device, dtype)
    with torch._C.DisableTorchFunctionSubclass():
        dtype = dtype or self.dtype
        requires_grad = self.requires_grad
    new = torch.empty(shape, device=target, dtype=dtype)
    if self.cls_to_become is Parameter:
        new = Parameter(new, requires_grad)
    else:
        new.requires_grad_(requires_grad)
    _carry_state(self, new)
    torch.utils.swap_tensors(self, new)


def _deepcopy(self, memo):
    copied = _originals["__deepcopy__"](self, memo)
    zyx = self.__dict__.get(_ZYX_DEVICE)
    if zyx is not None:
        copied.__dict__[_ZYX_DEVICE] = zyx
    return copied


def is_placeholder(tensor) -> bool:
    return isinstance(tensor, UninitializedTensorMixin)


def convert(placeholder, fn):
    """What ``Module._apply``'s conversion ``fn`` makes of ``placeholder`` when zyx is the
    source or the target: a placeholder of the device and dtype ``fn`` gives a zero-element
    tensor of the placeholder's. The placeholder itself also takes that device, as PyTorch
    keeps the old parameter object and assigns it the converted data."""
    with torch._C.DisableTorchFunctionSubclass():
        dtype, requires_grad = placeholder.dtype, placeholder.requires_grad
    source = _device(placeholder)
    probe = fn(torch.empty(0, device=source, dtype=dtype))
    if source.type != "zyx" and probe.device.type != "zyx":
        return fn(placeholder)
    new = type(placeholder)(requires_grad, device=probe.device, dtype=probe.dtype)
    _carry_state(placeholder, new)
    if probe.device.type == "zyx":
        placeholder.__dict__[_ZYX_DEVICE] = probe.device
    else:
        placeholder.__dict__.pop(_ZYX_DEVICE, None)
    return new


def install() -> None:
    """Patch the placeholder classes as the module docstring says."""
    if _originals:
        return
    _originals["materialize"] = UninitializedTensorMixin.materialize
    _originals["__deepcopy__"] = UninitializedParameter.__deepcopy__
    for cls in (UninitializedParameter, UninitializedBuffer):
        _originals[cls] = cls.__new__
        cls.__new__ = _placeholder_new(cls.__new__)
    UninitializedTensorMixin.materialize = _materialize
    UninitializedTensorMixin.device = property(_device, doc=_TENSOR_DEVICE.__doc__)
    UninitializedParameter.__deepcopy__ = _deepcopy
