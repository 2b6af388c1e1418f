"""The multi-label margin loss's forward op, lowered here rather than through PyTorch's
decomposition, which is wrong for targets that end early.

``multilabel_margin_loss_forward(input, target, reduction) -> (loss, is_target)``: each row's
targets are its target entries before the first -1; the loss sums, over those targets t and the
classes j that are not targets, ``max(0, 1 - input[t] + input[j]) / classes``. PyTorch's
decomposition (torch 2.11-2.13) masks the non-target classes but not the unused target slots
after the -1, which it reads as class 0: any row with a -1 counted class 0's margins once per
unused slot (CPU torch 1.61 against 2.44 for one row [4, -1, 0, 0, 0]). The backward op is
derived from this forward by autograd (derived_backward.py).
"""

from __future__ import annotations

import torch

from ..registry import aten, register


def multilabel_margin_loss(input, target, reduction: int):
    """(loss, is_target) built from ops zyx lowers, with ATen's checks and messages."""
    input_shape, target_shape = tuple(input.shape), tuple(target.shape)
    rows, targets = torch.atleast_2d(input), torch.atleast_2d(target)
    classes = rows.shape[1]
    if len(input_shape) > 2 or classes == 0:
        raise RuntimeError("Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{torch.Size(input_shape)}")
    if len(target_shape) > 2 or target_shape != input_shape:
        raise RuntimeError(f"inconsistent target size: {torch.Size(target_shape)} for input of size: "
                           f"{torch.Size(input_shape)}")
    slot = torch.arange(classes, device=targets.device)
    # Slots before the row's first -1 hold its targets.
    end = torch.amin(torch.where(targets == -1, slot, classes), dim=-1, keepdim=True)
    used = slot < end
    target_value = torch.gather(rows, -1, torch.where(used, targets, 0))  # (rows, slots)
    labels = torch.where(used, targets, -1)
    is_target = (slot.view(1, 1, classes) == labels.unsqueeze(-1)).any(dim=1)  # (rows, classes)
    margins = (1.0 - target_value.unsqueeze(-1) + rows.unsqueeze(1)).clamp_min(0) / classes
    counted = used.unsqueeze(-1) & ~is_target.unsqueeze(1)  # (rows, slots, classes)
    per_row = torch.where(counted, margins, 0).sum(dim=(1, 2))
    if reduction == 1:
        loss = per_row.mean()
    elif reduction == 2:
        loss = per_row.sum()
    else:
        loss = per_row if len(input_shape) == 2 else per_row.reshape(())
    return loss, is_target.to(rows.dtype).reshape(target_shape)


register(aten.multilabel_margin_loss_forward.default)(multilabel_margin_loss)
