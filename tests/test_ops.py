"""The op list of issue 2 on zyx against CPU torch: values, dtypes, in-place/out= forms, errors.

Each check runs the same function on CPU tensors and on zyx copies and compares results (and
mutated inputs). Ops that must be native also assert no CPU fallback happened.
"""

import math

import pytest
import torch
from conftest import ALL, FLOATS, INTS, check, compare, make

import torch_zyx

# ---------------------------------------------------------------------------- elementwise unary

UNARY_FLOAT = ["exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
               "sigmoid", "erf", "reciprocal"]
UNARY_ANY = ["abs", "neg", "relu", "floor", "ceil", "round", "trunc", "sign", "isnan", "isinf", "logical_not"]
NEEDS_POSITIVE = {"log", "log2", "sqrt", "rsqrt"}


def _unary_dtypes(name):
    if name in ("neg",):
        return FLOATS + INTS
    if name in ("abs", "relu", "floor", "ceil", "round", "trunc", "sign"):
        return FLOATS + [torch.int32, torch.int64, torch.int8, torch.uint8]
    if name in UNARY_FLOAT:
        return FLOATS + [torch.int32, torch.int64, torch.bool]
    return ALL


@pytest.mark.parametrize("name", UNARY_FLOAT + UNARY_ANY)
def test_unary(name):
    for dtype in _unary_dtypes(name):
        x = make((3, 5), dtype, positive=name in NEEDS_POSITIVE)
        if dtype.is_floating_point and name in ("isnan", "isinf", "abs", "sign", "floor", "relu"):
            x[0, 0], x[0, 1], x[1, 0] = float("nan"), float("inf"), -float("inf")
        if name == "round" and dtype.is_floating_point:
            x[0, :4] = torch.tensor([0.5, 1.5, 2.5, -0.5])
        check(getattr(torch, name), x)


@pytest.mark.parametrize("name", ["abs", "neg", "exp", "sqrt", "sigmoid", "floor", "sign", "relu", "tanh"])
def test_unary_inplace_and_out(name):
    x = make((4, 3), torch.float32, positive=True)
    check(lambda t: getattr(t, name + "_")(), x, mutates=(0,))
    if name != "relu":
        check(lambda t, o: (getattr(torch, name)(t, out=o), o)[1], x, torch.empty(4, 3), mutates=(1,))
    # An in-place op on a view writes through to the base.
    check(lambda t: (getattr(t[1:, ::2], name + "_")(), t)[1], x, mutates=(0,))


def test_bitwise_not():
    for dtype in INTS + [torch.bool]:
        check(torch.bitwise_not, make((7,), dtype))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    for dtype in FLOATS:
        check(lambda t: torch.nn.functional.gelu(t, approximate=approximate), make((4, 6), dtype))


def test_silu():
    for dtype in FLOATS:
        check(torch.nn.functional.silu, make((4, 6), dtype))
    check(lambda t: torch.nn.functional.silu(t, inplace=True), make((5,), torch.float32), mutates=(0,))


def test_unary_int_to_float_promotion():
    check(torch.exp, make((5,), torch.int64))
    check(torch.sqrt, make((5,), torch.uint8))
    check(torch.sigmoid, make((5,), torch.bool))


# ---------------------------------------------------------------------------- elementwise binary

PAIRS = [(torch.float32, torch.float32), (torch.float64, torch.float32), (torch.float16, torch.float16),
         (torch.bfloat16, torch.float32), (torch.int32, torch.int64), (torch.int8, torch.uint8),
         (torch.uint8, torch.uint8), (torch.int64, torch.float32), (torch.bool, torch.int32),
         (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum",
                                  "eq", "ne", "lt", "le", "gt", "ge"])
def test_binary_promotion(name):
    for da, db in PAIRS:
        a, b = make((3, 4), da, seed=1), make((4,), db, seed=2)
        check(getattr(torch, name), a, b)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "eq", "lt", "remainder", "pow",
                                  "floor_divide", "fmod", "atan2"])
def test_binary_scalars_and_0d(name):
    for dtype in [torch.float32, torch.int64, torch.int32, torch.float16, torch.uint8]:
        a = make((2, 3), dtype, seed=3, positive=True)
        if name == "atan2" and not dtype.is_floating_point:
            continue
        for other in (2, 2.5, torch.tensor(3), torch.tensor(1.5), torch.tensor(2, dtype=torch.int8)):
            if name == "sub" and dtype == torch.bool:
                continue
            check(getattr(torch, name), a, other)
        if name in ("add", "sub", "mul", "div", "remainder", "pow", "maximum"):
            b = make((), torch.float64, seed=5, positive=True)
            check(getattr(torch, name), a, b)


def test_add_sub_alpha():
    a, b = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    check(lambda x, y: torch.add(x, y, alpha=2.5), a, b)
    check(lambda x, y: torch.sub(x, y, alpha=-3), a, b)
    ai, bi = make((3, 4), torch.int64, seed=1), make((3, 4), torch.int64, seed=2)
    check(lambda x, y: torch.add(x, y, alpha=3), ai, bi)
    check(lambda x, y: x.add_(y, alpha=2), a, b, mutates=(0,))
    check(lambda x, y, o: (torch.sub(x, y, alpha=2, out=o), o)[1], a, b, torch.empty(3, 4), mutates=(2,))
    check(lambda x: torch.rsub(x, 2.0), a)
    check(lambda x, y: x.add_(y), make((3, 4), torch.bool), make((3, 4), torch.bool, seed=4), mutates=(0,))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding(mode):
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int32, torch.int8, torch.float16]:
        a = make((4, 5), dtype, seed=1, low=-9, high=9)
        sign = 1 - 2 * (make((4, 5), torch.bool, seed=7).to(dtype))
        b = make((4, 5), dtype, seed=2, positive=True) * sign
        check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b)
        check(lambda x: torch.div(x, -3, rounding_mode=mode), a)
    x = make((4,), torch.float32)
    check(lambda t: t.div_(2.0, rounding_mode=mode), x, mutates=(0,))


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
def test_int_division_family(name):
    for dtype in [torch.int64, torch.int32, torch.int8, torch.float32, torch.float64]:
        a = make((6, 4), dtype, seed=1, low=-9, high=9)
        b = make((6, 4), dtype, seed=2, positive=True) * (1 - 2 * make((6, 4), torch.bool, seed=7).to(dtype))
        check(getattr(torch, name), a, b)
        check(lambda x: getattr(torch, name)(x, -4), a)
    check(lambda x, y: getattr(x, name + "_")(y), make((5,), torch.float32), 1.5, mutates=(0,))


def test_pow():
    for dtype in [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32]:
        a = make((3, 4), dtype, seed=1, low=-3, high=3)
        b = make((3, 4), dtype, seed=2, low=0, high=4).abs()
        check(torch.pow, a, b)
        check(lambda x: torch.pow(x, 2), a)
        check(lambda x: torch.pow(2, x), b)
    check(lambda x: x.pow_(3), make((4,), torch.float32), mutates=(0,))
    check(lambda x: torch.pow(x, 0.5), make((4,), torch.float32, positive=True))
    check(lambda x: torch.pow(x, 2.0), make((4,), torch.int64))


def test_atan2():
    for dtype in [torch.float32, torch.float64, torch.int64]:
        check(torch.atan2, make((3, 4), dtype, seed=1), make((3, 4), dtype, seed=2))


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical(name):
    for dtype in [torch.bool, torch.float32, torch.int64, torch.uint8]:
        check(getattr(torch, name), make((3, 4), dtype, seed=1, low=-1, high=1),
              make((3, 4), dtype, seed=2, low=-1, high=1))
    check(getattr(torch, name), make((3, 4), torch.int32, low=-1, high=1),
          make((4,), torch.float32, low=-1, high=1))


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                                  "bitwise_right_shift"])
def test_bitwise(name):
    dts = INTS + ([] if "shift" in name else [torch.bool])
    for dtype in dts:
        a = make((3, 4), dtype, seed=1, low=-20, high=20)
        b = make((3, 4), dtype, seed=2, low=0, high=5) if "shift" in name else make((3, 4), dtype, seed=2)
        check(getattr(torch, name), a, b)
        check(lambda x: getattr(torch, name)(x, 2), a)
    check(lambda x, y: x & y, make((4,), torch.int64), make((4,), torch.int32, seed=3))
    check(lambda x: x << 3, make((4,), torch.int32))
    check(lambda x: x >> 1, make((4,), torch.int64))
    check(lambda x, y: x.bitwise_xor_(y), make((4,), torch.int64), make((4,), torch.int64, seed=3),
          mutates=(0,))


def test_binary_inplace_and_out():
    a, b = make((3, 4), torch.float32, seed=1), make((4,), torch.float32, seed=2)
    for name in ["add", "sub", "mul", "div", "maximum", "minimum", "remainder", "atan2", "pow"]:
        if hasattr(torch.Tensor, name + "_"):
            check(lambda x, y, name=name: getattr(x, name + "_")(y), a, b, mutates=(0,))
        check(lambda x, y, o, name=name: (getattr(torch, name)(x, y, out=o), o)[1], a, b, torch.empty(3, 4),
              mutates=(2,))
    check(lambda x, y, o: (torch.lt(x, y, out=o), o)[1], a, b, torch.empty(3, 4, dtype=torch.bool),
          mutates=(2,))
    # In-place on an int tensor with a float result is an error on CPU as well.
    ai = make((3,), torch.int64)
    with pytest.raises(RuntimeError):
        ai.to("zyx").div_(2)
    with pytest.raises(RuntimeError):
        ai.add_(torch.randn(3))  # the CPU reference raises too
    # In-place promotion that fits: int tensor += int32 tensor, float16 += float32.
    check(lambda x, y: x.add_(y), make((3,), torch.int64), make((3,), torch.int32), mutates=(0,))
    check(lambda x, y: x.mul_(y), make((3,), torch.float16), make((3,), torch.float32), mutates=(0,))
    # out= of a different (castable) dtype, and an empty out= that gets resized.
    check(lambda x, y, o: (torch.add(x, y, out=o), o)[1], a, b, torch.empty(3, 4, dtype=torch.float64),
          mutates=(2,))
    check(lambda x, y, o: (torch.mul(x, y, out=o), o)[1], a, b, torch.empty(0), mutates=(2,))


# ---------------------------------------------------------------------------- where/clamp/lerp/addc*


def test_where():
    cond = make((3, 4), torch.bool)
    for dtype in [torch.float32, torch.int64, torch.float16, torch.bool, torch.uint8]:
        check(torch.where, cond, make((3, 4), dtype, seed=1), make((4,), dtype, seed=2))
    check(lambda c, x: torch.where(c, x, 0.5), cond, make((3, 4), torch.float32))
    check(lambda c, x: torch.where(c, 2, x), cond, make((3, 4), torch.int32))
    check(lambda c, x, y: torch.where(c, x, y), cond, make((3, 4), torch.int32), make((3, 4), torch.float64))
    check(lambda c: torch.where(c, 1.0, 0.0), cond)
    check(lambda c, x: x.masked_fill(c, -1), cond, make((3, 4), torch.float32))


def test_clamp():
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.float16]:
        x = make((4, 5), dtype, low=-6, high=6)
        check(lambda t: torch.clamp(t, -2, 3), x)
        check(lambda t: torch.clamp(t, min=1), x)
        check(lambda t: torch.clamp(t, max=2), x)
        check(lambda t: t.clamp_(0, 2), x, mutates=(0,))
    x = make((4, 5), torch.float32)
    x[0, 0] = float("nan")
    check(lambda t, lo, hi: torch.clamp(t, lo, hi), x, make((5,), torch.float32, seed=1, high=-1),
          make((4, 1), torch.float32, seed=2, low=1))
    check(lambda t: torch.clamp(t, 0.5, 1.5), make((4,), torch.int64))
    check(lambda t, o: (torch.clamp(t, -1, 1, out=o), o)[1], x, torch.empty(4, 5), mutates=(1,))
    check(lambda t: torch.clamp_min(t, 0.0), x)
    check(lambda t: torch.clamp_max(t, 0.0), x)


def test_lerp_addcmul_addcdiv():
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        a, b = make((3, 4), dtype, seed=1), make((3, 4), dtype, seed=2)
        w = make((4,), dtype, seed=3, low=0, high=1)
        check(torch.lerp, a, b, w)
        check(lambda x, y: torch.lerp(x, y, 0.3), a, b)
        check(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, w)
        check(lambda x, y, z: torch.addcdiv(x, y, z, value=-2), a, b, w.abs() + 0.5)
    a, b = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    w = make((4,), torch.float32)
    check(lambda x, y, z: x.lerp_(y, z), a, b, w, mutates=(0,))
    check(lambda x, y, z: x.addcmul_(y, z, value=2), a, b, w, mutates=(0,))
    check(lambda x, y, z: x.addcdiv_(y, z), a, b, w.abs() + 1, mutates=(0,))
    check(lambda x, y, z, o: (torch.addcmul(x, y, z, out=o), o)[1], a, b, w, torch.empty(3, 4), mutates=(3,))
    check(lambda x, y, z: torch.addcmul(x, y, z, value=2), make((3,), torch.int64), make((3,), torch.int64),
          make((3,), torch.int64))


# ---------------------------------------------------------------------------- reductions

DIMS = [None, 0, 1, -1, (0, 2), (1, 2), ()]


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "logsumexp",
                                  "var", "std", "any", "all"])
def test_reduce_dims(name):
    x = make((3, 4, 5), torch.float32, low=-1.5, high=1.5)
    fn = getattr(torch, name)
    for dim in DIMS:
        for keepdim in (False, True):
            if dim is None:
                if name in ("amax", "amin", "logsumexp"):
                    continue
                if keepdim:
                    continue
                check(fn, x)
                continue
            if dim == () and name in ("logsumexp", "prod", "any", "all"):
                continue
            if isinstance(dim, tuple) and name in ("prod",):
                continue
            check(lambda t, dim=dim, keepdim=keepdim: fn(t, dim, keepdim=keepdim), x)


@pytest.mark.parametrize("dtype", ALL)
def test_reduce_dtypes(dtype):
    x = make((4, 6), dtype, low=-3, high=3)
    check(torch.sum, x)
    check(lambda t: t.sum(1), x)
    check(lambda t: t.sum(0, dtype=torch.float64), x)
    check(lambda t: t.prod(1), x if dtype == torch.bool else make((4, 6), dtype, low=-2, high=2))
    check(torch.any, x)
    check(lambda t: t.all(1), x)
    check(lambda t: t.cumsum(1), x)
    if dtype != torch.bool:
        check(lambda t: t.amax(1), x)
        check(lambda t: t.amin(0), x)
        check(lambda t: t.max(1), x)
        check(lambda t: t.min(0, keepdim=True), x)
        check(lambda t: t.argmax(), x)
        check(lambda t: t.argmin(1, keepdim=True), x)
        check(torch.max, x)
        check(torch.min, x)
    if dtype.is_floating_point:
        check(lambda t: t.mean(1), x)
        check(lambda t: t.var(0), x)
        check(lambda t: t.std(1, correction=0), x)
        check(lambda t: torch.var_mean(t, 1), x)
        check(lambda t: torch.std_mean(t, (0, 1)), x)
        check(lambda t: t.logsumexp(1), x)
    else:
        with pytest.raises(RuntimeError):
            x.to("zyx").mean()


def test_max_min_indices_and_nan():
    x = make((4, 5), torch.float32)
    x[1, 2] = float("nan")
    x[2] = 1.0  # ties: the first index wins
    for fn in (lambda t: t.max(1), lambda t: t.min(0), lambda t: t.argmax(1), lambda t: t.argmin(0),
               lambda t: t.amax(1), torch.max, lambda t: t.max(-1, keepdim=True)):
        check(fn, x)
    check(lambda t: torch.max(t, 1).indices, x)
    check(lambda t: torch.max(t, dim=0)[0], make((3,), torch.int64))


def test_softmax_cumsum_out():
    x = make((3, 4, 5), torch.float32)
    for dim in (0, 1, -1):
        check(lambda t, dim=dim: torch.softmax(t, dim), x)
        check(lambda t, dim=dim: torch.log_softmax(t, dim), x)
        check(lambda t, dim=dim: torch.cumsum(t, dim), x)
    check(lambda t: torch.softmax(t, -1, dtype=torch.float64), x)
    check(lambda t: torch.softmax(t, 0), make((6,), torch.float16))
    check(lambda t: torch.softmax(t, 1), make((2, 6), torch.bfloat16))
    y = make((2, 5), torch.float32)
    y[0, 1] = -float("inf")
    check(lambda t: torch.softmax(t, 1), y)
    check(lambda t: torch.cumsum(t, 0, dtype=torch.float64), make((5,), torch.int32))
    check(lambda t, o: (torch.sum(t, 1, out=o), o)[1], x, torch.empty(3, 5), mutates=(1,))
    check(lambda t: t.cumsum_(1), make((3, 4), torch.float32), mutates=(0,))
    check(lambda t: t.sum(), make((0, 3), torch.float32))
    check(lambda t: t.sum(), make((), torch.float32))
    check(lambda t: t.mean(0), make((0, 3), torch.float32))


# ---------------------------------------------------------------------------- movement


def test_views():
    x = make((2, 3, 4), torch.float32)
    fns = [lambda t: t.view(6, 4), lambda t: t.view(-1), lambda t: t.reshape(4, 6),
           lambda t: t.permute(2, 0, 1),
           lambda t: t.transpose(0, 2), lambda t: t[0].t(), lambda t: t[:, :1].expand(2, 5, 4),
           lambda t: t.unsqueeze(1).squeeze(), lambda t: t[:, :1].squeeze(1), lambda t: t.flatten(),
           lambda t: t.flatten(1), lambda t: t[:, ::2, 1::2], lambda t: t[..., -1], lambda t: t.select(1, 2),
           lambda t: t.narrow(2, 1, 2), lambda t: t.split(2, 2), lambda t: t.split([1, 2], 1),
           lambda t: t.chunk(3, 1), lambda t: t.unbind(0), lambda t: t.as_strided((3, 2), (2, 5), 1),
           lambda t: t.transpose(0, 1).contiguous(), lambda t: t.permute(2, 1, 0).clone(),
           lambda t: t.transpose(1, 2).reshape(2, 12), lambda t: t.unsqueeze(-1).expand(2, 3, 4, 2),
           lambda t: t[None, :, None], lambda t: t.movedim(0, -1), lambda t: t.unflatten(2, (2, 2)),
           lambda t: t.diagonal(0, 1, 2), lambda t: t.t() if t.dim() == 2 else t.mT]
    for fn in fns:
        check(fn, x)
    for dtype in (torch.int64, torch.bool, torch.float16, torch.uint8):
        check(lambda t: t.permute(1, 0, 2)[:, 1:, ::3].reshape(-1), make((2, 3, 4), dtype))


def test_view_mutation_semantics():
    # Writes through views reach the base and other views; earlier results keep their values.
    def fn(t):
        v = t[1]
        y = t * 2
        v.add_(10)
        t[:, 0] = -1
        w = t.transpose(0, 1)
        w[2].mul_(3)
        return t, v, y, w
    check(fn, make((3, 4), torch.float32))
    check(lambda t: (t.view(-1)[::2].zero_(), t)[1], make((3, 4), torch.int64), mutates=(0,))
    check(lambda t: (t.unsqueeze(0).fill_(5), t)[1], make((3,), torch.float32), mutates=(0,))


def test_cat_stack_flip_roll_pad():
    a, b = make((2, 3), torch.float32, seed=1), make((4, 3), torch.float32, seed=2)
    check(lambda x, y: torch.cat([x, y]), a, b)
    check(lambda x, y: torch.cat([x.t(), y.t()], 1), a, b)
    check(lambda x, y: torch.cat([x, y.to(torch.float64)]), a, b)
    check(lambda x: torch.cat([x, torch.empty(0).to(x.device)]), a)
    check(lambda x, y: torch.stack([x, y[:2]], 1), a, b)
    check(lambda x, y: torch.stack([x, y[1:3]], -1), a, b)
    check(lambda x, o: (torch.cat([x, x], out=o), o)[1], a, torch.empty(4, 3), mutates=(1,))
    check(lambda x: torch.cat([x, x], 0), make((2, 3), torch.bool))
    x = make((3, 4, 5), torch.float32)
    check(lambda t: t.flip(0), x)
    check(lambda t: t.flip(-1, 1), x)
    check(lambda t: t.roll(2, 1), x)
    check(lambda t: t.roll((1, -2), (0, 2)), x)
    check(lambda t: t.roll(3), x)
    check(lambda t: torch.nn.functional.pad(t, (1, 2)), x)
    check(lambda t: torch.nn.functional.pad(t, (1, 0, 0, 2), value=3.5), x)
    check(lambda t: torch.nn.functional.pad(t, (-1, 1, 2, -1)), x)
    check(lambda t: torch.nn.functional.pad(t, (1, 1), value=7), make((2, 3), torch.int64))


# ---------------------------------------------------------------------------- matmul


def test_matmul_family():
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16]:
        a, b = make((3, 5), dtype, seed=1), make((5, 4), dtype, seed=2)
        check(torch.mm, a, b)
        check(torch.matmul, a, b)
        check(lambda x, y: x @ y, a, b)
        check(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), a, b, make((4,), dtype, seed=3))
        check(lambda x, w, bias: torch.nn.functional.linear(x, w, bias), a, b.t(), make((4,), dtype, seed=3))
    a3, b3 = make((2, 3, 5), torch.float32, seed=1), make((2, 5, 4), torch.float32, seed=2)
    check(torch.bmm, a3, b3)
    check(lambda x, y, z: torch.baddbmm(z, x, y, alpha=0.5), a3, b3, make((2, 3, 4), torch.float32))
    check(torch.matmul, a3, make((5, 4), torch.float32))
    check(torch.matmul, make((5,), torch.float32), make((5, 4), torch.float32))
    check(torch.matmul, make((3, 5), torch.float32), make((5,), torch.float32))
    check(torch.matmul, make((5,), torch.float32), make((5,), torch.float32))
    check(torch.matmul, make((2, 1, 3, 5), torch.float32), make((4, 5, 2), torch.float32))
    check(torch.mm, make((3, 5), torch.int64), make((5, 2), torch.int64))
    check(lambda x, y, o: (torch.mm(x, y, out=o), o)[1],
          make((3, 5), torch.float32), make((5, 2), torch.float32), torch.empty(3, 2), mutates=(2,))
    check(lambda x, y: x.t() @ y.t(), make((5, 3), torch.float32), make((4, 5), torch.float32))


# ---------------------------------------------------------------------------- nn.functional

F = torch.nn.functional


def test_nn_functional():
    x = make((4, 6), torch.float32)
    w, bias = make((3, 6), torch.float32, seed=1), make((3,), torch.float32, seed=2)
    check(F.linear, x, w, bias)
    check(F.linear, x, w)
    check(F.relu, x)
    check(lambda t: F.relu(t, inplace=True), x, mutates=(0,))
    check(F.gelu, x)
    check(F.silu, x)
    check(lambda t: F.softmax(t, -1), x)
    check(lambda t: F.log_softmax(t, 0), x)
    check(lambda t, ww, bb: F.layer_norm(t, (6,), ww, bb), x,
          make((6,), torch.float32), make((6,), torch.float32))
    check(lambda t: F.layer_norm(t, (4, 6)), x)
    check(lambda t: F.layer_norm(t, (6,)), make((2, 6), torch.bfloat16))
    emb = make((10, 4), torch.float32)
    check(F.embedding, torch.tensor([[1, 9], [0, 1]]), emb)
    target = make((4, 6), torch.float32, seed=5)
    for reduction in ("mean", "sum", "none"):
        check(lambda a, b, r=reduction: F.mse_loss(a, b, reduction=r), x, target)
    labels = torch.tensor([0, 5, 2, 2])
    check(F.cross_entropy, x, labels)
    check(lambda a, y: F.cross_entropy(a, y, reduction="sum"), x, labels)
    check(lambda a, y: F.cross_entropy(a, y, label_smoothing=0.1), x, labels)
    check(lambda a, y: F.nll_loss(F.log_softmax(a, 1), y), x, labels)
    check(lambda a, y: F.nll_loss(a, y, reduction="none"), x, labels)
    check(lambda a, y: F.nll_loss(a, y, ignore_index=2), x, labels)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_lowered_with_gradients(reduction, weighted, no_fallback):
    """nll_loss forward and backward are zyx lowerings (class weights, ignore_index, 1-d input,
    spatial inputs: nll_loss2d, which 3-d and 5-d inputs also reach)."""
    gen = torch.Generator().manual_seed(3)
    spatial = [((2, 7, 3, 4), torch.randint(0, 7, (2, 3, 4), generator=gen)),
               ((2, 7, 5), torch.randint(0, 7, (2, 5), generator=gen)),
               ((2, 7, 3, 2, 2), torch.randint(0, 7, (2, 3, 2, 2), generator=gen))]
    for shape, target in [((5, 7), torch.tensor([0, 2, 6, 2, 3])), ((7,), torch.tensor(4))] + spatial:
        for ignore_index in (-100, 2):
            x = torch.randn(shape, generator=gen)
            weight = torch.rand(7, generator=gen) if weighted else None
            results = []
            for device in ("cpu", "zyx"):
                xd = x.to(device).detach().requires_grad_()
                wd = None if weight is None else weight.to(device)
                loss = F.nll_loss(xd, target.to(device), weight=wd, reduction=reduction,
                                  ignore_index=ignore_index)
                loss.backward(torch.linspace(0.5, 1.5, loss.numel()).reshape(loss.shape).to(device))
                results.append((loss.detach().cpu(), xd.grad.cpu()))
            torch.testing.assert_close(results[1], results[0], equal_nan=True)


def test_dropout():
    x = make((8, 16), torch.float32, positive=True)
    check(lambda t: F.dropout(t, p=0.0), x)
    check(lambda t: F.dropout(t, p=0.5, training=False), x)
    torch_zyx.reset_counters()
    z = x.to("zyx")
    y = F.dropout(z, p=0.5)
    assert y.shape == z.shape and y.device.type == "zyx"
    out = y.cpu()
    kept = out != 0
    assert torch.allclose(out[kept], x[kept] * 2)
    assert 0.2 < kept.float().mean().item() < 0.8
    assert torch_zyx.counters()["cpu_fallbacks"] == 0
    m = torch.nn.Dropout(0.3).eval()
    check(m, x)


# ---------------------------------------------------------------------------- factories and conversions


def test_factories():
    torch_zyx.reset_counters()
    d = "zyx"
    cases = [
        (torch.zeros(2, 3, device=d), torch.zeros(2, 3)),
        (torch.ones(4, dtype=torch.int32, device=d), torch.ones(4, dtype=torch.int32)),
        (torch.full((2, 2), 3.5, device=d), torch.full((2, 2), 3.5)),
        (torch.full((2,), 7, device=d), torch.full((2,), 7)),
        (torch.full((2,), True, device=d), torch.full((2,), True)),
        (torch.arange(5, device=d), torch.arange(5)),
        (torch.arange(1, 4, 0.5, device=d), torch.arange(1, 4, 0.5)),
        (torch.arange(10, 0, -3, device=d), torch.arange(10, 0, -3)),
        (torch.linspace(0, 1, 7, device=d), torch.linspace(0, 1, 7)),
        (torch.linspace(-2, 5, 1, device=d), torch.linspace(-2, 5, 1)),
        (torch.eye(3, device=d), torch.eye(3)),
        (torch.eye(2, 4, dtype=torch.int64, device=d), torch.eye(2, 4, dtype=torch.int64)),
    ]
    for z, c in cases:
        compare(z, c)
    e = torch.empty(3, 4, device=d)
    assert e.shape == (3, 4) and e.dtype == torch.float32 and e.device.type == "zyx"
    x = make((2, 3), torch.float32).to(d)
    for fn in (torch.zeros_like, torch.ones_like, lambda t: torch.full_like(t, 2), torch.empty_like):
        y = fn(x)
        assert y.shape == x.shape and y.device == x.device and y.dtype == x.dtype
    compare(torch.ones_like(x, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))
    torch.manual_seed(0)
    r = torch.rand(200, device=d).cpu()
    assert r.min() >= 0 and r.max() < 1 and 0.35 < r.mean() < 0.65
    n = torch.randn(400, device=d).cpu()
    assert abs(n.mean()) < 0.25 and 0.75 < n.std() < 1.25
    ri = torch.randint(3, 9, (300,), device=d).cpu()
    assert ri.dtype == torch.int64 and ri.min() >= 3 and ri.max() <= 8 and len(ri.unique()) == 6
    assert torch.rand_like(x).shape == x.shape and torch.randn_like(x).device.type == "zyx"
    ril = torch.randint_like(x, 10).cpu()
    assert ril.dtype == torch.float32 and ril.min() >= 0 and ril.max() < 10 and (ril == ril.round()).all()
    assert torch_zyx.counters()["cpu_fallbacks"] == 0


def test_item_tolist_to():
    x = make((2, 3), torch.float32)
    z = x.to("zyx")
    assert z.sum().item() == pytest.approx(x.sum().item(), rel=1e-5)
    assert z[1, 2].item() == x[1, 2].item()
    assert z.tolist() == x.tolist()
    assert torch.arange(4, device="zyx").tolist() == [0, 1, 2, 3]
    assert isinstance(torch.tensor(3, device="zyx").item(), int)
    assert torch.tensor(True, device="zyx").item() is True
    for dtype in ALL:
        check(lambda t, dtype=dtype: t.to(dtype), x * 3)
        check(lambda t: t.to(torch.float32), make((5,), dtype))
    check(lambda t: t.double().half().int().long().bool(), x)
    check(lambda t: t.to(torch.uint8), torch.tensor([0.0, 1.7, 200.2, 255.0]))


# ---------------------------------------------------------------------------- errors


ERROR_CASES = [
    lambda a, b: a + b[:2],
    lambda a, b: a @ b,
    lambda a, b: torch.mm(a, b[0]),
    lambda a, b: torch.cat([a, b.t()], 0),
    lambda a, b: a.view(5),
    lambda a, b: a.reshape(7),
    lambda a, b: a.sum(3),
    lambda a, b: a.permute(0),
    lambda a, b: a.long().add_(b),
    lambda a, b: a.bool().sub(b.bool()),
    lambda a, b: torch.bitwise_and(a, b),
    lambda a, b: a.expand(5, 4),
    lambda a, b: a.transpose(0, 3),
    lambda a, b: torch.stack([a, b[:2]]),
    lambda a, b: a.mean(dtype=torch.int64),
    lambda a, b: a.long().mean(),
    lambda a, b: a.gather(0, b.long()[:1, :1].expand(5, 5)),
    lambda a, b: a.index_select(0, torch.tensor([0.5]).to(a.device)),
    lambda a, b: torch.mm(a, b.double()),
    lambda a, b: a.masked_fill(b, 1.0),
    lambda a, b: a.split(0, 0),
]


@pytest.mark.parametrize("index", range(len(ERROR_CASES)))
def test_errors_match_cpu(index):
    fn = ERROR_CASES[index]
    a, b = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    with pytest.raises(Exception) as cpu_error:
        fn(a, b)
    with pytest.raises(cpu_error.type):
        fn(a.to("zyx"), b.to("zyx"))


# Argument checks ATen makes that a lowering must make too (zyx would otherwise compute something):
# (call on a 3x4 float tensor and an int64 0..11 tensor of the same shape, on the device).
ARGUMENT_ERROR_CASES = {
    "layer_norm empty shape": lambda a, i: torch.native_layer_norm(a, (), None, None, 1e-5),
    "layer_norm weight shape": lambda a, i: torch.native_layer_norm(a, (4,), a[0, :3], None, 1e-5),
    "layer_norm bias shape": lambda a, i: torch.native_layer_norm(a, (4,), None, a[:, 0], 1e-5),
    "layer_norm input shape": lambda a, i: F.layer_norm(a, (3,)),
    "gelu approximate": lambda a, i: F.gelu(a, approximate="asdf"),
    "normal_ negative std": lambda a, i: a.normal_(0, -1),
    "uniform_ empty range": lambda a, i: a.uniform_(3, -1),
    "eye negative n": lambda a, i: torch.eye(-1, device=a.device),
    "eye negative m": lambda a, i: torch.eye(2, -3, device=a.device),
    "max dim out of range": lambda a, i: torch.max(a[0], 2),
    "min dim out of range": lambda a, i: torch.min(a, -3),
    "max_pool2d negative pad": lambda a, i: F.max_pool2d(a[None], 2, padding=-1),
    "max_pool2d pad over half": lambda a, i: F.max_pool2d(a[None], 2, padding=2),
    "max_pool2d empty plane": lambda a, i: F.max_pool2d(a[None, :0], 1),
    "max_pool2d output too small": lambda a, i: F.max_pool2d(a[None], 5),
    "max_pool1d pad over half": lambda a, i: F.max_pool1d(a, 2, padding=2),
    "max_pool3d empty dimension": lambda a, i: F.max_pool3d(a[None, None, :0], 1),
    "avg_pool2d divisor zero": lambda a, i: F.avg_pool2d(a[None], 2, divisor_override=0),
    "avg_pool2d pad over half": lambda a, i: F.avg_pool2d(a[None], 2, padding=3),
    "adaptive_max_pool2d output rank": lambda a, i: F.adaptive_max_pool2d(a[None], ()),
    "adaptive_max_pool2d negative output": lambda a, i: F.adaptive_max_pool2d(a[None], (-1, 2)),
    "dot dtypes": lambda a, i: torch.dot(a[0], a[1, :3].double()),
    "masked_scatter float mask": lambda a, i: a.masked_scatter(a, a),
    "take out= overlaps input": lambda a, i: torch.take(a, i[0, :3], out=a[0, :3]),
    "index_select out= overlaps input": lambda a, i: torch.index_select(a, 0, i[0, :2], out=a[1:]),
    "masked_select out= is input": lambda a, i: torch.masked_select(a, a > 0, out=a),
    "take out= expanded": lambda a, i: torch.take(a, i[0, :3], out=torch.empty(1, device=a.device).expand(3)),
    "add out= expanded": lambda a, i: torch.add(a, 1, out=torch.empty(1, 4, device=a.device).expand(3, 4)),
    "gather out= overlaps input": lambda a, i: torch.gather(a, 1, i[:1, :2] % 4, out=a[:1, :2]),
    "gather out= dtype": lambda a, i: torch.gather(a, 1, i % 4, out=torch.empty(3, 4, dtype=torch.float64,
                                                                                 device=a.device)),
    "aminmax out= dtype": lambda a, i: torch.aminmax(a, dim=0, out=(torch.empty(4, dtype=torch.int32,
                                                                                device=a.device), a[0])),
    "ormqr tau length": lambda a, i: torch.ormqr(a, a[0, :2], a[:, :2]),
    "ormqr other rows": lambda a, i: torch.ormqr(a, a[0, :3], a[:2]),
    "ormqr other cols (right)": lambda a, i: torch.ormqr(a, a[0, :3], a, left=False),
    "ormqr tau ndim": lambda a, i: torch.ormqr(a, a[:, :3], a),
    "ormqr other ndim": lambda a, i: torch.ormqr(a[None], a[:1, :3], a),
    "ormqr other batch": lambda a, i: torch.ormqr(a[None], a[:1, :3], a[None].expand(2, 3, 4)),
    "ormqr tau 0-d": lambda a, i: torch.ormqr(a, a[0, 0], a),
}


@pytest.mark.parametrize("name", ARGUMENT_ERROR_CASES)
def test_argument_errors_match_cpu(name):
    fn = ARGUMENT_ERROR_CASES[name]
    a, i = make((3, 4), torch.float32, seed=1), torch.arange(12).reshape(3, 4)
    with pytest.raises(Exception) as cpu_error:
        fn(a, i)
    with pytest.raises(cpu_error.type) as zyx_error:
        fn(a.to("zyx"), i.to("zyx"))
    # (the CPU's message may start with the name of its kernel, "max_pool3d_..._cpu_template(): ")
    assert str(cpu_error.value).endswith(str(zyx_error.value))


@pytest.mark.parametrize("fn", [lambda a, b: torch.dot(a[0], b[0]), lambda a, b: torch.mm(a, b.t()),
                                lambda a, b: torch.dot(b[0], a[0])])
def test_operands_on_another_device_raise_runtime_error(fn):
    # A CPU tensor among a zyx op's operands: RuntimeError like ATen's, not an AttributeError
    # from inside the lowering.
    a, b = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        fn(a.to("zyx"), b)


def test_negative_sizes_raise_assertions_in_the_node_table():
    # A shape with a negative size has a negative element count: the C table took it for its
    # own error value and raised SystemError ("returned NULL without setting an exception").
    from torch_zyx.lazy import graph as g

    for shape in [(-1,), (-4,), (2, -2)]:
        with pytest.raises(AssertionError):
            g.reshape(g.iota((4,)), shape)


# ---------------------------------------------------------------------------- sort and scan (opinfo-a)

SORT_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bool]


def _distinct(shape, dtype, seed=0):
    # Ties between equal values are ordered differently by ATen's (unstable) algorithms; a
    # permutation keeps every value unique so indices are comparable too.
    perm = torch.randperm(math.prod(shape), generator=torch.Generator().manual_seed(seed)) - 5
    return perm.reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype", SORT_DTYPES)
def test_sort_topk_kthvalue(dtype):
    x = _distinct((4, 7), dtype) if dtype != torch.bool else make((4, 7), dtype)
    check(lambda t: torch.sort(t, 1), x)
    check(lambda t: torch.sort(t, 0, descending=True, stable=True), x)
    check(lambda t: torch.argsort(t, 1, stable=True), x)
    check(lambda t: torch.msort(t), x)
    if dtype != torch.bool:
        check(lambda t: torch.topk(t, 3), x)
        check(lambda t: torch.topk(t, 2, 0, largest=False), x)
        check(lambda t: torch.kthvalue(t, 3, 1, keepdim=True), x)
        check(lambda t: torch.median(t, 1), x)
        check(lambda t: torch.median(t), x)


def test_sort_nan_and_ties():
    x = torch.tensor([[3.0, float("nan"), 1.0, 1.0, -float("inf"), 2.0, float("nan")]])
    check(lambda t: torch.sort(t, 1, stable=True), x)
    check(lambda t: torch.sort(t, 1, descending=True, stable=True), x)
    check(lambda t: torch.median(t, 1), x)
    check(lambda t: torch.nanmedian(t, 1), x)
    check(lambda t: torch.nanmedian(t), x)
    check(lambda t: torch.mode(t[:, 2:6], 1), x)
    check(lambda t: torch.mode(t, 0), torch.tensor([3, 1, 1, 2, 2, 3, 0]))


def test_sort_errors():
    x = make((2, 3), torch.float32)
    check(lambda t: torch.sort(t, 2), x)
    check(lambda t: torch.topk(t, 4), x)
    check(lambda t: torch.kthvalue(t, 0), x)
    check(lambda t: torch.median(t[:, :0], 1), x)
    check(lambda t: torch.sort(t[0, 0]), x)


@pytest.mark.parametrize("dtype", SORT_DTYPES + [torch.float16])
def test_scans(dtype):
    x = make((3, 6), dtype, low=-2, high=2)
    if dtype.is_floating_point:
        x[1, 2] = float("nan")
    check(lambda t: torch.cumsum(t, 1), x)
    check(lambda t: torch.cumprod(t, 1), x)
    check(lambda t: torch.cummax(t, 1), x)
    check(lambda t: torch.cummin(t, 0), x)
    if dtype.is_floating_point:
        check(lambda t: torch.logcumsumexp(t, 1), x)
    check(lambda t: torch.logcumsumexp(t, 3), make((2, 2), torch.float32))


def test_equal_allclose_aminmax():
    x = make((3, 4), torch.float32)
    check(lambda t: torch.equal(t, t.clone()), x)
    check(lambda t: torch.equal(t, t + 1), x)
    check(lambda t: torch.equal(t, t[:2]), x)
    check(lambda t: torch.allclose(t, t + 1e-9), x)
    check(lambda t: torch.allclose(t, t + 1), x)
    check(lambda t: torch.aminmax(t), x)
    check(lambda t: torch.aminmax(t, dim=1, keepdim=True), x)
    empty = make((5, 0, 5), torch.float32)
    check(lambda t: torch.aminmax(t), empty)
    check(lambda t: torch.aminmax(t, dim=1), empty)
    check(lambda t: torch.amax(t), empty)
    check(lambda t: torch.amax(t, 1), empty)
    check(lambda t: torch.amax(t, 0), empty)
    check(lambda t: torch.amax(t, (0, 0)), x)
    check(lambda t: -t, make((3,), torch.bool))


SPECIAL = {
    "i0": torch.i0, "i0e": torch.special.i0e, "i1": torch.special.i1, "i1e": torch.special.i1e,
    "digamma": torch.digamma, "trigamma": lambda t: torch.polygamma(1, t),
    "polygamma3": lambda t: torch.polygamma(3, t),
    # Off the poles at ±1, where a 1-ulp difference in tanh (OpenCL's vs CPU's) gives inf.
    "erfinv": lambda t: torch.erfinv(torch.tanh(t / 4) * 0.99),
    "signbit": torch.signbit, "angle": torch.angle, "frexp": torch.frexp,
    "zeta": lambda t: torch.special.zeta(t.abs() + 1.5, t.abs() + 0.5),
    "round3": lambda t: torch.round(t * 100, decimals=3),
    "round-2": lambda t: torch.round(t * 100, decimals=-2),
}


@pytest.mark.parametrize("name", list(SPECIAL))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_functions(name, dtype):
    x = make((4, 8), dtype, low=-20, high=20)
    x[0, :6] = torch.tensor([0.0, -0.0, -3.0, 1e-3, float("nan"), float("inf")], dtype=dtype)
    check(SPECIAL[name], x, rtol=1e-4 if dtype == torch.float32 else 1e-7, atol=1e-5)


def test_gcd_lcm():
    a, b = make((50,), torch.int64, low=-100, high=100), make((50,), torch.int64, seed=1, low=-100, high=100)
    a[0] = b[0] = 0
    for dtype in (torch.int32, torch.int64):
        check(torch.gcd, a.to(dtype), b.to(dtype))
        check(torch.lcm, a.to(dtype), b.to(dtype))
    check(torch.gcd, a.float(), b.float())


def test_equal_zero_dim():
    check(lambda a, b: torch.equal(a, b), torch.tensor(1.5), torch.tensor(2.5))
    check(lambda a, b: torch.equal(a, b), torch.tensor(1.5), torch.tensor(1.5))


# ---------------------------------------------------------------------------- pooling (1d-3d, adaptive)

POOLS = {
    "max_pool3d": lambda t: F.max_pool3d(t, 2, stride=1, padding=1, return_indices=True),
    "max_pool3d_ceil": lambda t: F.max_pool3d(t, (2, 3, 2), stride=2, ceil_mode=True),
    "avg_pool3d": lambda t: F.avg_pool3d(t, (2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 1), ceil_mode=True),
    "avg_pool3d_no_pad": lambda t: F.avg_pool3d(t, 2, stride=1, padding=1, count_include_pad=False),
    "adaptive_max_pool1d": lambda t: F.adaptive_max_pool1d(t.flatten(2), 3, return_indices=True),
    "adaptive_max_pool2d": lambda t: F.adaptive_max_pool2d(t.flatten(1, 2), (3, 4), return_indices=True),
    "adaptive_max_pool3d": lambda t: F.adaptive_max_pool3d(t, (2, 3, 5), return_indices=True),
    "adaptive_avg_pool2d": lambda t: F.adaptive_avg_pool2d(t.flatten(1, 2), (4, 3)),
    "adaptive_avg_pool3d": lambda t: F.adaptive_avg_pool3d(t, (3, 2, 4)),
    "interpolate_area": lambda t: F.interpolate(t, size=(2, 3, 5), mode="area"),
}


@pytest.mark.parametrize("name", list(POOLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_pools(name, dtype):
    if dtype == torch.bfloat16 and name.startswith("avg_pool3d"):
        pytest.skip("CPU torch has no bfloat16 avg_pool3d kernel to compare with")
    check(POOLS[name], make((2, 3, 5, 4, 7), dtype))


@pytest.mark.parametrize("name", [n for n in POOLS if "ceil" not in n])
def test_pool_grads(name):
    x = make((2, 3, 5, 4, 7), torch.float32)

    def grad(t):
        t = t.clone().requires_grad_()
        out = POOLS[name](t)
        out = out[0] if isinstance(out, tuple) else out
        weight = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
        (out * weight).sum().backward()
        return t.grad

    check(grad, x)


def test_avg_pool3d_integer_division():
    check(lambda t: F.avg_pool3d(t, 2, stride=1), make((1, 2, 3, 4, 4), torch.int64, low=-50, high=50))


# ---------------------------------------------------------------------------- search and count

SEARCHES = {
    "searchsorted": lambda s, v: torch.searchsorted(s, v),
    "searchsorted_right": lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True),
    "searchsorted_rows": lambda s, v: torch.searchsorted(s.reshape(2, 3), v.reshape(2, 4), side="right"),
    "searchsorted_sorter": lambda s, v: torch.searchsorted(
        s.flip(0), v, sorter=torch.arange(5, -1, -1).to(s.device)),
    "bucketize": lambda s, v: torch.bucketize(v, s),
    "isin": lambda s, v: torch.isin(v, s),
}


@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_searchsorted_family(name, dtype):
    seq = torch.tensor([-3, -1, 0, 0, 2, 5]).to(dtype)
    values = torch.tensor([[-4, -1, 0, 1], [2, 3, 5, 9]]).to(dtype)
    check(SEARCHES[name], seq, values)


UNIQUES = {
    "unique": lambda t: torch.unique(t),
    "unique_all": lambda t: torch.unique(t, return_inverse=True, return_counts=True),
    "_unique": lambda t: torch._unique(t, return_inverse=True),
    "unique_dim": lambda t: torch.unique(t, dim=1, return_inverse=True, return_counts=True),
    "unique_consecutive": lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True),
    "unique_consecutive_dim": lambda t: torch.unique_consecutive(t, dim=0, return_counts=True),
}


@pytest.mark.parametrize("name", list(UNIQUES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_unique_family(name, dtype):
    x = make((4, 6), dtype, low=-2, high=2)
    x[1] = x[0]  # repeated rows and runs
    check(UNIQUES[name], x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_histc(dtype):
    x = make((40,), dtype, low=-3, high=3)
    check(lambda t: torch.histc(t, bins=7), x)
    check(lambda t: torch.histc(t, bins=5, min=-1, max=2), x)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    weight = make((10, 3), torch.float32)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3])
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), weight, indices, offsets)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=2), weight, indices, offsets)

    def grad(w, i, o):
        w = w.clone().requires_grad_()
        F.embedding_bag(i, w, o, mode=mode).pow(2).sum().backward()
        return w.grad

    check(grad, weight, indices, offsets)


def test_resize_as_and_functional_resize():
    check(lambda a, b: a.resize_as_(b), make((5, 4), torch.float32), make((20,), torch.float32), mutates=(0,))
    check(lambda a: torch.ops.aten.resize(a, (3, 2)), make((2, 4), torch.float32))


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, float("inf")])
def test_cdist_pdist(p):
    a, b = make((2, 5, 3), torch.float32), make((2, 4, 3), torch.float32, seed=1)
    check(lambda x, y: torch.cdist(x, y, p=p), a, b)
    check(lambda x: F.pdist(x, p=p), a[0])

    def grads(x, y):
        x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
        (torch.cdist(x, y, p=p).pow(2).sum() + F.pdist(x[0], p=p).sum()).backward()
        return x.grad, y.grad

    check(grads, a, b)


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
def test_segment_reduce(reduce):
    data = make((6, 3), torch.float32)
    lengths, offsets = torch.tensor([2, 0, 3, 1]), torch.tensor([0, 2, 2, 5, 6])
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n), data, lengths)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=1.5), data, offsets)

    def grad(d, n):
        d = d.clone().requires_grad_()
        torch.segment_reduce(d, reduce, lengths=n, initial=1.0).pow(2).sum().backward()
        return d.grad

    check(grad, data, lengths)


@pytest.mark.parametrize("size", [(3, 5), (9, 4), (7, 7)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_bilinear_antialias(size, align_corners):
    x = make((2, 3, 6, 8), torch.float32)

    def run(t):
        t = t.clone().requires_grad_()
        out = F.interpolate(t, size=size, mode="bilinear", antialias=True, align_corners=align_corners)
        (out * out).sum().backward()
        return out, t.grad

    check(run, x)


def test_conv_transpose_output_padding_grad():
    x, w = make((2, 2, 4, 4), torch.float32), make((2, 3, 3, 3), torch.float32, seed=1)

    def grads(a, b):
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        F.conv_transpose2d(a, b, stride=2, padding=1, output_padding=1).pow(2).sum().backward()
        return a.grad, b.grad

    check(grads, x, w)


def test_multinomial_draws():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 2.0]])
    draws = torch.multinomial(probs.to("zyx"), 4000, replacement=True).cpu()
    assert draws.shape == (2, 4000) and draws.dtype == torch.int64
    freq = torch.stack([torch.bincount(row, minlength=4) for row in draws]).double() / 4000
    expected = (probs / probs.sum(1, keepdim=True)).double()
    torch.testing.assert_close(freq, expected, atol=0.04, rtol=0)
    picks = torch.multinomial(probs.to("zyx"), 2, replacement=False).cpu()
    for row, p in zip(picks, probs):
        assert row[0] != row[1] and bool((p[row] > 0).all())


def test_rrelu():
    x = make((200,), torch.float32)
    check(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    out = F.rrelu(x.to("zyx"), 0.1, 0.3, training=True).cpu()
    slope = out[x < 0] / x[x < 0]
    assert bool(((slope >= 0.1) & (slope <= 0.3)).all()) and slope.std() > 0.01
    torch.testing.assert_close(out[x >= 0], x[x >= 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_stats_dtype(dtype):
    x, w, b = make((4, 3, 5), dtype), make((3,), dtype, seed=1), make((3,), dtype, seed=2)
    rm, rv = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    aten = torch.ops.aten
    check(lambda *a: aten.native_batch_norm(*a, True, 0.1, 1e-5), x, w, b, rm, rv, mutates=(3, 4))
    check(lambda *a: aten._batch_norm_with_update(*a, 0.1, 1e-5)[:3], x, w, b, rm, rv, mutates=(3, 4))
    check(lambda t: aten.native_layer_norm(t, [5], None, None, 1e-5), x)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_ctc_loss(reduction):
    log_probs = make((12, 3, 5), torch.float32).log_softmax(2)
    targets = torch.tensor([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 2, 0]])
    input_lengths, target_lengths = [12, 10, 7], [4, 2, 3]

    def run(lp, tg):
        lp = lp.clone().requires_grad_()
        loss = F.ctc_loss(lp, tg, input_lengths, target_lengths, reduction=reduction)
        loss.sum().backward()
        return loss, lp.grad

    check(run, log_probs, targets)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "linear", "trilinear"])
@pytest.mark.parametrize("scale", [1.7, 0.6])
def test_interpolate_grad(mode, scale):
    shape = {"linear": (2, 3, 6), "trilinear": (1, 2, 3, 4, 5)}.get(mode, (2, 2, 4, 5))
    kw = {} if mode.startswith("nearest") else {"align_corners": False}

    def grad(t):
        t = t.clone().requires_grad_()
        out = F.interpolate(t, scale_factor=scale, mode=mode, **kw)
        (out * out).sum().backward()
        return t.grad

    check(grad, make(shape, torch.float32))


@pytest.mark.parametrize("nsp", [2, 3])
def test_fractional_max_pool_explicit_samples(nsp):
    # The functional form draws its samples from the device RNG; the aten op takes them as input.
    if nsp == 2:
        shape, kernel, out = (2, 3, 9, 7), (3, 2), (4, 3)
    else:
        shape, kernel, out = (2, 2, 6, 5, 7), (2, 2, 3), (3, 2, 4)
    op = torch.ops.aten.fractional_max_pool2d if nsp == 2 else torch.ops.aten.fractional_max_pool3d
    samples = torch.rand(shape[0], shape[1], nsp, generator=torch.Generator().manual_seed(3))

    def run(t, s):
        t = t.clone().requires_grad_()
        values, indices = op(t, kernel, out, s)
        (values * values).sum().backward()
        return values, indices, t.grad

    check(run, make(shape, torch.float32), samples)
