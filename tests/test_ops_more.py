"""More lowerings checked against CPU torch, with CPU fallback disabled: reducing scatters,
index_add/index_copy, masked_select/masked_scatter, put, *_scatter view ops, error inputs."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_fallback")


def same(fn, *args, **kwargs):
    """Run ``fn`` on CPU and on zyx copies of the tensor arguments; compare the results."""
    cpu = fn(*args, **kwargs)
    moved = [a.to("zyx") if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*moved, **kwargs)
    assert out.device.type == "zyx"
    torch.testing.assert_close(out.cpu(), cpu)
    return out


def _data():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    index = torch.tensor([[0, 1, 0, 3, 3], [2, 2, 1, 0, 3]])
    src = torch.randn(2, 5)
    return x, index, src


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x, index, src = _data()
    same(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), x, index, src)


def test_scatter_reduce_int_mean_rounds_down():
    x = torch.tensor([1, -3, 5, 7])
    index = torch.tensor([0, 0, 1, 2, 2])
    src = torch.tensor([2, -6, 3, 0, -1])
    same(lambda a, i, s: a.scatter_reduce(0, i, s, "mean"), x, index, src)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce):
    torch.manual_seed(1)
    x, src = torch.randn(5, 3), torch.randn(4, 3)
    index = torch.tensor([0, 4, 0, 2])
    same(lambda a, i, s: a.index_reduce(0, i, s, reduce), x, index, src)
    same(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=False), x, index, src)


def test_index_add_copy():
    torch.manual_seed(2)
    x, src = torch.randn(3, 5), torch.randn(3, 2)
    index = torch.tensor([4, 1])
    same(lambda a, i, s: a.index_add(1, i, s, alpha=2.0), x, index, src)
    same(lambda a, i, s: a.index_copy(1, i, s), x, index, src)
    with pytest.raises(RuntimeError, match="source tensor shape must match"):
        torch.zeros(3, 2, device="zyx").index_add(0, torch.tensor([0, 1], device="zyx"),
                                                   torch.ones(2, device="zyx"))


def test_masked_select_and_scatter():
    torch.manual_seed(3)
    x = torch.randn(3, 4)
    mask = x > 0
    same(torch.masked_select, x, mask)
    same(torch.masked_select, x, torch.tensor([True, False, False, True]))
    src = torch.arange(12.0).reshape(3, 4)
    same(lambda a, m, s: a.masked_scatter(m, s), x, mask, src)


def test_masked_scatter_grad():
    torch.manual_seed(4)
    x, mask = torch.randn(3, 4), torch.randn(3, 4) > 0
    src = torch.randn(12, requires_grad=True)
    grad = torch.randn(3, 4)
    zsrc = src.detach().to("zyx").requires_grad_()
    (expected,) = torch.autograd.grad(x.masked_scatter(mask, src), src, grad)
    (got,) = torch.autograd.grad(x.to("zyx").masked_scatter(mask.to("zyx"), zsrc), zsrc, grad.to("zyx"))
    torch.testing.assert_close(got.cpu(), expected)


def test_put():
    x = torch.zeros(2, 3)
    index = torch.tensor([5, 0, 5])
    src = torch.tensor([1.0, 2.0, 3.0])
    same(lambda a, i, s: a.put(i, s, accumulate=True), x, index, src)


def test_view_scatters():
    torch.manual_seed(5)
    x = torch.randn(4, 4)
    same(lambda a, s: torch.diagonal_scatter(a, s, 1), x, torch.randn(3))
    same(lambda a, s: torch.select_scatter(a, s, 1, 2), x, torch.randn(4))
    same(lambda a, s: torch.slice_scatter(a, s, 0, 1, 4, 2), x, torch.randn(2, 4))
    same(lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 4), 3), x, torch.randn(2, 2))


def test_error_inputs():
    z = torch.zeros(5, device="zyx")
    with pytest.raises(RuntimeError, match="shifts"):
        torch.roll(z, ())
    with pytest.raises(RuntimeError, match="must be 2-D"):
        torch.nn.functional.embedding(torch.tensor([[0, 1]], device="zyx"), torch.zeros(3, device="zyx"))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.zeros(3, 5, dtype=torch.float64, device="zyx").scatter(
            0, torch.zeros(2, 2, dtype=torch.int64, device="zyx"), torch.ones(2, 5, device="zyx"))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.as_strided_scatter(torch.zeros(4, 4, device="zyx"), torch.zeros(20, 20, device="zyx"),
                                 (20, 20), (20, 1), 0)


def test_gather_int32_index():
    x = torch.randn(4, 3)
    index = torch.tensor([[0, 3, 1]], dtype=torch.int32)
    same(lambda a, i: torch.gather(a, 0, i), x, index)


def test_repeat_interleave_tensor():
    same(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3, 1]))
    same(lambda x, r: torch.repeat_interleave(x, r, dim=0), torch.randn(3, 2), torch.tensor([1, 3, 2]))


def test_embedding_max_norm_renorms_in_place():
    torch.manual_seed(6)
    weight = torch.randn(6, 3) * 3
    idx = torch.tensor([[0, 2], [2, 5]])
    zw = weight.to("zyx")
    out = torch.nn.functional.embedding(idx.to("zyx"), zw, max_norm=1.0)
    expected = torch.nn.functional.embedding(idx, weight, max_norm=1.0)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(zw.cpu(), weight)  # renorm writes the used rows back


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_renorm_functional(norm_type):
    # The functional form a compiled graph records; a repeated index reads its row's norm once.
    torch.manual_seed(8)
    weight = torch.randn(7, 4) * 3
    idx = torch.tensor([[1, 3, 3], [0, 6, 1]])
    out = torch.ops.aten.embedding_renorm(weight.to("zyx"), idx.to("zyx"), 2.0, norm_type)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.embedding_renorm(weight, idx, 2.0, norm_type))


def test_bilinear_and_empty_batch_grad():
    torch.manual_seed(7)
    for batch in (4, 0):
        a, b = torch.randn(batch, 3, requires_grad=True), torch.randn(batch, 4, requires_grad=True)
        w = torch.randn(5, 3, 4, requires_grad=True)
        grad = torch.randn(batch, 5)
        expected = torch.autograd.grad(torch.nn.functional.bilinear(a, b, w), [a, b, w], grad)
        za, zb, zw = (t.detach().to("zyx").requires_grad_() for t in (a, b, w))
        got = torch.autograd.grad(torch.nn.functional.bilinear(za, zb, zw), [za, zb, zw], grad.to("zyx"))
        for e, z in zip(expected, got):
            torch.testing.assert_close(z.cpu(), e)


def test_empty_output_reduce_launches_nothing():
    # A (0, N) reduce result once launched N iterations into a 0-byte buffer (heap corruption).
    x = torch.randn(0, 5, 3)
    same(lambda t: t.sum(2), x)
    same(lambda a, b: a @ b, torch.ones(0, 5, dtype=torch.int64), torch.ones(5, 10, dtype=torch.int64))


def test_scatter_int32_index_and_reduce_arg():
    x = torch.zeros(3, 5)
    index = torch.tensor([[0, 1, 2], [2, 2, 0]], dtype=torch.int32)
    src = torch.arange(1.0, 7.0).reshape(2, 3)
    same(lambda a, i, s: a.scatter(0, i, s), x, index, src)
    same(lambda a, i, s: a.scatter_add(0, i, s), x, index, src)
    same(lambda a, i, s: (a + 2).scatter(0, i, s, reduce="multiply"), x, index, src)
    same(lambda a, i: a.scatter(0, i, 1.5, reduce="add"), x, index)


# ---------------------------------------------------------------------------- special functions

def close(fn, *args, tol=None):
    """Like ``same`` with the OpInfo suite's float tolerances and NaN == NaN."""
    cpu = fn(*args)
    out = fn(*[a.to("zyx") if isinstance(a, torch.Tensor) else a for a in args])
    assert out.device.type == "zyx" and out.dtype == cpu.dtype
    if tol is None:
        tol = {torch.float32: 1e-4, torch.float64: 1e-7}.get(cpu.dtype, 0)
    torch.testing.assert_close(out.cpu(), cpu, rtol=tol, atol=tol, equal_nan=True)


def _special_points(dtype):
    edges = [0.0, -0.0, 1e-6, -1e-6, 0.5, -0.5, 1.0, 2.0, 2.09, -2.09, 3.0, 5.0, 6.1, -6.1, 8.0, 8.5,
             -26.7, 30.0, 120.0, -120.0, float("inf"), -float("inf"), float("nan")]
    return torch.cat([torch.linspace(-30, 30, 601, dtype=torch.float64), torch.tensor(edges)]).to(dtype)


CEPHES = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
          "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai",
          "erfcx", "log_ndtr"]


@pytest.mark.parametrize("name", CEPHES)
def test_cephes_functions(name):
    fn = getattr(torch.special, name)
    for dtype in (torch.float32, torch.float64):
        close(fn, _special_points(dtype))
    close(fn, torch.arange(-6, 7))  # integer input promotes to float32


def test_ndtri():
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        p = torch.cat([torch.rand(500, dtype=dtype), torch.tensor([0.0, 1.0, 0.5, 1e-20, 1 - 1e-7, -0.5, 2.0],
                                                                  dtype=dtype)])
        close(torch.special.ndtri, p)


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_orthogonal_polynomials(name):
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-3, 3, 61, dtype=torch.float64), torch.tensor([0.0, 1.0, -1.0, 0.5, 9.0])])
    n = torch.tensor([-2.0, -1, 0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 12, 2.5, float("inf"), float("nan")],
                     dtype=torch.float64)
    grid_x, grid_n = torch.meshgrid(x, n, indexing="ij")
    close(fn, grid_x, grid_n)
    close(fn, grid_x.float(), grid_n.float())
    close(fn, grid_x, 7)  # Python-number degree: no sync
    close(fn, grid_x.round().long(), grid_n.nan_to_num(0.0, 4.0, -4.0).long())  # integers promote to float32


def test_polynomial_degree_past_one_chunk():
    # 100 steps: a first chunk of 64 realized, then the rest (the recurrence state is carried).
    x = torch.linspace(-1, 1, 41, dtype=torch.float64)
    n = torch.tensor([3.0, 70.0, 100.0], dtype=torch.float64).repeat(14)[:41]
    close(torch.special.legendre_polynomial_p, x, n)
    close(torch.special.hermite_polynomial_he, x * 2, n)


def test_zeta_broadcast_scalar_q():
    # Was a minutes-long LLVM compile (dependent select chains); also negative and integral q.
    torch.manual_seed(0)
    x = torch.rand(50, dtype=torch.float64) * 8 + 1
    close(torch.special.zeta, x, torch.tensor(2.5, dtype=torch.float64))
    q = torch.cat([torch.rand(40) * 20 - 10, torch.tensor([-3.0, -2.5, 0.0, 1.0, 4.0])]).double()
    close(torch.special.zeta, torch.full_like(q, 4.0), q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_nextafter_exact(dtype):
    info = torch.finfo(dtype)
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, float("inf"), -float("inf"), float("nan"),
                            info.max, -info.max, info.tiny, -info.tiny, info.tiny * info.eps, info.tiny * 2],
                           dtype=torch.float64).to(dtype)
    torch.manual_seed(0)
    x = torch.cat([torch.randn(200).to(dtype) * 10, special.repeat(len(special))])
    y = torch.cat([torch.randn(200).to(dtype) * 10, special.repeat_interleave(len(special))])
    close(torch.nextafter, x, y, tol=0)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_incomplete_gamma(fn, dtype):
    # a up to 40 near x: more than one chunk of series / continued-fraction steps.
    torch.manual_seed(0)
    a = torch.cat([torch.rand(200, dtype=dtype) * 12 - 1, torch.rand(12, dtype=dtype) * 40,
                   torch.tensor([0.0, 0.0, 1.0, float("inf"), 2.0, float("nan")], dtype=dtype)])
    x = torch.cat([torch.rand(200, dtype=dtype) * 12 - 1, torch.rand(12, dtype=dtype) * 40,
                   torch.tensor([0.0, 1.0, 0.0, 1.0, float("inf"), 1.0], dtype=dtype)])
    close(fn, a, x)


# ---------------------------------------------------------------------------- counting, factories


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_triangle_indices(fn, dtype):
    for rows, cols in [(0, 3), (1, 1), (3, 3), (4, 6), (6, 4), (5, 1)]:
        for offset in (-7, -2, -1, 0, 1, 3, 8):
            out = fn(rows, cols, offset, dtype=dtype, device="zyx")
            assert out.device.type == "zyx"
            torch.testing.assert_close(out.cpu(), fn(rows, cols, offset, dtype=dtype))
    torch.testing.assert_close(fn(700, 500, -3, device="zyx").cpu(), fn(700, 500, -3))


@pytest.mark.parametrize("weights", [None, torch.float32, torch.float64, torch.int32])
@pytest.mark.parametrize("minlength", [0, 20])
def test_bincount(weights, minlength):
    torch.manual_seed(0)
    x = torch.randint(0, 12, (50,))
    w = None if weights is None else (torch.rand(50) * 4).to(weights)
    cpu = torch.bincount(x, w, minlength)
    out = torch.bincount(x.to("zyx"), None if w is None else w.to("zyx"), minlength)
    torch.testing.assert_close(out.cpu(), cpu)
    torch.testing.assert_close(torch.bincount(x.int().to("zyx")).cpu(), torch.bincount(x.int()))


def test_bincount_errors():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1]).to("zyx"))
    with pytest.raises(RuntimeError, match="minlength"):
        torch.bincount(torch.tensor([1]).to("zyx"), minlength=-1)
    empty = torch.tensor([], dtype=torch.long).to("zyx")
    assert torch.bincount(empty, minlength=3).cpu().tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_integer_pow_negative_exponent(dtype):
    base, exponent = torch.meshgrid(torch.arange(-3, 4).to(dtype), torch.arange(-4, 5).to(dtype),
                                    indexing="ij")
    close(torch.pow, base, exponent)
    close(lambda e: 2 ** e, exponent)
    close(lambda e: (-1) ** e, exponent)


def test_chebyshev_huge_degree_uses_closed_form():
    # |x| < 1 with a huge degree: ATen's cos(n acos x); the recurrence bound ignores these elements.
    x = torch.linspace(-0.99, 0.99, 23, dtype=torch.float64)
    # One ulp of acos(x) (~1e-16) times n = 1e9 moves the phase by ~1e-7: a device whose acos
    # rounds differently by an ulp (OpenCL) differs that much; 1e-6 is the problem's conditioning.
    close(torch.special.chebyshev_polynomial_t, x, torch.full_like(x, 1e9), tol=1e-6)


@torch.library.custom_op("zyx_test::shifted_softplus", mutates_args=())
def _shifted_softplus(x: torch.Tensor, shift: float) -> torch.Tensor:
    # One kernel for every device, written with torch ops (as torch 2.13's chunked
    # linear_cross_entropy is): on zyx it runs through zyx's own lowerings.
    return torch.nn.functional.softplus(x) - shift


@_shifted_softplus.register_fake
def _(x, shift):
    return torch.empty_like(x)


_shifted_softplus.register_autograd(
    lambda ctx, grad: (grad * torch.sigmoid(ctx.saved_tensors[0]), None),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


def test_custom_op_with_generic_kernel_runs_on_zyx(counters):
    x = torch.randn(6, 7, requires_grad=True)
    xz = x.detach().to("zyx").requires_grad_()
    same(lambda t: _shifted_softplus(t, 0.5), x.detach())  # (on zyx, equal to CPU torch's)
    _shifted_softplus(x, 0.5).sum().backward()
    _shifted_softplus(xz, 0.5).sum().backward()
    torch.testing.assert_close(xz.grad.cpu(), x.grad)
    assert counters()["cpu_fallbacks"] == 0


@pytest.mark.parametrize("size", [0, 2, 5, 9])
def test_nonzero_static_pads_or_cuts_without_realizing(counters, size):
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0], [0.0, 0.0, 3.0]])
    out = torch.nonzero_static(x.to("zyx") * 2, size=size, fill_value=-7)
    assert counters()["realizations"] == 0  # a static shape: nothing read back
    torch.testing.assert_close(out.cpu(), torch.nonzero_static(x * 2, size=size, fill_value=-7))
