"""torch.optim's fused steps (``fused=True``): Adam, AdamW, SGD and Adagrad as lazy node graphs.

CPU and CUDA run these ops as hand-written kernels that update a parameter, its gradient and
its state in one pass. On zyx each element's update is a few nodes and the kernelizer fuses
each parameter's update into one kernel, as it does for the foreach path. The formulas are
ATen's CPU kernels' (FusedAdamKernel.cpp, FusedSGDKernel.cpp, FusedAdagradKernel.cpp): the
step-dependent coefficients in float64 (their kernels read the step and compute them in double
on the host; here the step stays on the device, so there is no read-back per step), cast to the
parameter's compute dtype (float32 for half and bfloat16) with the other hyperparameters. A
gradient scale divides the gradients, which are written back unscaled; when ``found_inf`` is 1,
the op changes nothing (the kernels return early).

Each parameter's step coefficients are 0-d nodes; the kernelizer stores them in one small
kernel for all parameters (same shape, no dependence), not one per parameter.
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, read, write
from ...record.transfer import ZYX_TO_TORCH
from ..expr import Ex
from ..math.combine import lerp_scalar_weight
from ..nn.functional import _acc_dtype
from ..registry import aten, register

_F64 = dtypes.float64


def _f64(value) -> Ex:
    """A 0-d float64 value of a number, or of a one-element tensor (read on the device)."""
    if isinstance(value, ZyxTensor):
        return Ex(g.reshape(g.cast(read(value), _F64), ()))
    if isinstance(value, torch.Tensor):
        value = value.item()
    return Ex(g.const(float(value), _F64, ()))


class _Step:
    """One parameter's update: its tensors' values in the compute dtype and what to write back.
    ``found_inf`` (0-d node or None) keeps every old value when it is 1."""

    def __init__(self, param: ZyxTensor, grad: ZyxTensor, grad_scale, found_inf, maximize: bool):
        self.shape = read(param).shape
        self.compute = _acc_dtype(read(param).dtype)
        self.keep = None
        if found_inf is not None:
            found = g.reshape(read(found_inf), ())
            self.keep = g.binary("eq", found, g.const(1, found.dtype, ()))
        self.writes: list[tuple[ZyxTensor, Node]] = []
        value = self.load(grad)
        if grad_scale is not None:
            value = g.binary("div", value, self.scalar(g.reshape(read(grad_scale), ())))
            self.writes.append((grad, value))
        self.grad = g.unary("neg", value) if maximize else value

    def load(self, t: ZyxTensor) -> Node:
        node = read(t)
        if node.shape != self.shape:
            raise RuntimeError(f"fused optimizer: expected a tensor of shape {list(self.shape)}, got "
                               f"{list(node.shape)}")
        return g.cast(node, self.compute)

    def scalar(self, value) -> Node:
        """A number or a 0-d node in the compute dtype, broadcast to the parameter's shape."""
        if isinstance(value, Ex):
            value = value.node
        node = value if isinstance(value, Node) else g.const(float(value), self.compute, ())
        if node.dtype is not self.compute:
            node = g.cast(node, self.compute)
        return g.expand(g.reshape(node, (1,) * len(self.shape)), self.shape)

    def mul(self, x: Node, value) -> Node:
        return g.binary("mul", x, self.scalar(value))

    def set(self, t: ZyxTensor, value: Node) -> None:
        self.writes.append((t, value))

    def commit(self) -> None:
        for t, value in self.writes:
            if self.keep is not None:
                keep = g.expand(g.reshape(self.keep, (1,) * len(self.shape)), self.shape)
                value = g.where(keep, g.cast(read(t), value.dtype), value)
            write(t, value)


def _check_lengths(*lists) -> None:
    lengths = {len(items) for items in lists if items is not None and len(items)}
    if len(lengths) > 1:
        raise RuntimeError(f"fused optimizer: tensor lists must have the same length, got {sorted(lengths)}")


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
          weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, decoupled: bool):
    _check_lengths(params, grads, exp_avgs, exp_avg_sqs, state_steps, max_exp_avg_sqs if amsgrad else None)
    lr64 = _f64(lr)
    for i, param in enumerate(params):
        step = _Step(param, grads[i], grad_scale, found_inf, maximize)
        count = _f64(state_steps[i])
        bias_correction1 = 1.0 - float(beta1) ** count
        bias_correction2 = 1.0 - float(beta2) ** count
        step_size = lr64 / bias_correction1
        bias_correction2_sqrt = bias_correction2.f("sqrt")
        value = step.load(param)
        grad = step.grad
        if weight_decay != 0:
            if decoupled:
                value = step.mul(value, 1.0 - lr64 * weight_decay)
            else:
                grad = g.binary("add", grad, step.mul(value, weight_decay))
        torch_compute = ZYX_TO_TORCH[step.compute]
        exp_avg = lerp_scalar_weight(step.load(exp_avgs[i]), grad, 1 - beta1, torch_compute)
        exp_avg_sq = g.binary("add", step.mul(step.load(exp_avg_sqs[i]), beta2),
                              g.binary("mul", step.mul(grad, 1 - beta2), grad))
        step.set(exp_avgs[i], exp_avg)
        step.set(exp_avg_sqs[i], exp_avg_sq)
        second = exp_avg_sq
        if amsgrad:
            second = g.binary("max", step.load(max_exp_avg_sqs[i]), exp_avg_sq)
            step.set(max_exp_avg_sqs[i], second)
        denom = g.binary("add", g.binary("div", g.unary("sqrt", second), step.scalar(bias_correction2_sqrt)),
                         step.scalar(eps))
        update = g.binary("div", step.mul(exp_avg, -step_size), denom)
        step.set(param, g.binary("add", value, update))
        step.commit()


def _adam_lowering(decoupled: bool):
    def lowering(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
              weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, decoupled)
    return lowering


@register(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
               maximize, is_first_step, grad_scale=None, found_inf=None):
    _check_lengths(self, grads, momentum_buffer_list if momentum != 0 else None)
    lr64 = _f64(lr)
    for i, param in enumerate(self):
        step = _Step(param, grads[i], grad_scale, found_inf, maximize)
        value = step.load(param)
        grad = step.grad
        if weight_decay != 0:
            grad = g.binary("add", grad, step.mul(value, weight_decay))
        if momentum != 0:
            if is_first_step:
                buffer = grad
            else:
                buffer = g.binary("add", step.mul(step.load(momentum_buffer_list[i]), momentum),
                                  step.mul(grad, 1 - dampening))
            step.set(momentum_buffer_list[i], buffer)
            grad = g.binary("add", grad, step.mul(buffer, momentum)) if nesterov else buffer
        step.set(param, g.binary("add", value, step.mul(grad, -lr64)))
        step.commit()


@register(aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr)
def fused_adagrad_(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
                   grad_scale=None, found_inf=None):
    _check_lengths(self, grads, state_sums, state_steps)
    lr64 = _f64(lr)
    for i, param in enumerate(self):
        step = _Step(param, grads[i], grad_scale, found_inf, maximize)
        count = _f64(state_steps[i])
        clr = lr64 / (1.0 + (count - 1.0) * lr_decay)
        value = step.load(param)
        grad = step.grad
        if weight_decay != 0:
            grad = g.binary("add", grad, step.mul(value, weight_decay))
        state_sum = g.binary("add", step.load(state_sums[i]), g.binary("mul", grad, grad))
        step.set(state_sums[i], state_sum)
        std = g.binary("add", g.unary("sqrt", state_sum), step.scalar(eps))
        step.set(param, g.binary("sub", value, g.binary("div", step.mul(grad, clr), std)))
        step.commit()


register(aten._fused_adam_.default, aten._fused_adam_.tensor_lr)(_adam_lowering(decoupled=False))
register(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr)(_adam_lowering(decoupled=True))
