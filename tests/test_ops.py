"""The op list of issue 2 on zyx against CPU torch: values, dtypes, in-place/out= forms, errors.

Each check runs the same function on CPU tensors and on zyx copies and compares results (and
mutated inputs). Ops that must be native also assert no CPU fallback happened.
"""


import pytest
import torch
from conftest import ALL, FLOATS, INTS, check, compare, make
from torch.testing import assert_close

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
            if dim == () and name in ("logsumexp", "prod"):
                continue
            if isinstance(dim, tuple) and name in ("prod",):
                continue
            check(lambda t, dim=dim, keepdim=keepdim: fn(t, dim, keepdim=keepdim), x)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_integer_reductions_wrap_in_their_dtype(dtype):
    # Sums and products kept in a narrow integer dtype wrap around as CPU torch's (uint8 sums
    # computed a bitwise or).
    x = torch.tensor([[255, 2, 1, 200], [5, 3, 6, 100], [7, 250, 9, 1]]).to(dtype)
    for fn in (lambda t: t.sum(0, dtype=dtype), lambda t: t.sum(1, dtype=dtype), lambda t: t.prod(0, dtype=dtype),
               lambda t: t.nansum(0, dtype=dtype), lambda t: t.cumsum(0, dtype=dtype),
               lambda t: t.sum(dtype=dtype)):
        check(fn, x)


def test_heaviside_and_narrow_lcm():
    x = torch.tensor([-2.0, 0.0, 3.0, float("nan"), -0.0, float("inf")])
    check(torch.heaviside, x, torch.tensor([0.5, 0.25, 7.0, 1.0, 2.0, 3.0]))
    check(torch.heaviside, x, torch.tensor(0.5))
    check(torch.heaviside, torch.tensor([-3, 0, 4]), torch.tensor([9, 8, 7]))
    # 8- and 16-bit lcm is computed in int and truncated after its abs, as ATen's C++ does.
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32):
        a = torch.tensor([300, -7, 32767, 127, 90, 1000]).to(dtype)
        b = torch.tensor([250, 3, 2, 126, 75, 999]).to(dtype)
        check(torch.lcm, a, b)


def test_integer_comparisons_with_float_scalars():
    # (nan and infinities raised converting the scalar to the tensor's dtype)
    x = torch.tensor([-3, 0, 1, 2, 3])
    for value in (float("nan"), float("inf"), -float("inf"), 2.5, -0.5, 1e30):
        for op in ("eq", "ne", "lt", "le", "gt", "ge"):
            check(lambda t, op=op, value=value: getattr(t, op)(value), x)
            check(lambda t, op=op, value=value: getattr(t, op)(value), x.to(torch.uint8).clamp(0))


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
    with pytest.raises(RuntimeError, match="Tensors must have same number of dimensions: got 1 and 2"):
        torch.cat([torch.ones(2, device="zyx"), torch.ones(2, 2, device="zyx")])  # CPU torch's words
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


def test_layer_norm_records_native_layer_norm_only_when_needed(monkeypatch):
    # F.layer_norm with no gradient to record is the normalized tensor alone; a gradient, a
    # forward-mode tangent or a dispatch mode takes native_layer_norm (its three results) as
    # ATen's composite form does. Each way against CPU torch.
    import torch.autograd.forward_ad as fwAD
    from torch.utils._python_dispatch import TorchDispatchMode

    from torch_zyx.ops import registry

    name = torch.ops.aten.native_layer_norm.default._name
    native = registry.LOWERINGS.by_name[name]
    calls = []

    def counted(*args):
        calls.append(args)
        return native(*args)

    monkeypatch.setitem(registry.LOWERINGS.by_name, name, counted)
    x, t = make((4, 6), torch.float32), make((4, 6), torch.float32, seed=1)
    w, b = make((6,), torch.float32, seed=2), make((6,), torch.float32, seed=3)
    xz, tz, wz, bz = (v.to("zyx") for v in (x, t, w, b))
    expected = F.layer_norm(x, (6,), w, b)
    with torch.no_grad():
        got = F.layer_norm(xz, (6,), wz, bz)
    assert_close(got.cpu(), expected)
    assert_close(F.layer_norm(xz, (6,)).cpu(), F.layer_norm(x, (6,)))
    assert not calls
    # (Inference mode skips every autograd key: the composite form runs below them.)
    with torch.inference_mode():
        inferred = F.layer_norm(xz, (6,), wz, bz)
    assert inferred.is_inference() and len(calls) == 1
    assert_close(inferred.cpu(), expected)

    wg = wz.clone().requires_grad_()
    got = F.layer_norm(xz, (6,), wg, bz)
    assert type(got.grad_fn).__name__ == "NativeLayerNormBackward0" and len(calls) == 2
    got.sum().backward()
    w_cpu = w.clone().requires_grad_()
    F.layer_norm(x, (6,), w_cpu, b).sum().backward()
    assert_close(wg.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-5)

    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(F.layer_norm(fwAD.make_dual(xz, tz), (6,), wz, bz)).tangent
    with fwAD.dual_level():
        expected_tangent = fwAD.unpack_dual(F.layer_norm(fwAD.make_dual(x, t), (6,), w, b)).tangent
    assert_close(tangent.cpu(), expected_tangent, rtol=1e-5, atol=1e-5)
    assert len(calls) == 3

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    seen = []
    with torch.no_grad(), Seen():
        got = F.layer_norm(xz, (6,), wz, bz)
    assert seen == [torch.ops.aten.native_layer_norm.default] and len(calls) == 4
    assert_close(got.cpu(), expected)
    # Operands on another device, or integers: CPU torch's errors.
    for args in ((xz, (6,), w, b), (x, (6,), wz, bz), (x.long().to("zyx"), (6,))):
        with torch.no_grad(), pytest.raises((RuntimeError, NotImplementedError)) as error:
            F.layer_norm(*args)
        cpu_args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
        if cpu_args[0].dtype == torch.int64:
            with pytest.raises(NotImplementedError, match=str(error.value).replace('"', '.')):
                F.layer_norm(*cpu_args)
        else:
            assert "Expected all tensors to be on the same device" in str(error.value)


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


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_ignored_rows_give_zero(reduction, weighted, no_fallback):
    """Ignored targets add nothing and get a zero gradient even when every target is ignored
    (the mean's total weight is 0: the gradient was NaN everywhere) or the ignored row's input
    is -inf (a masked log-probability: its loss was NaN); a class weight of 0 still gives
    ATen's NaN for the mean."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    x[0, 1] = -float("inf")
    weight = torch.tensor([1.0, 0.0, 2.0, 0.5]) if weighted else None
    for target in ([1, 1, 1], [1, 0, 1], [1, 3, 2]):
        results = []
        for device in ("cpu", "zyx"):
            xd = x.to(device).requires_grad_() if device == "zyx" else x.clone().requires_grad_()
            loss = F.nll_loss(xd, torch.tensor(target, device=device), ignore_index=1, reduction=reduction,
                              weight=None if weight is None else weight.to(device))
            loss.backward(torch.ones_like(loss))
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


def _cat_into_first(empty, a):
    return torch.cat([empty, a], out=empty)


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
    "softmax of integers": lambda a, i: i.softmax(1),
    "log_softmax of integers (not last dim)": lambda a, i: i.int().log_softmax(0),
    "bincount of floats": lambda a, i: a[0].bincount(),
    "gcd of floats": lambda a, i: torch.gcd(a, a),
    "conv2d channels": lambda a, i: F.conv2d(a[None, None], a[None, None].expand(2, 3, 3, 4)),
    "conv2d groups over out channels": lambda a, i: F.conv2d(a[None].expand(1, 3, 3, 4), a[None, None],
                                                             groups=3),
    "conv2d groups not dividing": lambda a, i: F.conv2d(a[None].expand(1, 4, 3, 4), a.view(3, 2, 2, 1),
                                                        groups=2),
    "conv2d kernel over input": lambda a, i: F.conv2d(a[None, None], a[None, None, :, :1].expand(1, 1, 3, 5)),
    "conv_transpose2d channels": lambda a, i: F.conv_transpose2d(a[None].expand(1, 2, 3, 4), a[None, None]),
    "stack sizes": lambda a, i: torch.stack([a, a[:, :2]], 1),
    "random_ empty range": lambda a, i: i.random_(5, 5),
    "nll_loss 2-d target": lambda a, i: F.nll_loss(a, i[:, :1]),
    "integer floor_divide by 0": lambda a, i: i // 0,
    "integer remainder by 0": lambda a, i: torch.remainder(i, 0),
    "integer fmod by 0-d CPU 0": lambda a, i: torch.fmod(i, torch.tensor(0)),
    # Dimensions out of range raise ATen's IndexError (they wrapped: flip(2) of a 2-D flipped dim 0).
    "flip dim out of range": lambda a, i: a.flip(2),
    "flip negative dim out of range": lambda a, i: a.flip(-3),
    "flip dim twice": lambda a, i: a.flip(0, 1, 1),
    "softmax dim out of range": lambda a, i: a.softmax(2),
    "log_softmax dim out of range": lambda a, i: a.log_softmax(-3),
    "softmax of integers dim out of range": lambda a, i: i.softmax(2),
    "argmax dim out of range": lambda a, i: a.argmax(dim=2),
    "argmin dim out of range": lambda a, i: a.argmin(-3),
    "gather dim out of range": lambda a, i: a.gather(2, i % 3),
    "index_select dim out of range": lambda a, i: a.index_select(2, i[0, :1]),
    "stack dim out of range": lambda a, i: torch.stack([a, a], 3),
    # Dtype checks ATen makes (zyx computed something)
    "index_put_ values of another dtype": lambda a, i: a.double().index_put_((i[0, :1],), i[0, :1]),
    "lerp end of another dtype": lambda a, i: torch.lerp(a.double(), a, 0.5),
    "lerp weight of another dtype": lambda a, i: torch.lerp(a, a, a.double()),
    "add float alpha on integers": lambda a, i: torch.add(i, i, alpha=1.5),
    "sub float alpha on integers": lambda a, i: torch.sub(i, 2, alpha=0.5),
    "addcdiv of integers": lambda a, i: torch.addcdiv(i, i, i + 1),
    "heaviside of two dtypes": lambda a, i: torch.heaviside(a, i.float().double()),
    "clamp without bounds": lambda a, i: torch.clamp(a),
    "cat of a 0-d tensor": lambda a, i: torch.cat([a[0], a[0, 0]]),
    "cat out= an empty input": lambda a, i: _cat_into_first(torch.empty(0, device=a.device), a),
    "neg out= of another dtype": lambda a, i: torch.neg(a, out=torch.empty(3, 4, dtype=torch.half, device=a.device)),
    "floor out= of another dtype": lambda a, i: torch.floor(a, out=torch.empty(3, 4, dtype=torch.float64,
                                                                               device=a.device)),
    "nan_to_num out= of another dtype": lambda a, i: torch.nan_to_num(a, out=torch.empty(3, 4, dtype=torch.half,
                                                                                       device=a.device)),
    "frac of integers": lambda a, i: torch.frac(i),
    "bitwise_not of floats": lambda a, i: torch.bitwise_not(a),
    "abs of bool": lambda a, i: torch.abs(a > 0),
    "ceil of bool": lambda a, i: torch.ceil(a > 0),
    "floor of bool": lambda a, i: (a > 0).floor(),
    "round of bool": lambda a, i: torch.round(a > 0),
    "trunc of bool": lambda a, i: torch.trunc(a > 0),
    "fix of bool": lambda a, i: torch.fix(a > 0),
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


# Value checks ATen makes in its kernels: zyx makes them on the device and raises at the next
# realization (checks.py), with CPU torch's exception and message.
VALUE_ERROR_CASES = {
    "floor_divide by a 0 entry": lambda i: i // (i % 3),
    "remainder by a 0 entry": lambda i: torch.remainder(i, i - 5),
    "fmod by a 0 entry": lambda i: torch.fmod(i.int(), (i % 2).int()),
    "div trunc by a 0 entry": lambda i: torch.div(i, i % 4, rounding_mode="trunc"),
    "in-place floor_divide by a 0 entry": lambda i: i.clone().floor_divide_(i % 2),
    "uint8 floor_divide by a 0 entry": lambda i: i.to(torch.uint8) // (i % 3).to(torch.uint8),
    "multinomial negative probability": lambda i: torch.multinomial(i.float() - 1, 2),
    "multinomial inf probability": lambda i: torch.multinomial(i.float() / (i % 4).float(), 1, True),
    "multinomial zero row": lambda i: torch.multinomial((i % 4 == 9).float(), 1, True),
}


@pytest.mark.parametrize("name", VALUE_ERROR_CASES)
def test_value_errors_raise_at_realization_like_cpu(name):
    fn = VALUE_ERROR_CASES[name]
    i = torch.arange(12).reshape(3, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        fn(i)
    result = fn(i.to("zyx"))  # recorded; the divisors or probabilities are checked on the device
    with pytest.raises(RuntimeError) as zyx_error:
        result.cpu()
    assert str(zyx_error.value) == str(cpu_error.value)
    assert (i.to("zyx") * 2).cpu().tolist() == (i * 2).tolist()  # the device goes on working


def test_integer_division_overflow_wraps_instead_of_trapping():
    """INT_MIN // -1 traps in x86's idiv (CPU torch dies of SIGFPE); zyx wraps it as -x does."""
    for dtype in (torch.int32, torch.int64, torch.int8):
        low = torch.iinfo(dtype).min
        x = torch.tensor([low, 7, -7], dtype=dtype, device="zyx")
        minus_one = torch.tensor([-1, -1, -1], dtype=dtype, device="zyx")
        assert (x // minus_one).tolist() == [low, -7, 7]
        assert torch.fmod(x, minus_one).tolist() == [0, 0, 0]
        assert (x // -1).tolist() == [low, -7, 7]


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


def test_whole_reduction_of_more_than_64_dims():
    """ATen reduces a tensor of over 64 dims whole (dim=None) and refuses a dim list for it."""
    x = make((2, 3) + (1,) * 63, torch.float32)
    for fn in (torch.sum, torch.amax, torch.mean, lambda t: t.sum(dim=[])):
        torch.testing.assert_close(fn(x.to("zyx")).cpu(), fn(x))
    with pytest.raises(RuntimeError, match="^only tensors with up to 64 dims are supported$"):
        x.to("zyx").sum(0)
