"""Op families beyond issue 2's list on zyx against CPU torch (added to pass PyTorch's OpInfo
tests): sort and scans, special functions, pooling, search and count, distances, segment
reduces, resampling, losses. Same checks as test_ops.py (conftest.check).
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, check, make

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


@pytest.mark.parametrize("n", [17, 64, 257, 5000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16])
def test_long_scans(n, dtype):
    """Scans longer than a block (ops/math/scan.py SCAN_BLOCK) are blocked: along the last, a
    middle and the first axis, integers exact, NaN carried on."""
    x = make((2, n, 3), dtype, low=-2, high=2)
    if dtype.is_floating_point:
        x[1, n // 2, 0] = float("nan")
    check(lambda t: torch.cumsum(t, 1), x)
    check(lambda t: torch.cumsum(t.transpose(1, 2), -1), x)
    check(lambda t: torch.cumsum(t[0], 0), x)
    if n < 300:  # (a product of thousands of values is 0 or inf either way)
        check(lambda t: torch.cumprod(t * 0.5 if t.is_floating_point() else t % 2 + 1, 1), x)
    check(lambda t: torch.cummax(t, 1)[0], x)
    check(lambda t: torch.cummin(t, 1)[0], x)


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


@pytest.mark.parametrize("case", ["channels_last", "channels_last_3d", "resize_as_ preserve", "resize_as_ preserve 3d",
                                  "resize_as_ default", "same sizes keep strides", "same sizes of a transpose"])
def test_resize_strides_match_cpu(case):
    # The strides a resize leaves, as CPU torch's: a memory format given, a template's layout
    # kept with preserve_format, and an unchanged size keeping the strides it had.
    def make_case(device):
        empty = torch.empty(0, device=device)
        cl = torch.empty(2, 3, 4, 5, device=device).to(memory_format=torch.channels_last)
        cl3d = torch.empty(2, 3, 4, 5, 6, device=device).to(memory_format=torch.channels_last_3d)
        return {"channels_last": lambda: empty.resize_(2, 3, 4, 5, memory_format=torch.channels_last),
                "channels_last_3d": lambda: empty.resize_(2, 3, 4, 5, 6, memory_format=torch.channels_last_3d),
                "resize_as_ preserve": lambda: empty.resize_as_(cl, memory_format=torch.preserve_format),
                "resize_as_ preserve 3d": lambda: empty.resize_as_(cl3d, memory_format=torch.preserve_format),
                "resize_as_ default": lambda: empty.resize_as_(cl),
                "same sizes keep strides": lambda: cl.resize_(2, 3, 4, 5),
                "same sizes of a transpose": lambda: torch.empty(3, 4, device=device).t().resize_(4, 3)}[case]()

    cpu, zyx = make_case("cpu"), make_case("zyx")
    assert (tuple(zyx.shape), zyx.stride()) == (tuple(cpu.shape), cpu.stride())


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


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size", [(3, 5), (9, 4), (7, 7), (2, 20)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_antialias(mode, size, align_corners):
    x = make((2, 3, 6, 8), torch.float32)

    def run(t):
        t = t.clone().requires_grad_()
        out = F.interpolate(t, size=size, mode=mode, antialias=True, align_corners=align_corners)
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


@pytest.mark.parametrize("lengths_on", ["cpu", "zyx"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_with_length_tensors(lengths_on, reduction):
    """Length tensors (CPU ones, as data loaders give them, or zyx ones) with zyx log-probs: the
    composite form PyTorch takes for tensor subclasses divided the zyx losses by CPU lengths."""
    log_probs = make((12, 3, 5), torch.float32).log_softmax(2)
    targets = torch.tensor([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 2, 0]])
    input_lengths, target_lengths = torch.tensor([12, 10, 7]), torch.tensor([4, 2, 3], dtype=torch.int32)

    def run(lp, tg, device):
        lp = lp.clone().requires_grad_()
        loss = F.ctc_loss(lp, tg, input_lengths.to(device), target_lengths.to(device), reduction=reduction)
        loss.sum().backward()
        return loss, lp.grad

    expected = run(log_probs, targets, "cpu")
    got = run(log_probs.to("zyx"), targets.to("zyx"), lengths_on)
    for e, z in zip(expected, got):
        assert z.device.type == "zyx"
        assert_close(z, e, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        F.ctc_loss(log_probs.to("zyx"), targets.to("zyx"), input_lengths.float(), target_lengths)


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


@pytest.mark.parametrize("shape, samples_shape", [((4, 5, 5, 5), (2, 4, 3)), ((2, 4, 5, 5, 5), (3, 4, 3)),
                                                  ((3, 6, 6), (2, 3, 2)), ((3, 6, 6), (1, 3, 2))])
def test_fractional_max_pool_samples_read_as_aten(shape, samples_shape):
    """ATen reads plane p of batch b at flat offset (b * planes + p) * dims of the samples: more
    batches than the input has are allowed, and an input without a batch axis takes the first
    batch's (ModuleInfo's no-batch FractionalMaxPool3d sample failed with an AssertionError)."""
    nsp = samples_shape[-1]
    fn = F.fractional_max_pool2d if nsp == 2 else F.fractional_max_pool3d
    samples = torch.rand(samples_shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    check(lambda t, s: fn(t, 2, output_size=(3,) * nsp, _random_samples=s, return_indices=True),
          make(shape, torch.float64), samples)
    for bad in (samples.float(), samples[:1]):
        if bad.dtype == torch.float64 and len(shape) == nsp + 1:
            continue  # no batch axis: any batch count will do
        with pytest.raises(RuntimeError) as cpu_error:
            fn(make(shape, torch.float64), 2, output_size=(3,) * nsp, _random_samples=bad)
        with pytest.raises(RuntimeError, match=re.escape(str(cpu_error.value))):
            fn(make(shape, torch.float64).to("zyx"), 2, output_size=(3,) * nsp, _random_samples=bad.to("zyx"))


def _grid_sample(mode, padding, corners):
    def fn(x, grid):
        return torch.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding,
                                               align_corners=corners)
    return fn


# Backward ops with no lowering and no decomposition of their own, derived from the forward op's
# decomposition by autograd on the device (ops/derived_backward.py): (forward, input shapes).
DERIVED_BACKWARD = {
    **{f"grid_sample {mode} {padding} {corners}":
       (_grid_sample(mode, padding, corners), [(2, 3, 5, 6), "grid"])
       for mode in ("bilinear", "nearest", "bicubic") for padding in ("zeros", "border", "reflection")
       for corners in (False, True)},
    **{f"grid_sample 3d {mode} {padding} {corners}":
       (_grid_sample(mode, padding, corners), [(2, 3, 4, 5, 6), "grid3"])
       for mode in ("bilinear", "nearest") for padding in ("zeros", "border", "reflection")
       for corners in (False, True)},
    "hardshrink": (lambda x: torch.nn.functional.hardshrink(x, 0.3), [(4, 5)]),
    "softshrink": (lambda x: torch.nn.functional.softshrink(x, 0.3), [(4, 5)]),
    "replicate pad 1d": (lambda x: torch.nn.functional.pad(x, (2, 1), mode="replicate"), [(2, 3, 5)]),
    "replicate pad 2d": (lambda x: torch.nn.functional.pad(x, (2, 1, 0, 3), mode="replicate"),
                         [(2, 3, 4, 5)]),
    "replicate pad 3d": (lambda x: torch.nn.functional.pad(x, (1, 1, 2, 0, 1, 2), mode="replicate"),
                         [(1, 2, 3, 4, 3)]),
    "bicubic upsampling": (lambda x: torch.nn.functional.interpolate(x, size=(7, 5), mode="bicubic"),
                           [(2, 3, 4, 6)]),
    "multi margin loss": (lambda x: torch.nn.functional.multi_margin_loss(
        x, torch.tensor([1, 0, 4, 2], device=x.device), p=2, margin=0.7), [(4, 5)]),
    "multilabel margin loss": (lambda x: torch.nn.functional.multilabel_margin_loss(
        x, torch.tensor([[1, 3, -1, 0, 0], [4, -1, 0, 0, 0], [0, 1, 2, 3, 4], [-1, 0, 0, 0, 0]],
                        device=x.device)), [(4, 5)]),
    "weight norm dim 0": (lambda v, g: torch._weight_norm(v, g, 0), [(4, 3, 2), (4, 1, 1)]),
    "weight norm dim 2": (lambda v, g: torch._weight_norm(v, g, 2), [(4, 3, 2), (1, 1, 2)]),
    "weight norm whole": (lambda v, g: torch._weight_norm(v, g, -1), [(4, 3), ()]),
}


@pytest.mark.parametrize("name", DERIVED_BACKWARD)
def test_derived_backward_ops_match_cpu(name, monkeypatch):
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    fn, shapes = DERIVED_BACKWARD[name]
    generator = torch.Generator().manual_seed(0)
    grids = {"grid": (2, 4, 3, 2), "grid3": (2, 3, 4, 2, 3)}
    inputs = [torch.rand(grids[shape], generator=generator) * 2.2 - 1.1 if shape in grids
              else torch.randn(shape, generator=generator) for shape in shapes]
    results = []
    for device in ("cpu", "zyx"):
        leaves = [t.detach().to(device).requires_grad_() for t in inputs]
        out = fn(*leaves)
        weights = torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)
        (out * weights).sum().backward()
        results.append([out.detach(), *[leaf.grad for leaf in leaves]])
    for got, want in zip(results[1], results[0]):
        assert got.device.type == "zyx"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_reads_no_voxel_outside(mode, monkeypatch):
    """A sampling corner outside the volume adds nothing: a NaN in the voxel its clipped index
    points at does not leak into the result (the 3-d sampler is recorded as gathers)."""
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    volume = torch.randn(1, 2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    volume[:, :, 0, 0, 0] = float("nan")
    grid = torch.rand(1, 2, 3, 4, 3, generator=torch.Generator().manual_seed(1)) * 1.3 + 0.2
    want = F.grid_sample(volume, grid, mode=mode, align_corners=False)
    got = F.grid_sample(volume.to("zyx"), grid.to("zyx"), mode=mode, align_corners=False)
    assert not want.isnan().any()
    assert_close(got, want)
    with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(volume.to("zyx"), grid.to("zyx"), mode="bicubic", align_corners=False)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_targets_ending_early(reduction, monkeypatch):
    """Targets end at a row's first -1 (PyTorch's decomposition counted the unused slots as
    class 0); 1-D inputs too, and ATen's shape errors."""
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([[4, -1, 0, 0, 0, 0], [1, 3, -1, 2, 2, 2], [0, 1, 2, 3, 4, 5], [-1, 0, 0, 0, 0, 0],
                           [5, 5, 2, -1, 1, 1]])
    loss = torch.nn.functional.multilabel_margin_loss
    torch.testing.assert_close(loss(x.to("zyx"), target.to("zyx"), reduction=reduction).cpu(),
                               loss(x, target, reduction=reduction))
    torch.testing.assert_close(loss(x[0].to("zyx"), target[0].to("zyx"), reduction=reduction).cpu(),
                               loss(x[0], target[0], reduction=reduction))
    with pytest.raises(RuntimeError, match="inconsistent target size"):
        loss(x.to("zyx"), target[:, :3].to("zyx"))
