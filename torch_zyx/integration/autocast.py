"""Automatic mixed precision on zyx: ``torch.autocast("zyx", dtype=torch.bfloat16 or float16)``.

Stage 1, before dispatch: PyTorch calls the AutocastPrivateUse1 key of an op before its
autograd and backend keys while an autocast region of the zyx device is active. A backend
registers there what the op does to its operands' dtypes (ATen does it for CPU and CUDA only),
and a fallthrough for every other op; without them every op inside the region raised "Could not
run ... with arguments from the 'Autocastzyx' backend". The policies are CUDA's
(aten/src/ATen/autocast_mode.cpp), by op:

- ``LOWER``: matmuls, convolutions, linear, attention, the fused RNN cells run in the region's
  dtype (float16 or bfloat16);
- ``FP32``: ops whose range or accuracy needs float32 (exp/log/pow families, norms, losses)
  run in float32;
- ``FP32_SET_DTYPE``: reductions and softmax with a ``dtype`` argument get ``dtype=float32``
  when it is not given and their input is eligible;
- ``PROMOTE``: ops mixing operands run in the widest floating dtype among them;
- ``BANNED``: binary_cross_entropy raises, as on CUDA (its backward is unsafe in float16).

Only floating-point zyx tensors that are not float64 are cast (ATen's ``is_autocast_eligible``);
the cast is a lazy CAST node, and hash-consing makes a weight used twice one cast.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch.utils._pytree import tree_map

log = logging.getLogger("torch_zyx")

_KEY = "AutocastPrivateUse1"

LOWER = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm",
    "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist",
    "cdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
    "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
FP32_SET_DTYPE = ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                  "linalg_matrix_norm", "sum")
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "scatter_add", "tensordot", "cat", "stack")
BANNED = ("binary_cross_entropy",)

_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")

_EXCLUDED = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_libraries: list = []


def _eligible(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.device.type == "zyx" and value.is_floating_point()
            and value.dtype != torch.float64)


def _cast_all(tree, dtype: torch.dtype):
    return tree_map(lambda v: v.to(dtype) if _eligible(v) and v.dtype != dtype else v, tree)


def _below(overload, args, kwargs):
    """``overload`` run on what its autocast policy made of its operands, past this key."""
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDED):
        return overload(*args, **kwargs)


def _lower(overload):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("zyx")
        return _below(overload, *_cast_all((args, kwargs), dtype))
    return kernel


def _fp32(overload):
    def kernel(*args, **kwargs):
        return _below(overload, *_cast_all((args, kwargs), torch.float32))
    return kernel


def _fp32_set_dtype(overload):
    names = [a.name for a in overload._schema.arguments]
    position = names.index("dtype")

    def kernel(*args, **kwargs):
        given = args[position] if len(args) > position else kwargs.get("dtype")
        if given is None and args and _eligible(args[0]):
            if len(args) > position:
                args = (*args[:position], torch.float32, *args[position + 1:])
            else:
                kwargs = {**kwargs, "dtype": torch.float32}
        return _below(overload, args, kwargs)
    return kernel


def _promote(overload):
    def kernel(*args, **kwargs):
        floats = []
        tree_map(lambda v: floats.append(v.dtype) if _eligible(v) else None, (args, kwargs))
        if not floats:
            return _below(overload, args, kwargs)
        widest = functools.reduce(torch.promote_types, floats)
        return _below(overload, *_cast_all((args, kwargs), widest))
    return kernel


def _banned(overload):
    def kernel(*args, **kwargs):
        raise RuntimeError(_BANNED_MESSAGE)
    return kernel


def _functional_overloads(name: str):
    """The overloads of aten op ``name`` that return new tensors (no in-place, no out=)."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    overloads = []
    for overload_name in packet.overloads():
        overload = getattr(packet, overload_name)
        if not overload._schema.is_mutable:
            overloads.append(overload)
    return overloads


def install() -> None:
    """Register the fallthrough and the policies (once, when the device is registered)."""
    if _libraries:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    try:
        fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    except RuntimeError as exc:  # a PyTorch that registers it itself (or another backend did)
        log.info("zyx: %s already has a fallback: %s", _KEY, exc)
    policies = torch.library.Library("aten", "IMPL")
    for names, make in ((LOWER, _lower), (FP32, _fp32), (FP32_SET_DTYPE, _fp32_set_dtype),
                        (PROMOTE, _promote), (BANNED, _banned)):
        for name in names:
            for overload in _functional_overloads(name):
                if make is _fp32_set_dtype and "dtype" not in [a.name for a in overload._schema.arguments]:
                    continue
                name_with_overload = overload._schema.name.split("::")[-1]
                if overload._overloadname != "default":
                    name_with_overload += "." + overload._overloadname
                policies.impl(name_with_overload, make(overload), _KEY)
    _libraries.extend((fallthrough, policies))
