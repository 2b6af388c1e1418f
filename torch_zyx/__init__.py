"""torch_zyx: a lazy, fusing PyTorch device named ``zyx``.

``import torch_zyx`` (or just ``import torch``, through the ``torch.backends`` entry point)
registers the device: ``x.to("zyx")``, ``model.to("zyx")`` and ``torch.zyx.*`` then work.
Flow: dispatch → lazy graph → kernelizer → loop IR → renderer → device (see DESIGN.md).
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point for PyTorch's device-extension autoload (``import torch`` loads zyx)."""
    # Defined before ``import torch``: when torch_zyx is imported first (``python -m
    # torch_zyx.demo``), torch's autoload finds this half-imported module; registration then
    # happens at the end of this file instead.
    if "_register" in globals():
        _register()


import torch  # noqa: F401  (imported before the modules below: see _autoload)

from .counters import counters, reset_counters
from .integration.device_module import synchronize
from .integration.registration import register as _register
from .record.transfer import supports_dtype

__all__ = ["counters", "reset_counters", "supports_dtype", "synchronize"]

_register()
