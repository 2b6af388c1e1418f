"""``prims.*`` lowerings (torch_zyx/ops/prims.py): the prims called directly on zyx tensors, a set of
``torch._refs`` functions, and PyTorch's python-ref OpInfo idea (each OpInfo of ``python_ref_db`` run
as a reference on zyx, compared with CPU torch's op), all with the CPU fallback off.

Before ops/prims.py, 31 of the 337 float32 OpInfos of ``python_ref_db`` passed (283 failed with "no
lowering for prims.*"); the refs still failing are ``REF_XFAILS`` below, each with its reason.
"""

import math

import pytest
import torch
import torch._prims  # (registers the prims defined in Python)
import torch._refs
from conftest import assert_close, make
from torch._prims.context import TorchRefsMode
from torch.testing._internal.common_methods_invocations import python_ref_db
from torch.utils._pytree import tree_flatten, tree_map

pytestmark = pytest.mark.usefixtures("no_fallback")
prims = torch.ops.prims


def zyx_like(x):
    """``x`` on zyx with its geometry: the whole storage is copied and ``x`` is re-viewed with its
    shape, strides and offset (``x.to`` would make a compact copy; views into a larger storage,
    such as as_strided's partial_views samples, need the rest of it)."""
    if not isinstance(x, torch.Tensor):
        return x
    base = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0,
                                              (x.untyped_storage().nbytes() // x.element_size(),))
    return base.to("zyx").as_strided(x.shape, x.stride(), x.storage_offset())


# ------------------------------------------------------------------ prims called directly

UNARY = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc",
         "exp", "exp2", "expm1", "floor", "isfinite", "lgamma", "log", "log10", "log1p", "log2", "neg",
         "reciprocal", "round", "rsqrt", "sign", "signbit", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
         "digamma", "erf_inv"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_prims(name):
    x = make((3, 5), torch.float32, positive=name in ("acosh", "log", "log10", "log2", "rsqrt", "sqrt",
                                                       "lgamma", "digamma"))
    if name in ("acos", "asin", "atanh", "erf_inv"):
        x = x / 5
    op = getattr(prims, name)
    assert_close(op(x.to("zyx")), op(x), equal_nan=True, rtol=1e-4, atol=1e-5)


BINARY = ["add", "atan2", "div", "eq", "fmax", "fmin", "fmod", "ge", "gt", "hypot", "le", "lt", "maximum",
          "minimum", "mul", "ne", "nextafter", "pow", "remainder", "sub"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_prims(name):
    a, b = make((4, 3), torch.float32, 1), make((4, 3), torch.float32, 2, positive=True)
    op = getattr(prims, name)
    assert_close(op(a.to("zyx"), b.to("zyx")), op(a, b), equal_nan=True)
    # (the prims take a number for either operand; CPU's kernels of those without an aten
    # Scalar overload, atan2, fmax, hypot, ..., refuse one: the number as a tensor instead)
    want = op(a, torch.full_like(a, 2.0))
    assert_close(op(a.to("zyx"), 2.0), want, equal_nan=True)


@pytest.mark.parametrize("name", ["add", "bitwise_and", "bitwise_or", "bitwise_xor", "div", "fmod", "gcd",
                                  "remainder", "shift_left", "shift_right_arithmetic", "mul", "sub",
                                  "maximum", "eq"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_binary_prims(name, dtype):
    """Integer prims keep their dtype: prims.div truncates (aten.div would return floats)."""
    a = make((5, 4), dtype, 3, low=-9, high=9)
    b = make((5, 4), dtype, 4, positive=True, high=3 if "shift" in name else 5)
    op = getattr(prims, name)
    got, want = op(a.to("zyx"), b.to("zyx")), op(a, b)
    assert got.dtype == want.dtype
    assert_close(got, want)


def test_prims_do_not_promote_or_broadcast():
    """A prim's own checks run (its meta on the operands' geometry), with its messages."""
    a, b = torch.ones(3, device="zyx"), torch.ones(3, dtype=torch.float64, device="zyx")
    with pytest.raises(Exception, match="dtype"):
        prims.add(a, b)
    with pytest.raises(Exception, match="[Ss]hape"):
        prims.add(a, torch.ones(2, 3, device="zyx"))


def test_where_fill_convert():
    a, b = make((3, 4), torch.float32, 1), make((3, 4), torch.float32, 2)
    pred = a > b
    assert_close(prims.where(pred.to("zyx"), a.to("zyx"), b.to("zyx")), prims.where(pred, a, b))
    assert_close(prims.fill(a.to("zyx"), 2.5), prims.fill(a, 2.5))
    assert_close(prims.convert_element_type(a.to("zyx"), torch.int32),
                 prims.convert_element_type(a, torch.int32))


VIEWS = [
    (prims.broadcast_in_dim, ((3,), (2, 3), [1])),
    (prims.broadcast_in_dim, ((3, 1), (4, 3, 5), [1, 2])),
    (prims.collapse_view, ((2, 3, 4), 0, 2)),
    (prims.split_dim, ((6, 4), 0, 2)),
    (prims.squeeze, ((1, 3, 1), [0, 2])),
    (prims.transpose, ((2, 3, 4), [2, 0, 1])),
    (prims.view_of, ((2, 3),)),
    (prims.as_strided, ((4, 5), (2, 2), (1, 5), 3)),
]


@pytest.mark.parametrize("op,args", VIEWS, ids=lambda v: getattr(v, "__name__", ""))
def test_view_prims(op, args):
    """View prims alias their input with the prim's own shape, strides and offset."""
    x = make(args[0], torch.float32)
    z = x.to("zyx")
    got, want = op(z, *args[1:]), op(x, *args[1:])
    assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(),
                                                               want.storage_offset())
    assert_close(got, want)
    z.add_(1)  # (a view sees writes to its base)
    assert_close(got, op(x + 1, *args[1:]))


def test_copy_prims():
    x = make((3, 4), torch.float32)
    z = x.to("zyx")
    r = prims.reshape(z, (4, 3))
    assert r.shape == (4, 3) and r.is_contiguous()
    assert_close(r, x.reshape(4, 3))
    z.t().contiguous()
    assert_close(prims.collapse(z.t(), 0, 1), prims.collapse(x.t(), 0, 1))
    s = prims.copy_strided(z, (1, 3))
    assert s.stride() == (1, 3)
    assert_close(s, x)
    dst = torch.zeros(12, device="zyx")
    out = prims.copy_to(dst, z)  # (same numel, another shape: row-major order)
    assert out is dst
    assert_close(dst, x.reshape(12))
    assert_close(prims.rev(z, [0, 1]), prims.rev(x, [0, 1]))
    assert_close(prims.cat([z, z * 2], 1), prims.cat([x, x * 2], 1))
    c = prims.clone(z.t())
    assert c.stride() == prims.clone(x.t()).stride()
    z.add_(1)  # (copies do not alias)
    assert_close(r, x.reshape(4, 3))
    assert_close(c, x.t())
    assert prims.item(z[1, 2]) == pytest.approx(x[1, 2].item() + 1)


@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin"])
@pytest.mark.parametrize("dims", [[0], [1, 2], [0, 1, 2], []])
def test_reduction_prims(name, dims):
    """Prim reductions: explicit dims (none: nothing reduced), no keepdim, the input's dtype kept
    unless output_dtype names another."""
    op = getattr(prims, name)
    x = make((2, 3, 4), torch.float32, low=-1.5, high=1.5)
    # (CPU's prim kernels call torch.sum/amax/..., which reduce every dim for dims=[]; the prim's
    # meta, its contract, reduces none)
    want = x if not dims else op(x, dims)
    assert_close(op(x.to("zyx"), dims), want, rtol=1e-4, atol=1e-5)
    i = make((2, 3, 4), torch.int32, low=-3, high=3)
    got, want = op(i.to("zyx"), dims), i if not dims else op(i, dims)
    # The prim's meta keeps int32 (its contract, which fake tensors and Inductor follow); CPU's
    # kernel calls torch.sum/prod, which promote integers to int64.
    assert got.dtype == op(i.to("meta"), dims).dtype == torch.int32
    assert_close(got, want, check_dtype=False)
    if name == "sum" and dims:
        # (CPU's prim kernel passes output_dtype on to torch.sum, which has no such argument)
        assert_close(op(i.to("zyx"), dims, output_dtype=torch.float64), i.double().sum(dims))


def test_var_prim():
    x = make((3, 4, 5), torch.float32)
    for dims, correction in (([0], 1), ([1, 2], 0), ([0, 1, 2], 1)):
        assert_close(prims.var(x.to("zyx"), dims, correction), prims.var(x, dims, correction))


def test_factory_prims():
    """The factories reach zyx's aten factories through their own composite kernels."""
    got = prims.iota(5, start=2, step=3, dtype=torch.int64, device="zyx", requires_grad=False)
    assert_close(got, prims.iota(5, start=2, step=3, dtype=torch.int64, device="cpu", requires_grad=False))
    got = prims.full((2, 3), 1.5, dtype=torch.float32, device="zyx", requires_grad=False)
    assert_close(got, torch.full((2, 3), 1.5))
    assert_close(prims.scalar_tensor(3.0, dtype=torch.float64, device="zyx"), torch.tensor(3.0,
                                                                                        dtype=torch.float64))
    e = prims.empty_strided((2, 3), (1, 2), dtype=torch.float32, device="zyx", requires_grad=False)
    assert e.device.type == "zyx" and e.stride() == (1, 2)
    x = make((3,), torch.float32)
    assert_close(prims.device_put(x.to("zyx"), "zyx"), x)
    back = prims.device_put(x.to("zyx"), "cpu")
    assert back.device.type == "cpu" and torch.equal(back, x)


# ------------------------------------------------------------------ torch._refs on zyx

REFS = [
    (torch._refs.add, ((3, 4), (4,)), {"alpha": 2}),
    (torch._refs.sub, ((3, 4), (3, 1)), {}),
    (torch._refs.true_divide, ((3, 4), (3, 4)), {}),
    (torch._refs.where, ((3, 4), (3, 4), (3, 4)), {}),
    (torch._refs.sum, ((3, 4),), {"dim": 1, "keepdim": True}),
    (torch._refs.mean, ((3, 4, 2),), {"dim": (0, 2)}),
    (torch._refs.var, ((3, 4),), {"dim": 0}),
    (torch._refs.std_mean, ((3, 4),), {"dim": 1}),
    (torch._refs.amax, ((3, 4),), {"dim": 0}),
    (torch._refs.softmax, ((3, 4),), {"dim": 1}),
    (torch._refs.logsumexp, ((3, 4),), {"dim": 1}),
    (torch._refs.cat, (((2, 3), (1, 3)),), {}),
    (torch._refs.stack, (((2, 3), (2, 3)),), {"dim": 1}),
    (torch._refs.flip, ((2, 3),), {"dims": (0, 1)}),
    (torch._refs.roll, ((4, 3),), {"shifts": 1, "dims": 0}),
    (torch._refs.tril, ((4, 4),), {}),
    (lambda a: torch._refs.reshape(a, (3, 4)), ((2, 6),), {}),
    (torch._refs.flatten, ((2, 3, 4),), {}),
    (torch._refs.unsqueeze, ((2, 3),), {"dim": 1}),
    (lambda a: torch._refs.permute(a, (2, 0, 1)), ((2, 3, 4),), {}),
    (lambda a: torch._refs.expand(a, (3, 4)), ((3, 1),), {}),
    (torch._refs.clamp, ((3, 4),), {"min": -0.5, "max": 0.5}),
    (torch._refs.lerp, ((3, 4), (3, 4)), {"weight": 0.3}),
    (torch._refs.nn.functional.gelu, ((3, 4),), {}),
    (torch._refs.nn.functional.layer_norm, ((3, 4),), {"normalized_shape": (4,)}),
    (torch._refs.addcmul, ((3, 4), (3, 4), (3, 4)), {"value": 0.5}),
    (torch._refs.masked_fill, ((3, 4), (3, 4)), {"value": 2.0}),
]


@pytest.mark.parametrize("ref,shapes,kwargs", REFS, ids=lambda v: getattr(v, "__name__", None))
def test_refs(ref, shapes, kwargs):
    """A reference function on zyx tensors (its torch calls redirected to refs, as PyTorch's
    test_python_ref does) against CPU torch: values, dtype, shape and strides."""
    def args_on(device):
        out = []
        for i, s in enumerate(shapes):
            if isinstance(s[0], tuple):
                out.append([make(t, torch.float32, i + j).to(device) for j, t in enumerate(s)])
            elif ref is torch._refs.where and i == 0 or ref is torch._refs.masked_fill and i == 1:
                out.append((make(s, torch.float32, i) > 0).to(device))
            else:
                out.append(make(s, torch.float32, i).to(device))
        return out

    args = args_on("zyx")
    with TorchRefsMode():
        got = ref(*args, **kwargs)
    want = ref(*args_on("cpu"), **kwargs)
    assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, w in zip(*(tree_flatten(r)[0] for r in (got, want))):
        assert g.stride() == w.stride()


# ------------------------------------------------------------ python_ref_db, as PyTorch's test_python_ref

MAX_SAMPLES = 4
# zyx's float32 igamma (ops/math/igamma.py) is within 2e-4 of CPU torch's, not 1e-4.
TOLERANCES = {"_refs.igamma": {"rtol": 1e-3, "atol": 1e-4}, "_refs.igammac": {"rtol": 1e-3, "atol": 1e-4}}
# Random and uninitialized results: shape, dtype and strides only.
UNCOMPARED = {"_refs.empty", "_refs.empty_like", "_refs.empty_strided", "_refs.new_empty",
              "_refs.new_empty_strided", "_refs.cauchy", "_refs.exponential", "_refs.geometric",
              "_refs.log_normal", "_refs.normal", "_refs.normal.number_mean", "_refs.normal_.in_place",
              "_refs.nn.functional.dropout", "_refs.nn.functional.alpha_dropout", "_refs.bernoulli",
              "_refs.randn", "_refs.rand", "_refs.uniform"}
_COMPLEX = "zyx has no complex dtypes (complex tensors are refused when made)"
_FFT = "prims.fft_r2c/c2c/c2r: zyx has no complex dtypes"
REF_XFAILS = {
    "_refs._conversions.cdouble": _COMPLEX, "_refs._conversions.cfloat": _COMPLEX,
    "_refs._conversions.chalf": _COMPLEX, "_refs._conversions.complex": _COMPLEX,
    "_refs._conversions.polar": _COMPLEX, "_refs.view_as_complex": _COMPLEX,
    **{f"_refs.fft.{n}": _FFT for n in ("fft", "fft2", "fftn", "hfft", "hfft2", "hfftn", "ifft", "ifft2",
                                         "ifftn", "ihfft", "ihfft2", "ihfftn", "irfft", "irfft2", "irfftn",
                                         "rfft", "rfft2", "rfftn")},
    "_refs.stft": _FFT,
    "_refs.tensor_split": "indices given as a tensor must be on the CPU (the ref asks for that; the "
                          "sample's tensor is moved to zyx with the input)",
}


def _name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


REF_OPS = [op for op in python_ref_db if torch.float32 in op.supported_dtypes("cpu")]


@pytest.mark.parametrize("op", REF_OPS, ids=_name)
def test_python_ref(op):
    name = _name(op)
    if name in REF_XFAILS:
        pytest.xfail(REF_XFAILS[name])
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:MAX_SAMPLES]
    checked = 0
    for sample in samples:
        try:
            want = op.torch_opinfo.op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001, S112  (a sample CPU torch refuses: PyTorch's test skips it too)
            continue
        args = tree_map(zyx_like, (sample.input, sample.args, sample.kwargs))
        if "device" in args[2]:  # (factory samples name the device the test runs on)
            args[2]["device"] = "zyx"
        with TorchRefsMode():
            got = op.op(args[0], *args[1], **args[2])
        got_leaves, want_leaves = tree_flatten(got)[0], tree_flatten(want)[0]
        assert len(got_leaves) == len(want_leaves)
        for g, w in zip(got_leaves, want_leaves):
            if not isinstance(w, torch.Tensor):
                assert g == w or (isinstance(w, float) and math.isnan(w) and math.isnan(g))
                continue
            assert g.device.type == "zyx" or w.device.type == g.device.type
            assert (g.dtype, g.shape) == (w.dtype, w.shape)
            if name not in UNCOMPARED:
                tolerance = TOLERANCES.get(name, {"rtol": 1e-4, "atol": 1e-5})
                torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tolerance)
        checked += 1
    if not checked:
        pytest.skip("no sample CPU torch accepts")
