"""torch.uint16, torch.uint32 and torch.uint64 on zyx against CPU torch: storage and transfer,
factories, the arithmetic CPU torch has kernels for (wrapping modulo 2^n), casts both ways,
reductions, sort, indexing and views; result_type's promotion, and the same exception type and
message where CPU torch raises (its "barebones" unsigned dtypes have few CPU kernels, and
promoting them with another integer dtype is an error). Runs on zyx:0, the first configured
backend (``ZYX_BACKENDS=opencl,cpu`` puts these through the OpenCL renderer)."""

import pytest
import torch

import torch_zyx

pytestmark = pytest.mark.usefixtures("no_fallback")

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
OTHERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def bits(dtype) -> int:
    return dtype.itemsize * 8


def values(dtype, n=24, seed=0) -> torch.Tensor:
    """Values over the whole range, the extremes included (the top ones wrap when doubled)."""
    top = 2 ** bits(dtype) - 1
    gen = torch.Generator().manual_seed(seed)
    # (randint's bounds are int64: uint64's upper half from shifted values)
    low = torch.randint(0, 2 ** min(bits(dtype), 62), (n,), generator=gen)
    fixed = [0, 1, 2, 3, 7, top, top - 1, top // 2, top // 2 + 1]
    out = torch.tensor([v if v < 2 ** 63 else v - 2 ** 64 for v in fixed])  # (int64 wraps to uint64)
    return torch.cat([out, low]).to(dtype)


def same(zyx_value, cpu_value):
    """Exact equality of values and dtype (torch's assert_close has no uint32/uint64 support)."""
    if isinstance(cpu_value, (tuple, list)):
        for z, c in zip(zyx_value, cpu_value):
            same(z, c)
        return
    got = zyx_value.cpu()
    assert got.dtype == cpu_value.dtype, (got.dtype, cpu_value.dtype)
    assert got.shape == cpu_value.shape
    if cpu_value.dtype.is_floating_point:
        torch.testing.assert_close(got, cpu_value, equal_nan=True)
    else:
        assert got.tolist() == cpu_value.tolist()


def same_error(fn, *cpu_args):
    """fn raises on zyx the exception CPU torch raises (type and message)."""
    with pytest.raises(Exception) as expected:
        fn(*cpu_args)
    zyx_args = [a.to("zyx") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    with pytest.raises(type(expected.value)) as got:
        out = fn(*zyx_args)
        out.cpu() if isinstance(out, torch.Tensor) else None
    assert str(got.value) == str(expected.value)


# ------------------------------------------------------------------ storage, factories, transfer


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_supported_and_round_trip(dtype):
    assert torch_zyx.supports_dtype(dtype)
    x = values(dtype)
    z = x.to("zyx")
    assert z.dtype == dtype and z.device.type == "zyx"
    same(z, x)
    same(z.clone(), x)
    assert repr(z.cpu()) == repr(x)
    assert str(z[:3]).replace(", device='zyx:0'", "") == str(x[:3])


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_factories(dtype):
    top = 2 ** bits(dtype) - 1
    same(torch.zeros(3, dtype=dtype, device="zyx"), torch.zeros(3, dtype=dtype))
    same(torch.ones(2, 3, dtype=dtype, device="zyx"), torch.ones(2, 3, dtype=dtype))
    same(torch.full((4,), 7, dtype=dtype, device="zyx"), torch.full((4,), 7, dtype=dtype))
    same(torch.full((2,), -1, dtype=dtype, device="zyx"), torch.full((2,), -1, dtype=dtype))
    assert torch.empty(5, dtype=dtype, device="zyx").dtype == dtype
    same(torch.zeros_like(values(dtype).to("zyx")), torch.zeros_like(values(dtype)))
    z = torch.zeros(4, dtype=dtype, device="zyx")
    z.fill_(min(top, 2 ** 63 - 1))
    same(z, torch.zeros(4, dtype=dtype).fill_(min(top, 2 ** 63 - 1)))
    assert torch.zeros(3, dtype=dtype, device="zyx")[1].item() == 0


# ------------------------------------------------------------------ arithmetic CPU torch has


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_wrapping_arithmetic(dtype):
    a, b = values(dtype), values(dtype, seed=1)
    za, zb = a.to("zyx"), b.to("zyx")
    for fn in (lambda x, y: x * y, lambda x, y: x * 3, lambda x, y: x * -1, lambda x, y: x * True,
               lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y, lambda x, y: x & 5,
               lambda x, y: x ^ -1, lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x == 3,
               lambda x, y: x / (y | 1), lambda x, y: x / 3, lambda x, y: x * 2.5, lambda x, y: x + 0.5,
               lambda x, y: torch.where(x == y, x, y), lambda x, y: torch.where(x == 3, x, 9),
               lambda x, y: (x * y) * (x ^ y)):
        same(fn(za, zb), fn(a, b))
    # mul in place wraps as well
    za.mul_(zb)
    same(za, a * b)


@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("other", OTHERS + UNSIGNED, ids=str)
def test_promotion_matches_result_type(dtype, other):
    a = values(dtype)
    if other == torch.float16:
        # (values that stay finite in half: an int32 fused with half keeps an overflowing value
        # finite on zyx (x * 0 is 0, CPU torch's inf * 0 NaN), an issue of every integer dtype)
        a = (a.to(torch.int64) & 0x7FFF).to(dtype)
    b = (values(dtype, seed=2).to(torch.int64) % 3).to(other)
    for x, y in ((a, b), (a, b[0].clone()), (a[0].clone(), b)):
        try:
            expected = torch.result_type(x, y)
        except RuntimeError:
            same_error(torch.mul, x, y)
            continue
        same(x.to("zyx") * y.to("zyx"), x * y)
        assert (x.to("zyx") * y.to("zyx")).dtype == expected


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_promotion_with_scalars(dtype):
    a = values(dtype)
    z = a.to("zyx")
    for scalar in (3, -2, True, 2.5, 2 ** 15):
        same(z * scalar, a * scalar)
        assert (z * scalar).dtype == torch.result_type(a, scalar)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_ops_cpu_torch_refuses(dtype):
    a, b = values(dtype), values(dtype, seed=1)
    for fn in (torch.add, torch.sub, torch.lt, torch.le, torch.gt, torch.ge, torch.maximum, torch.minimum,
               torch.remainder, torch.fmod, torch.floor_divide, torch.bitwise_left_shift,
               torch.bitwise_right_shift, torch.logical_and, torch.pow,
               lambda x, y: x + 1, lambda x, y: x - 1, lambda x, y: x < 3, lambda x, y: x // 2,
               lambda x, y: x % 3, lambda x, y: x << 1, lambda x, y: x >> 1,
               lambda x, y: torch.div(x, y, rounding_mode="floor"),
               lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: x.abs(), lambda x, y: -x, lambda x, y: ~x, lambda x, y: x.sign(),
               lambda x, y: x.max(), lambda x, y: x.min(), lambda x, y: x.amax(), lambda x, y: x.argmax(),
               lambda x, y: x.max(0), lambda x, y: x.clamp(1, 2), lambda x, y: x.sum(dtype=dtype),
               lambda x, y: x.cumsum(0, dtype=dtype), lambda x, y: x.masked_fill(x == 1, 3),
               lambda x, y: x.topk(2), lambda x, y: torch.relu(x)):
        same_error(fn, a, b)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_promotion_errors(dtype):
    a = values(dtype)
    for other in (torch.int64, torch.int32, torch.uint8, torch.bool):
        same_error(torch.mul, a, a.to(other))
        same_error(torch.eq, a, a.to(other))
        same_error(lambda x, y: x & y, a, a.to(other))
    same_error(torch.mul, a[0].clone(), a.to(torch.bool))
    for other in UNSIGNED:
        if other != dtype:
            same_error(torch.mul, a, a.to(other))


# ------------------------------------------------------------------ casts


@pytest.mark.parametrize("dtype", UNSIGNED)
@pytest.mark.parametrize("other", OTHERS, ids=str)
def test_casts_both_ways(dtype, other):
    a = values(dtype)
    same(a.to("zyx").to(other), a.to(other))
    if other.is_floating_point:
        # in range and negative values (which wrap, as CPU torch's static_cast on x86)
        top = 2 ** bits(dtype) - 1 if other == torch.float64 or bits(dtype) < 32 else 2 ** 24
        x = torch.tensor([0.0, 1.0, 2.5, 7.9, 300.0, 65535.0, -1.0, -3.5, -200.0, top * 0.75])
        x = x[x.to(other).to(torch.float64).abs() < 2 ** min(bits(dtype), 31)].to(other)
        same(x.to("zyx").to(dtype), x.to(dtype))
    else:
        b = (values(other) if other.itemsize > 1 else torch.tensor([0, 1, -1, 100, -128, 127])).to(other)
        same(b.to("zyx").to(dtype), b.to(dtype))


# ------------------------------------------------------------------ reductions, sort, indexing


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_reductions(dtype):
    a = values(dtype).reshape(3, 11)
    z = a.to("zyx")
    for fn in (lambda x: x.sum(), lambda x: x.sum(0), lambda x: x.sum(1, keepdim=True), lambda x: x.prod(1),
               lambda x: x.cumsum(1), lambda x: x.cumprod(0), lambda x: x.sum(dtype=torch.int64),
               lambda x: x.to(torch.float64).mean(), lambda x: (x == 1).any(), lambda x: x.float().sum(1)):
        same(fn(z), fn(a))
    same_error(lambda x: x.mean(), a)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_sort_indexing_views(dtype):
    a = values(dtype).reshape(3, 11)
    z = a.to("zyx")
    idx = torch.tensor([2, 0, 1])
    for fn in (lambda x: x.sort(1).values, lambda x: x.sort(0, descending=True).values,
               lambda x: x.sort(dim=1, stable=True).indices, lambda x: x.argsort(dim=1, stable=True),
               lambda x: x[1], lambda x: x[:, 2:7:2], lambda x: x.t(), lambda x: x.t().contiguous(),
               lambda x: x.reshape(11, 3), lambda x: x.flatten(), lambda x: x.unsqueeze(0).expand(2, 3, 11),
               lambda x: x.permute(1, 0)[3], lambda x: x.narrow(1, 2, 4),
               lambda x: x[idx.to(x.device)], lambda x: x.index_select(0, idx.to(x.device)),
               lambda x: torch.cat([x, x * 3]), lambda x: torch.stack([x, x]),
               lambda x: x[x == x[0, 0]], lambda x: x.diagonal(), lambda x: x.roll(1, 1)):
        same(fn(z), fn(a))
    z[0, 1] = 5
    a[0, 1] = 5
    z[1] = z[2]
    a[1] = a[2]
    same(z, a)
