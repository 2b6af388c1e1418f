"""Backward ops derived from their forward op's decomposition, differentiated by autograd on zyx.

Some backward ops have kernels for CPU and CUDA only and neither a lowering here nor a PyTorch
decomposition, while their forward op decomposes into ops zyx lowers (``grid_sampler_2d``:
gathers at the sampling corners, weighted; hardshrink/softshrink, replication pads,
bicubic upsampling, multi(label) margin losses, weight normalization). Such a backward op is
computed as autograd computes the gradient of that decomposition: the forward's decomposition
is recorded again on detached zyx inputs that require grad, and ``torch.autograd.grad`` takes
the incoming gradient through it. Every op of both passes is a zyx lowering, so the result
is one more lazy graph (a gather's gradient is a scatter-add), with the decomposition's exact
formulas.

A backward op runs inside the autograd kernel of its own dispatch, which excludes the autograd
dispatch keys for the calls below it (PyTorch's AutoDispatchBelowADInplaceOrView guard). The
derivation includes them again while it records and restores the exclusion after.
"""

from __future__ import annotations

import torch
from torch._decomp import decomposition_table

from .nn.margin_losses import multilabel_margin_loss
from .registry import aten, register

_AUTOGRAD_KEYS = (torch._C.DispatchKey.AutogradFunctionality, torch._C.DispatchKey.ADInplaceOrView,
                  torch._C.DispatchKey.AutogradOther)


class _AutogradIncluded:
    """The autograd dispatch keys not excluded (as outside any op), then as they were."""

    def __enter__(self):
        self._excluded = [torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in _AUTOGRAD_KEYS]
        for key in _AUTOGRAD_KEYS:
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)

    def __exit__(self, *exc):
        for key, excluded in zip(_AUTOGRAD_KEYS, self._excluded):
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)
        return False


def derived_gradients(forward, args: list, differentiable: list[int], grad_output, wanted: list[bool],
                      output_index: int | None = None):
    """Gradients of ``forward``'s decomposition (or of ``forward``, a function of zyx tensors) at
    ``args`` for the arguments at positions ``differentiable`` (those whose ``wanted`` flag is
    set; the rest None), given the gradient of its output (output ``output_index`` of a tuple);
    zeros for an argument the output does not depend on (as ATen's kernels give)."""
    decomposition = decomposition_table[forward] if isinstance(forward, torch._ops.OpOverload) else forward
    args = list(args)
    leaves = []
    with _AutogradIncluded(), torch.enable_grad():
        for position, want in zip(differentiable, wanted):
            if want:
                args[position] = args[position].detach().requires_grad_()
                leaves.append(args[position])
        output = decomposition(*args)
        if output_index is not None:
            output = output[output_index]
        grads = torch.autograd.grad(output, leaves, grad_output, allow_unused=True) if leaves else ()
    grads = iter(grads)
    results = []
    for position, want in zip(differentiable, wanted):
        grad = next(grads) if want else None
        if want and grad is None:
            grad = torch.zeros_like(args[position])
        results.append(grad)
    return tuple(results)


@register(aten.grid_sampler_2d_backward.default)
def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    """(grad_input, grad_grid) of ``grid_sample`` in every interpolation and padding mode."""
    return derived_gradients(aten.grid_sampler_2d.default,
                             [input, grid, interpolation_mode, padding_mode, align_corners], [0, 1],
                             grad_output, [bool(output_mask[0]), bool(output_mask[1])])


def _input_gradient(forward, differentiable: int = 0, output_index: int | None = None):
    """The lowering of a backward op ``(grad_output, *forward's arguments)`` whose one result is
    the gradient of the forward's argument at ``differentiable``."""

    def lowering(grad_output, *args):
        return derived_gradients(forward, list(args), [differentiable], grad_output, [True], output_index)[0]
    return lowering


for _forward, _backward in (
        (aten.hardshrink.default, aten.hardshrink_backward.default),
        (aten.softshrink.default, aten.softshrink_backward.default),
        (aten.replication_pad1d.default, aten.replication_pad1d_backward.default),
        (aten.replication_pad2d.default, aten.replication_pad2d_backward.default),
        (aten.replication_pad3d.default, aten.replication_pad3d_backward.default),
        (aten.multi_margin_loss.default, aten.multi_margin_loss_backward.default)):
    register(_backward)(_input_gradient(_forward))


@register(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(grad_output, input, target, reduction, is_target):
    return derived_gradients(multilabel_margin_loss, [input, target, reduction], [0], grad_output, [True],
                             output_index=0)[0]


@register(aten.upsample_bicubic2d_backward.default)
def upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                scales_w=None):
    """The gradient of a linear map does not depend on its input: any input of ``input_size``."""
    input = torch.zeros(tuple(input_size), dtype=grad_output.dtype, device=grad_output.device)
    return derived_gradients(aten.upsample_bicubic2d.default,
                             [input, output_size, align_corners, scales_h, scales_w], [0], grad_output,
                             [True])[0]


@register(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """(grad_v, grad_g) of ``torch._weight_norm`` (nn.utils.weight_norm and its parametrization);
    the norms are computed again by the decomposition rather than read from ``saved_norms``."""
    return derived_gradients(aten._weight_norm_interface.default, [saved_v, saved_g, dim], [0, 1], grad_w,
                             [True, True], output_index=0)
