"""Argument and dtype checks CPU torch makes (issue 37, item 7): zyx raises CPU torch's exception
type and message when the op is recorded, and the valid calls around each check still give CPU
torch's values.

Each error case is a function of a device that builds its inputs there and calls the op once,
without reading its result: CPU torch's error is the expected one, and zyx must raise it inside
the call (an error deferred to a later realization would escape ``pytest.raises``). Each runs with
the CPU fallback off (zyx's own lowerings make the check) and on (a check zyx misses would let
the fallback compute where it must not, or raise elsewhere).
"""

import re

import pytest
import torch
from conftest import compare

from torch_zyx.config import CONFIG

aten = torch.ops.aten


def _t(values, dtype, device):
    return torch.tensor(values, dtype=dtype, device=device)


def f32(d):
    return _t([-1.5, 0.0, 2.25], torch.float32, d)


def f64(d):
    return _t([0.5, -2.0, 3.0], torch.float64, d)


def f16(d):
    return _t([0.5, -2.0, 3.0], torch.float16, d)


def i64(d):
    return _t([3, -1, 2], torch.int64, d)


def u8(d):
    return _t([3, 1, 2], torch.uint8, d)


def b8(d):
    return _t([True, False, True], torch.bool, d)


def idx(d, dtype=torch.int64):
    return _t([0, 2], dtype, d)


ERROR_CASES = {
    # (a) writes through an index of a source of another dtype, and the same check of the ops
    # of its family (each with ATen's own message and order of checks)
    "setitem long into double": lambda d: f64(d).__setitem__(idx(d), i64(d)[:2]),
    "setitem bool mask long into double": lambda d: f64(d).__setitem__(b8(d), i64(d)[:2]),
    "index_put_ long into double": lambda d: f64(d).index_put_((idx(d),), i64(d)[:2]),
    "index_put_ accumulate float into double": lambda d: f64(d).index_put_((idx(d),), f32(d)[:2], True),
    "index_put long into float": lambda d: torch.index_put(f32(d), (idx(d),), i64(d)[:2]),
    "index_add source dtype": lambda d: f64(d).index_add(0, idx(d), i64(d)[:2]),
    "index_add_ source dtype": lambda d: f32(d).index_add_(0, idx(d), f64(d)[:2]),
    "index_add float index (before the source)": lambda d: f64(d).index_add(0, f32(d)[:2], i64(d)[:2]),
    "index_add 2-d index": lambda d: f64(d).index_add(0, idx(d)[None], f64(d)[:2]),
    "index_copy source dtype": lambda d: f64(d).index_copy(0, idx(d), i64(d)[:2]),
    "index_copy int32 index": lambda d: f64(d).index_copy(0, idx(d, torch.int32), f64(d)[:2]),
    "index_copy 2-d index": lambda d: f64(d).index_copy(0, idx(d)[None], i64(d)[:2]),
    "index_reduce source dtype": lambda d: f64(d).index_reduce(0, idx(d), i64(d)[:2], "prod"),
    "index_reduce reduce name first": lambda d: f64(d).index_reduce(0, f32(d)[:2], f64(d)[:2], "sum"),
    "scatter_add src dtype": lambda d: f64(d).scatter_add(0, idx(d), i64(d)[:2]),
    "scatter_add_ float index": lambda d: f64(d).scatter_add_(0, f32(d)[:2], f64(d)[:2]),
    "scatter_reduce src dtype before reduce": lambda d: f64(d).scatter_reduce(0, idx(d), i64(d)[:2], "bad"),
    "scatter_reduce bad reduce": lambda d: f64(d).scatter_reduce(0, idx(d), f64(d)[:2], "bad"),
    "scatter_ reduce=multiply src dtype": lambda d: f64(d).scatter_(0, idx(d), f32(d)[:2], reduce="multiply"),
    "scatter reduce name": lambda d: f64(d).scatter(0, idx(d), f64(d)[:2], reduce="max"),
    "masked_scatter source dtype": lambda d: f64(d).masked_scatter(b8(d), i64(d)),
    "put source dtype": lambda d: f64(d).put(idx(d), i64(d)[:2]),
    "put int32 index": lambda d: f64(d).put(idx(d, torch.int32), f64(d)[:2]),
    "index_select float index": lambda d: f64(d).index_select(0, f32(d)[:2]),
    # (b) lerp: operands of one dtype (a 0-d weight excepted), floating kernels only
    "lerp double start, float end": lambda d: torch.lerp(f64(d), f32(d), 0.5),
    "lerp float start, double end": lambda d: torch.lerp(f32(d), f64(d), f32(d)),
    "lerp 1-d weight of another dtype": lambda d: torch.lerp(f32(d), f32(d), f64(d)),
    "lerp end 0-d of another dtype": lambda d: torch.lerp(f32(d), f64(d)[0], 0.5),
    "lerp of integers": lambda d: torch.lerp(i64(d), i64(d), 0.5),
    "lerp of integers, tensor weight": lambda d: torch.lerp(i64(d), i64(d), i64(d)),
    "lerp of bools": lambda d: torch.lerp(b8(d), b8(d), b8(d)),
    "lerp_ of integers": lambda d: i64(d).lerp_(i64(d), 0.5),
    "lerp out of another dtype (tensor weight)": lambda d: torch.lerp(f32(d), f32(d), f32(d), out=f64(d)),
    "lerp out cast before the kernel": lambda d: torch.lerp(i64(d), i64(d), 0.5, out=b8(d)),
    "lerp_ 0-d weight promotes past self": lambda d: b8(d).lerp_(b8(d), i64(d)[0]),
    "foreach_lerp of integers": lambda d: torch._foreach_lerp([i64(d)], [i64(d)], 0.5),
    # (c) alpha of add/sub/rsub against the result dtype
    "add float alpha on integers": lambda d: torch.add(i64(d), i64(d), alpha=1.5),
    "add alpha=1.0 on integers": lambda d: torch.add(i64(d), i64(d), alpha=1.0),
    "add alpha=1.0 on an integer view": lambda d: torch.add(i64(d)[::2], 2, alpha=1.0),
    "add_ alpha=1.0 on integers": lambda d: i64(d).add_(i64(d), alpha=1.0),
    "sub float alpha on integers": lambda d: torch.sub(i64(d), 2, alpha=0.5),
    "sub_ float alpha on integers": lambda d: i64(d).sub_(i64(d), alpha=2.5),
    "rsub float alpha on integers": lambda d: torch.rsub(i64(d), i64(d), alpha=1.5),
    "add bool alpha on floats": lambda d: torch.add(f32(d), f32(d), alpha=True),
    "add bool alpha on integers": lambda d: torch.add(i64(d), b8(d), alpha=True),
    "add complex alpha on floats": lambda d: torch.add(f32(d), 2, alpha=1j),
    "add complex alpha on integers": lambda d: torch.add(i64(d), i64(d), alpha=1j),
    "add out= cast before alpha": lambda d: torch.add(i64(d), i64(d), alpha=1.5, out=b8(d)),
    "add_ cast before alpha": lambda d: i64(d).add_(f32(d), alpha=True),
    "sub_ bools before the cast": lambda d: b8(d).sub_(f32(d), alpha=1.5),
    "foreach_add bool alpha": lambda d: torch._foreach_add([f32(d)], [f32(d)], alpha=True),
    "foreach_sub float alpha on integers": lambda d: torch._foreach_sub([i64(d)], [i64(d)], alpha=1.5),
    # (d) addcdiv of integers, addcmul of bools
    "addcdiv of integers": lambda d: torch.addcdiv(i64(d), i64(d), i64(d) + 4),
    "addcdiv of bools": lambda d: torch.addcdiv(f32(d), b8(d), b8(d)),
    "addcdiv_ of integers": lambda d: f32(d).addcdiv_(i64(d), i64(d)),
    "addcmul of bools": lambda d: torch.addcmul(b8(d), b8(d), b8(d)),
    "addcmul_ of bools": lambda d: b8(d).addcmul_(b8(d), b8(d)),
    "foreach_addcmul of bools": lambda d: torch._foreach_addcmul([b8(d)], [b8(d)], [b8(d)]),
    # (e) out= casting rules of unary ops, and the dtypes of their kernels
    "sin out= of integers": lambda d: torch.sin(i64(d), out=i64(d)),
    "exp out= int32": lambda d: torch.exp(f32(d), out=i64(d).int()),
    "sigmoid_ of integers": lambda d: i64(d).sigmoid_(),
    "sqrt out= bool": lambda d: torch.sqrt(f64(d), out=b8(d)),
    "abs out= of another dtype": lambda d: torch.abs(f32(d), out=f64(d)),
    "abs of bools out= float (the out check first)": lambda d: torch.abs(b8(d), out=f32(d)),
    "neg of bools out= float (neg's check first)": lambda d: torch.neg(b8(d), out=f32(d)),
    "frac of integers out= float": lambda d: torch.frac(i64(d), out=f32(d)),
    "bitwise_not of halves": lambda d: torch.bitwise_not(f16(d)),
    "signbit out= float": lambda d: torch.signbit(f32(d), out=f32(d)),
    "gelu out= double": lambda d: torch._C._nn.gelu(f32(d), out=f64(d)),
    "gelu out= long": lambda d: torch._C._nn.gelu(f32(d), out=i64(d)),
    "gelu of integers": lambda d: torch.nn.functional.gelu(i64(d)),
    "gelu of integers out= long (the kernel)": lambda d: torch._C._nn.gelu(i64(d), out=i64(d)),
    "gelu_ of integers": lambda d: aten.gelu_(i64(d)),
    "silu of integers": lambda d: torch.nn.functional.silu(i64(d)),
    "silu_ of integers": lambda d: torch.nn.functional.silu(i64(d), inplace=True),
    "silu out= half": lambda d: torch._C._nn.silu(f32(d), out=f16(d)),
    "mish of integers": lambda d: torch.nn.functional.mish(i64(d)),
    "hardswish of bools": lambda d: torch.nn.functional.hardswish(b8(d)),
    "hardsigmoid out= double": lambda d: torch._C._nn.hardsigmoid(f32(d), out=f64(d)),
    "elu of integers": lambda d: torch.nn.functional.elu(i64(d)),
    "celu_ of integers": lambda d: torch.nn.functional.celu(i64(d), inplace=True),
    "selu of integers": lambda d: torch.nn.functional.selu(i64(d)),
    "softplus of uint8": lambda d: torch.nn.functional.softplus(u8(d)),
    "softplus out= long": lambda d: torch._C._nn.softplus(f32(d), out=i64(d)),
    "leaky_relu of integers": lambda d: torch.nn.functional.leaky_relu(i64(d)),
    "leaky_relu out= double": lambda d: torch._C._nn.leaky_relu(f32(d), out=f64(d)),
    "hardshrink of integers": lambda d: torch.nn.functional.hardshrink(i64(d)),
    "softshrink of integers out= float (the kernel first)":
        lambda d: torch._C._nn.softshrink(i64(d), out=f32(d)),
    "logsigmoid of integers": lambda d: torch.nn.functional.logsigmoid(i64(d)),
    "log_sigmoid out= double": lambda d: torch._C._nn.log_sigmoid(f32(d), out=f64(d)),
    "hardtanh of bools": lambda d: torch.nn.functional.hardtanh(b8(d)),
    "relu6 of bools": lambda d: torch.nn.functional.relu6(b8(d)),
    "hardtanh uint8 negative bound": lambda d: torch.nn.functional.hardtanh(u8(d)),
    "hardtanh of bools out= float": lambda d: torch._C._nn.hardtanh(b8(d), out=f32(d)),
    "hardtanh out= long": lambda d: torch._C._nn.hardtanh(f32(d), out=i64(d)),
    "relu of bools": lambda d: torch.relu(b8(d)),
    "relu_ of bools": lambda d: b8(d).relu_(),
    "threshold of bools": lambda d: torch.nn.functional.threshold(b8(d), 0.5, 1.0),
    # (f) heaviside of one dtype, out= too
    "heaviside float and double": lambda d: torch.heaviside(f32(d), f64(d)),
    "heaviside long and float": lambda d: torch.heaviside(i64(d), f32(d)),
    "heaviside 0-d values of another dtype": lambda d: torch.heaviside(f32(d), f64(d)[0]),
    "heaviside_ of two dtypes": lambda d: f32(d).heaviside_(f64(d)),
    "heaviside out= of another dtype": lambda d: torch.heaviside(f32(d), f32(d), out=f64(d)),
    # (g) clamp: a bound, the kernels' dtypes, in-place and out= dtypes
    "clamp without bounds": lambda d: torch.clamp(f32(d)),
    "clamp_ without bounds": lambda d: f32(d).clamp_(),
    "clamp out= without bounds": lambda d: torch.clamp(f32(d), out=i64(d)),
    "clip without bounds": lambda d: torch.clip(i64(d)),
    "clamp.Tensor without bounds": lambda d: aten.clamp.Tensor(f32(d), None, None),
    "clamp_.Tensor without bounds": lambda d: aten.clamp_.Tensor(f32(d), None, None),
    "clamp of bools, a number min": lambda d: torch.clamp(b8(d), min=True),
    "clamp of bools, a number max": lambda d: torch.clamp(b8(d), max=False),
    "clamp of bools, two numbers": lambda d: torch.clamp(b8(d), False, True),
    "clamp of bools, two tensors": lambda d: torch.clamp(b8(d), b8(d), b8(d)),
    "clamp_min of bools": lambda d: torch.clamp_min(b8(d), True),
    "clamp_max_ of bools": lambda d: b8(d).clamp_max_(True),
    "clamp_ of integers to a float": lambda d: i64(d).clamp_(min=1.5),
    "clamp_min_ of integers to a float": lambda d: i64(d).clamp_min_(0.5),
    "clip_ of integers to a float": lambda d: i64(d).clip_(max=2.5),
    "clamp_ of integers to a float tensor": lambda d: i64(d).clamp_(min=f32(d)),
    "clamp out= of another dtype": lambda d: torch.clamp(f32(d), min=0.5, out=f64(d)),
    "clamp of integers to a float, out= double": lambda d: torch.clamp(i64(d), min=1.5, out=f64(d)),
    "clamp_max out= of another dtype": lambda d: torch.clamp_max(i64(d), 2, out=f32(d)),
    "clip out= of another dtype": lambda d: torch.clip(i64(d), 0, 2, out=f32(d)),
    "foreach_clamp_min of bools": lambda d: torch._foreach_clamp_min([b8(d)], True),
    "foreach_clamp_min_ of integers to a float": lambda d: torch._foreach_clamp_min_([i64(d)], 1.5),
    "foreach_maximum_ of integers to a float": lambda d: torch._foreach_maximum_([i64(d)], 1.5),
    # (h) advanced indexing (PyTorch's test_indexing.py): masks of the indexed dims' sizes,
    # indices that broadcast, no index into an empty dim, an index given, values that expand to
    # the indexing result (checked before their dtype)
    "index with a mask too short": lambda d: f64(d).reshape(3, 1)[b8(d)[:1]],
    "index with a mask too long": lambda d: f64(d)[torch.ones(4, dtype=torch.bool, device=d)],
    "index with a uint8 mask of another shape": lambda d: f32(d).reshape(1, 3)[:, u8(d)[:2]],
    "setitem with a mask of another shape": lambda d: f64(d).__setitem__(b8(d)[:2], 1.0),
    "index with indices that do not broadcast": lambda d: f64(d).reshape(3, 1)[[0, 1], [0, 0, 0]],
    "setitem with indices that do not broadcast":
        lambda d: f64(d).reshape(1, 3).__setitem__(([0, 0], [0, 1, 2]), 0),
    "index with False and a list": lambda d: f64(d).reshape(3, 1)[False, [0, 1], ...],
    "index into an empty dim": lambda d: torch.empty(3, 0, device=d)[:, [0, 1]],
    "index into an empty first dim": lambda d: torch.empty(0, 2, device=d)[[-1]],
    "setitem into an empty dim": lambda d: torch.empty(2, 0, device=d).__setitem__((slice(None), [0]), 1.0),
    "index.Tensor without indices": lambda d: aten.index.Tensor(f64(d), []),
    "index_put without indices": lambda d: f64(d)[0].index_put([], f64(d)[:1], True),
    "setitem values of a wrong shape before their dtype":
        lambda d: i64(d).__setitem__(i64(d) > -9, f32(d)[:2]),
    "setitem values of more elements than the result": lambda d: i64(d)[:1].__setitem__(b8(d)[:1], i64(d)),
    "index_put_ values that do not expand": lambda d: f64(d).index_put_((idx(d),), f64(d)),
    "index_fill_ with a complex number": lambda d: f32(d).index_fill_(0, idx(d), 1 + 1j),
    "index_fill of integers with a complex number": lambda d: i64(d).index_fill(0, idx(d), 2j),
    "index_fill 2-d value before the index dtype": lambda d: f32(d).index_fill(0, idx(d).int(), f32(d)[None]),
    # (i) out= tensors of nonzero and cat
    "nonzero out= float": lambda d: torch.nonzero(i64(d), out=f32(d)),
    "cat out= of integers from floats": lambda d: torch.cat([f32(d), i64(d)], out=i64(d)),
    "cat out= bool from integers": lambda d: torch.cat([i64(d), i64(d)], out=b8(d)),
    "cat out= shape check first": lambda d: torch.cat([f32(d), f32(d)[None]], out=i64(d)),
}


@pytest.fixture(params=[False, True], ids=["no_fallback", "fallback"])
def fallback(request, monkeypatch):
    monkeypatch.setattr(CONFIG, "cpu_fallback", request.param)
    return request.param


@pytest.mark.filterwarnings("ignore::UserWarning")  # (the fallback's warning, out= resizes)
@pytest.mark.parametrize("name", ERROR_CASES)
def test_error_matches_cpu(name, fallback):
    fn = ERROR_CASES[name]
    with pytest.raises(Exception) as cpu_error:
        fn("cpu")
    message = str(cpu_error.value)
    with pytest.raises(cpu_error.type, match=re.escape(message)) as zyx_error:
        fn("zyx")
    assert type(zyx_error.value) is cpu_error.type


def test_nonzero_out_on_another_device(no_fallback):
    # (CPU torch cannot make this call; its CUDA kernel's message, as for every device of its own)
    x = i64("zyx")
    with pytest.raises(RuntimeError, match="expected self and out to be on the same device, but got out "
                                           "on cpu and self on zyx:0"):
        torch.nonzero(x, out=torch.empty(0, dtype=torch.int64))


def test_uint8_masks_warn_like_cpu(no_fallback):
    # ATen's deprecation warning of a uint8 mask, for each indexing call
    def index_and_put(x, mask):
        x[mask]
        x.index_put_((mask,), x[:2].clone())

    for d in ("cpu", "zyx"):
        with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated") as record:
            index_and_put(f32(d).reshape(3, 1), (u8(d) > 1).to(torch.uint8))
        assert len([w for w in record if "uint8" in str(w.message)]) == 2, d


def _setitem(x, index, values):
    x[index] = values
    return x


# Valid calls next to each check: zyx gives CPU torch's values (and dtypes).
VALUE_CASES = {
    "setitem same dtype": lambda d: _setitem(f64(d), idx(d), f64(d)[:2]),
    "index_add int32 index": lambda d: f64(d).index_add(0, idx(d, torch.int32), f64(d)[:2], alpha=2),
    "index_copy": lambda d: i64(d).index_copy(0, idx(d), i64(d)[1:]),
    "scatter_reduce amax": lambda d: f32(d).scatter_reduce(0, idx(d), f32(d)[1:], "amax"),
    "scatter reduce=add": lambda d: f64(d).scatter(0, idx(d), f64(d)[:2], reduce="add"),
    "put": lambda d: f32(d).put(idx(d), f32(d)[1:], accumulate=True),
    "masked_scatter": lambda d: i64(d).masked_scatter(b8(d), i64(d) * 5),
    "lerp scalar weight": lambda d: torch.lerp(f32(d), f32(d) * 3, 0.75),
    "lerp 0-d double weight on floats": lambda d: torch.lerp(f32(d), f32(d) * 3, f64(d)[0]),
    "lerp CPU 0-d double weight": lambda d: torch.lerp(f32(d), f32(d) * 3, _t(0.3, torch.float64, "cpu")),
    "lerp of integers with a 0-d float weight": lambda d: torch.lerp(i64(d), i64(d) * 2, f32(d)[0]),
    "lerp of 0-d floats with a 0-d double weight": lambda d: torch.lerp(f32(d)[2], f32(d)[0], f64(d)[0]),
    "lerp of halves, 0-d float weight": lambda d: torch.lerp(f16(d), f16(d) * 2, f32(d)[2] / 9),
    "lerp_ 0-d double weight": lambda d: f32(d).lerp_(f32(d) + 1, f64(d)[0]),
    "lerp out= double (scalar weight)": lambda d: torch.lerp(f32(d), f32(d) + 1, 0.25, out=f64(d)),
    "add int alpha on integers": lambda d: torch.add(i64(d), i64(d), alpha=3),
    "add alpha=1.0 on floats": lambda d: torch.add(f32(d), f32(d), alpha=1.0),
    "add float alpha, float result": lambda d: torch.add(i64(d), f32(d), alpha=1.5),
    "add_ float alpha on floats": lambda d: f32(d).add_(f32(d), alpha=-0.5),
    "sub float alpha on a float view": lambda d: torch.sub(f64(d)[::2], 1, alpha=0.25),
    "rsub int alpha": lambda d: torch.rsub(i64(d), 2, alpha=2),
    "add bool alpha on bools": lambda d: torch.add(b8(d), b8(d).logical_not(), alpha=True),
    "add out= float from integers, float alpha": lambda d: torch.add(i64(d), f32(d), alpha=2.5, out=f64(d)),
    "foreach_add float alpha": lambda d: torch._foreach_add([f32(d)], [f32(d)], alpha=0.5),
    "addcdiv of integer self, float tensors": lambda d: torch.addcdiv(i64(d), f32(d), f32(d) + 4, value=2),
    "addcmul of integers, float value": lambda d: torch.addcmul(i64(d), i64(d), i64(d), value=2),
    "addcmul of floats and bools": lambda d: torch.addcmul(f32(d), b8(d), b8(d), value=0.5),
    "sin out= double": lambda d: torch.sin(i64(d), out=f64(d)),
    "gelu out= float": lambda d: torch._C._nn.gelu(f32(d), out=f32(d)),
    "silu of halves": lambda d: torch.nn.functional.silu(f16(d)),
    "hardtanh of integers, float bounds": lambda d: torch.nn.functional.hardtanh(i64(d), -0.5, 2.5),
    "relu6 of integers": lambda d: torch.nn.functional.relu6(i64(d) * 3),
    "threshold of integers": lambda d: torch.nn.functional.threshold(i64(d), 1, 7),
    "relu of integers": lambda d: torch.relu(i64(d)),
    "neg of integers out=": lambda d: torch.neg(i64(d), out=i64(d)),
    "signbit out= bool": lambda d: torch.signbit(f32(d), out=b8(d)),
    "heaviside out= same dtype": lambda d: torch.heaviside(f32(d), f32(d) * 2, out=f32(d)),
    "clamp of bools, an integer bound": lambda d: torch.clamp(b8(d), min=0),
    "clamp of bools, one tensor bound": lambda d: torch.clamp(b8(d), max=b8(d).logical_not()),
    "clamp of integers to a float": lambda d: torch.clamp(i64(d), min=1.5),
    "clamp_ of floats to an integer": lambda d: f32(d).clamp_(max=1),
    "clamp out= (tensor bound) casts": lambda d: torch.clamp(f32(d), min=f32(d) / 2, out=f64(d)),
    "clamp_min out= same dtype": lambda d: torch.clamp_min(i64(d), 0, out=i64(d)),
    "index into an empty dim with no entries": lambda d: torch.empty(3, 0, device=d)[:, []],
    "index with a mask of the indexed dims": lambda d: f64(d).reshape(3, 1)[b8(d)[:, None]],
    "setitem one value through a full mask": lambda d: _setitem(i64(d), b8(d), 7),
    "setitem values that expand": lambda d: _setitem(f64(d).reshape(3, 1), (idx(d)[:, None],), f64(d)[:1]),
    "index_fill of reals with a real number": lambda d: f32(d).index_fill(0, idx(d), 2.5),
    "nonzero out= long": lambda d: torch.nonzero(i64(d), out=torch.empty(0, dtype=torch.int64, device=d)),
    "cat out= double from floats and integers": lambda d: torch.cat([f32(d), i64(d)], out=f64(d)[:0]),
}


@pytest.mark.parametrize("name", VALUE_CASES)
def test_valid_calls_match_cpu(name, no_fallback):
    fn = VALUE_CASES[name]
    compare(fn("zyx"), fn("cpu"))


def test_complex_number_into_a_real_tensor_once_complex_values_exist():
    """Once a complex zyx tensor exists, ops with a complex Python number go through dispatch's
    complex path; on real tensors the real lowering still makes CPU torch's check (PyTorch's
    reference of index_fill called index_fill again: a RecursionError)."""
    torch.ones(2, dtype=torch.complex64, device="zyx")
    errors = []
    for dev in ("cpu", "zyx"):
        with pytest.raises(RuntimeError) as info:
            torch.zeros(3, 4, device=dev).index_fill(1, torch.tensor([0], device=dev), 1j)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    torch.testing.assert_close((torch.zeros(2, device="zyx") + 1j).cpu(), torch.zeros(2) + 1j)
