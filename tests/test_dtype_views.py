"""``Tensor.view(dtype)`` on zyx against CPU torch: the same bytes read as another dtype, in a view
that shares the tensor's memory (record/tensor.py ``ReinterpretedStorage``).

Each test runs the same code on a CPU tensor and on its zyx copy and compares values bit for bit
(the bytes of every result), shapes, strides and offsets; writes through either tensor must show
in the other, and the errors are CPU torch's own (type and message). Every op here has a zyx
lowering: no test may fall back to the CPU (``no_fallback``).
"""

import io
import re

import pytest
import torch

import torch_zyx
from torch_zyx.integration import device_guard

pytestmark = pytest.mark.usefixtures("no_fallback")

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of CPU tensor ``t``'s elements in row-major order (bool as its 0/1 bytes)."""
    flat = t.contiguous().reshape(-1)
    return flat.to(torch.uint8) if flat.dtype == torch.bool else flat.view(torch.uint8)


def _assert_same(zyx: torch.Tensor, cpu: torch.Tensor) -> None:
    """``zyx`` (a zyx tensor) has ``cpu``'s dtype, shape, strides, offset and exact bits."""
    assert zyx.device.type == "zyx"
    assert zyx.dtype == cpu.dtype
    assert (tuple(zyx.shape), zyx.stride(), zyx.storage_offset()) == \
        (tuple(cpu.shape), cpu.stride(), cpu.storage_offset())
    assert torch.equal(_bytes(zyx.cpu()), _bytes(cpu))


def _random(dtype: torch.dtype, shape, seed: int = 0, finite: bool = False, bits01: bool = False):
    """A CPU tensor of ``dtype`` whose bytes are random: any bit pattern (NaNs with payloads,
    subnormals, infinities); ``finite``: none that is not a finite float; ``bits01``: only 0 and 1
    bytes (the bytes a bool holds)."""
    gen = torch.Generator().manual_seed(seed)
    nbytes = torch.empty(0, dtype=dtype).element_size() * int(torch.Size(shape).numel())
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)
    if bits01:
        raw = raw % 2
    t = raw.view(dtype).reshape(shape)
    if finite and dtype.is_floating_point:
        t = torch.where(t.isfinite(), t, torch.zeros((), dtype=dtype))
    return t


# ------------------------------------------------------------------ values and bit patterns

def _bits(values, dtype):
    """A CPU tensor of ``dtype`` holding the integer bit patterns ``values``."""
    sized = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    integer = sized[torch.empty(0, dtype=dtype).element_size()]
    return torch.tensor(values, dtype=torch.int64).to(integer).view(dtype)


# Bit patterns that arithmetic would not keep: signalling and payload NaNs, negative zero,
# infinities, subnormals, the extremes.
PATTERNS = {
    torch.float32: [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00001, 0xFFC12345,
                    0x00000001, 0x807FFFFF, 0x3F800000, 0x7F7FFFFF, 0x12345678],
    torch.float16: [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7C01, 0x7E01, 0xFE55, 0x0001, 0x83FF, 0x3C00, 0x7BFF,
                    0x1234],
    torch.bfloat16: [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7F81, 0x7FC1, 0xFFD5, 0x0001, 0x807F, 0x3F80, 0x7F7F,
                     0x1234],
    torch.float64: [0x0, 0x8000000000000000, 0x7FF0000000000000, 0x7FF0000000000001, 0x7FF8000000000123,
                    0x0000000000000001, 0x3FF0000000000000, 0x123456789ABCDEF0],
}

# The pairs the issue names, then every dtype to every other (below, on one geometry).
NAMED_PAIRS = [(torch.float32, torch.int32), (torch.int32, torch.float32), (torch.float32, torch.bfloat16),
               (torch.float32, torch.int16), (torch.float32, torch.uint8), (torch.int64, torch.float32),
               (torch.bool, torch.uint8), (torch.uint8, torch.bool), (torch.float16, torch.int16),
               (torch.int16, torch.float16)]


@pytest.mark.parametrize("src,dst", NAMED_PAIRS, ids=lambda d: str(d).removeprefix("torch."))
def test_named_pairs_keep_every_bit(src, dst):
    """Special bit patterns survive a dtype view, read directly and through a kernel (a copy of
    the view, an op on it): NaN payloads and signs are neither quieted nor canonicalized."""
    if src in PATTERNS:
        cpu = _bits(PATTERNS[src] * 2, src).reshape(4, -1)
    elif dst in PATTERNS:
        cpu = _bits(PATTERNS[dst] * 2, dst).reshape(4, -1).view(src)
    else:
        cpu = _random(src, (4, 8), bits01=torch.bool in (src, dst))
    z = cpu.to("zyx")
    _assert_same(z.view(dst), cpu.view(dst))
    _assert_same(z.view(dst).clone(), cpu.view(dst).clone())  # through a kernel
    _assert_same(torch.cat([z[:1], z[1:]]).view(dst), cpu.view(dst))  # a base not computed yet
    _assert_same(z[1:].view(dst).t().contiguous(), cpu[1:].view(dst).t().contiguous())
    if not dst.is_floating_point and dst != torch.bool:
        _assert_same(z.view(dst) + 1, cpu.view(dst) + 1)
        _assert_same((z.view(dst) ^ 0x55).view(src), (cpu.view(dst) ^ 0x55).view(src))


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_pair(src):
    """Every dtype viewed as every other, on a contiguous tensor and on a row slice (an offset):
    the view's metadata and bytes, its copy through a kernel (floats as read back: a kernel's
    NaN is only compared as NaN), and a view back to ``src``."""
    for dst in DTYPES:
        boolish = torch.bool in (src, dst)
        cpu = _random(src, (3, 16), seed=DTYPES.index(dst), bits01=boolish)
        z = cpu.to("zyx")
        for pick in (lambda t: t, lambda t: t[1:]):
            view, expected = pick(z).view(dst), pick(cpu).view(dst)
            _assert_same(view, expected)
            _assert_same(view.view(src), pick(cpu))
            copied = view.clone().cpu()
            torch.testing.assert_close(copied, expected.clone(), rtol=0, atol=0, equal_nan=True)


def test_lazy_and_realized_bases():
    """A view of a value not computed yet and of one already in a buffer read the same bytes."""
    cpu = torch.linspace(-3, 3, 24).reshape(4, 6)
    z = cpu.to("zyx")
    lazy = z * 2 - 1
    _assert_same(lazy.view(torch.int32), (cpu * 2 - 1).view(torch.int32))
    _assert_same(lazy.view(torch.int16)[:, 3:], (cpu * 2 - 1).view(torch.int16)[:, 3:])
    torch_zyx.synchronize()
    _assert_same(lazy.view(torch.float64), (cpu * 2 - 1).view(torch.float64))


def test_zero_and_full_constants():
    """Factories that hold one constant (zeros, full) viewed as integers."""
    for dtype, value in [(torch.float32, -1.5), (torch.float16, 65504.0), (torch.bfloat16, -0.0)]:
        cpu = torch.full((3, 4), value, dtype=dtype)
        z = torch.full((3, 4), value, dtype=dtype, device="zyx")
        for dst in (torch.int16, torch.uint8, torch.int64, torch.int32):
            try:
                expected = cpu.view(dst)
            except RuntimeError:
                continue
            _assert_same(z.view(dst), expected)
            _assert_same(z.view(dst) * 1, expected * 1)


# ------------------------------------------------------------------ shapes, strides, offsets

GEOMETRIES = {
    "contiguous": lambda t: t,
    "rows": lambda t: t[1:3],
    "column_block": lambda t: t[:, 4:12],
    "every_other_row": lambda t: t[::2],
    "transposed_leading": lambda t: t.reshape(2, 2, 16).transpose(0, 1),
    "expanded": lambda t: t[0].expand(3, 16),
    "middle_of_3d": lambda t: t.reshape(4, 2, 8)[:, 1],
    "unsqueezed": lambda t: t.unsqueeze(1)[:, :, 8:],
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("dst", [torch.int32, torch.int64, torch.bfloat16, torch.uint8, torch.float64],
                         ids=lambda d: str(d).removeprefix("torch."))
def test_geometry(geometry, dst):
    """Non-contiguous float32 tensors: the view's shape, strides and offset as ATen computes them
    (last axis grown or shrunk, the other strides and the offset scaled), and its bytes."""
    pick = GEOMETRIES[geometry]
    cpu = _random(torch.float32, (4, 16), finite=True)
    z = cpu.to("zyx")
    expected = pick(cpu).view(dst)
    view = pick(z).view(dst)
    _assert_same(view, expected)
    _assert_same(view.view(torch.float32), pick(cpu))


def test_views_of_views():
    """A dtype view of a dtype view (through other views between) reads and aliases the one
    memory; viewing back to the base's dtype is a view of the base itself."""
    cpu = _random(torch.float32, (4, 8), finite=True)
    z = cpu.to("zyx")
    chain = [lambda t: t.view(torch.int16), lambda t: t[:, 4:], lambda t: t.view(torch.uint8),
             lambda t: t.t(), lambda t: t.t().view(torch.int64), lambda t: t.view(torch.bfloat16),
             lambda t: t[1:].view(torch.float32)]
    a, b = cpu, z
    for step in chain:
        a, b = step(a), step(b)
        _assert_same(b, a)
    a.fill_(2.5)
    b.fill_(2.5)
    _assert_same(z, cpu)
    assert z.view(torch.int32).view(torch.float32).is_set_to(z)


# ------------------------------------------------------------------ aliasing

def _both(fn, src=torch.float32, shape=(4, 8)):
    """Run ``fn`` on a CPU tensor and its zyx copy; compare the base and what ``fn`` returns."""
    cpu = _random(src, shape, finite=True)
    z = cpu.to("zyx")
    out_cpu, out_zyx = fn(cpu), fn(z)
    _assert_same(z, cpu)
    for got, expected in zip(out_zyx if isinstance(out_zyx, tuple) else (out_zyx,),
                             out_cpu if isinstance(out_cpu, tuple) else (out_cpu,)):
        _assert_same(got, expected)


def _sign_flip(x):
    # The float32 sign bit flipped through an integer view: x becomes -x.
    x.view(torch.int32).bitwise_xor_(-(2 ** 31))
    return x.view(torch.int32)


def _exponent_bump(x):
    # Adding 1 << 23 to the bits doubles each normal float.
    v = x[1:3].view(torch.int32)
    v.add_(1 << 23)
    return v


def _byte_write(x):
    v = x.view(torch.uint8)
    v[:, 3] = 0x40  # the top byte of the first float of each row
    v[2, ::4] = 0
    return v


def _wide_write(x):
    v = x.view(torch.int64)
    v[1:, 1] = 0x3F8000003F800000  # two floats 1.0
    return v.t()


def _half_word_write(x):
    v = x[:, 2:6].view(torch.bfloat16)
    v.copy_(torch.full(v.shape, -2.0, dtype=torch.bfloat16, device=v.device))
    return v


def _base_write_seen(x):
    v, w = x.view(torch.int16), x[:, ::2].view(torch.int32)
    x[1].mul_(2)
    x[:, 0] = -1.0
    return v, w


def _captured_before_write(x):
    v = x.view(torch.int32)
    before = v + 0  # captures the value as it is now
    x.add_(1)
    return before, v


def _inplace_views_both_ways(x):
    v = x.view(torch.int32)
    v.mul_(3)
    x.neg_()
    v[0] = 7
    return v


def _out_into_view(x):
    v = x.view(torch.int32)
    torch.add(v[0], 5, out=v[1])
    torch.bitwise_and(v[2], 0x0F0F0F0F, out=v[3])
    return v


def _partial_trailing_element(x):
    # 7 halves viewed as floats: the last half is part of no float and must stay as it is.
    h = x.view(torch.float16).reshape(-1)[:7]
    v = h[:6].view(torch.float32)
    v.fill_(3.0)
    return v, h


def _resize_view(x):
    v = x.view(torch.int16).reshape(-1)[:10].view(torch.int32)
    v.resize_(40)  # more than the base holds: the shared memory grows (new elements undefined)
    v[30:] = 9
    v[:2] = -1
    return v[:5], v[30:]


ALIASING = {
    "sign_flip": _sign_flip,
    "exponent_bump": _exponent_bump,
    "byte_write": _byte_write,
    "wide_write": _wide_write,
    "half_word_write": _half_word_write,
    "base_write_seen": _base_write_seen,
    "captured_before_write": _captured_before_write,
    "inplace_views_both_ways": _inplace_views_both_ways,
    "out_into_view": _out_into_view,
    "partial_trailing_element": _partial_trailing_element,
}


@pytest.mark.parametrize("name", list(ALIASING), ids=str)
def test_aliasing(name):
    """Writes through a dtype view reach the base and writes to the base reach the view, as on
    CPU; a value computed before a write keeps what it read."""
    _both(ALIASING[name])


def test_resize_grows_shared_memory():
    cpu = torch.arange(8, dtype=torch.float32)
    z = cpu.to("zyx")
    for got, expected in zip(_resize_view(z), _resize_view(cpu)):
        _assert_same(got, expected)
    _assert_same(z, cpu)


@pytest.mark.parametrize("src,dst", [(torch.int64, torch.int8), (torch.int16, torch.float64),
                                     (torch.bool, torch.int8), (torch.float16, torch.bfloat16)],
                         ids=lambda d: str(d).removeprefix("torch."))
def test_write_through_every_size(src, dst):
    """A region written through a view of a smaller, larger and equal element size."""
    boolish = torch.bool in (src, dst)
    cpu = _random(src, (4, 16), seed=3, bits01=boolish)
    z = cpu.to("zyx")
    v_cpu, v_zyx = cpu[1:].view(dst), z[1:].view(dst)
    region = (slice(0, 2), slice(1, None, 2))
    values = _random(dst, v_cpu[region].shape, seed=4, bits01=boolish)
    v_cpu[region] = values
    v_zyx[region] = values.to("zyx")
    _assert_same(z, cpu)
    _assert_same(v_zyx, v_cpu)


def test_inference_mode():
    cpu = torch.arange(6, dtype=torch.float32)
    z = cpu.to("zyx")
    with torch.inference_mode():
        for x in (cpu, z):
            x.view(torch.int32)[0] = 0x3F800000
    _assert_same(z, cpu)


def test_save_and_load():
    """A dtype view saves as a view of its base's bytes and loads back as one view."""
    z = torch.arange(8, dtype=torch.float32, device="zyx")
    with pytest.raises(RuntimeError, match="view the same data as different types"):
        torch.save([z, z.view(torch.int32)], io.BytesIO())  # (as CPU torch refuses)
    buffer = io.BytesIO()
    torch.save(z[2:].view(torch.int16), buffer)
    expected = torch.arange(8, dtype=torch.float32)[2:].view(torch.int16)
    buffer.seek(0)
    _assert_same(torch.load(buffer), expected)  # (onto zyx, where it was saved from)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu")
    assert torch.equal(_bytes(loaded), _bytes(expected))
    assert (loaded.stride(), loaded.storage_offset()) == (expected.stride(), expected.storage_offset())
    if not device_guard.native_hooks():
        pytest.skip("map_location='zyx' needs zyx's C++ hooks (no C++ compiler, or ZYX_NATIVE=0)")
    buffer.seek(0)
    _assert_same(torch.load(buffer, map_location="zyx"), expected)


# ------------------------------------------------------------------ checks and errors

def _cpu_error(fn, x):
    """The exception CPU torch raises for ``fn(x)`` (it must raise)."""
    with pytest.raises(Exception) as caught:
        fn(x)
    return caught.value


ERRORS = {
    "size_not_divisible": (lambda x: x[:, :3].view(torch.float64), torch.float32),
    "bfloat16_as_float_odd": (lambda x: x[:, :3].view(torch.float32), torch.bfloat16),
    "zero_dim": (lambda x: x[0, 0].view(torch.int16), torch.float32),
    "zero_dim_larger": (lambda x: x[0, 0].view(torch.int64), torch.float32),
    "last_stride": (lambda x: x.t().view(torch.int16), torch.float32),
    "last_stride_larger": (lambda x: x[:, ::2].view(torch.int64), torch.float32),
    "offset": (lambda x: x.reshape(-1)[1:7].view(torch.int64), torch.float32),
    "other_stride": (lambda x: x.reshape(-1).as_strided((2, 2), (3, 1)).view(torch.int64), torch.float32),
    "expanded_last": (lambda x: x[:, :1].expand(4, 4).view(torch.float64), torch.float32),
    "bytes_as_float": (lambda x: x[:, :3].view(torch.float32), torch.uint8),
}


@pytest.mark.parametrize("name", list(ERRORS), ids=str)
def test_errors_match_cpu(name):
    """ATen's checks, with its exception types and messages."""
    fn, dtype = ERRORS[name]
    cpu = _random(dtype, (4, 6))
    expected = _cpu_error(fn, cpu)
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        fn(cpu.to("zyx"))


def test_error_message_of_the_issue():
    """The message the issue names, as CPU torch 2.13 words it (viewing 2-byte elements as 4-byte
    ones needs an even last axis; the other way round needs nothing)."""
    message = ("self.size(-1) must be divisible by 2 to view BFloat16 as Float (different element sizes), "
               "but got 3")
    for device in ("cpu", "zyx"):
        with pytest.raises(RuntimeError, match=re.escape(message)):
            torch.zeros(2, 3, dtype=torch.bfloat16, device=device).view(torch.float32)
        assert torch.zeros(2, 3, device=device).view(torch.bfloat16).shape == (2, 6)


# name -> (the write, whether ATen refuses it)
OVERLAPS = {
    "partial_copy": (lambda x: x.view(torch.int32)[1:].copy_(x.view(torch.int32)[:-1]), True),
    "halves_into_floats": (lambda x: torch.add(x.view(torch.int16).reshape(-1)[:8], 1,
                                               out=x.reshape(-1).view(torch.int16)[4:12]), True),
    "bytes_over_a_float": (lambda x: x.reshape(-1)[:2].copy_(x.view(torch.uint8).reshape(-1)[4:6]), True),
    "full_allowed": (lambda x: x.view(torch.int32).add_(x.view(torch.int32)), False),
    "same_bytes_other_dtype": (lambda x: x.view(torch.int32).copy_(x), False),
}


@pytest.mark.parametrize("name", list(OVERLAPS), ids=str)
def test_overlap_rules_see_shared_memory(name):
    """ATen's memory-overlap checks treat a dtype view and its base as one memory (byte ranges,
    as ATen compares them): the same refusals, the same writes where allowed."""
    fn, refused = OVERLAPS[name]
    cpu = _random(torch.float32, (4, 8), finite=True)
    z = cpu.to("zyx")
    if refused:
        expected = _cpu_error(fn, cpu)
        with pytest.raises(type(expected), match=re.escape(str(expected))):
            fn(z)
    else:
        fn(cpu)
        fn(z)
    _assert_same(z, cpu)


def test_is_set_to_across_dtypes():
    for x in (torch.zeros(4), torch.zeros(4, device="zyx")):
        assert x.is_set_to(x.view(torch.int32))
        assert not x.is_set_to(x.view(torch.uint8))


def test_views_copy_nothing(counters):
    """A dtype view is metadata: reading it back copies the base's bytes, no kernel runs."""
    z = torch.arange(16, dtype=torch.float32, device="zyx")
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    for dst in DTYPES:
        z.view(dst).cpu()
        z[4:].view(dst).cpu()
    assert counters()["kernels_launched"] == 0
    assert counters()["cpu_fallbacks"] == 0


def test_write_through_view_is_one_region_write(counters):
    """A write through a view of an element size at least the base's is a region write of the
    base (as the same write through a base view), not a bitcast of the whole storage and back."""
    z = torch.arange(64, dtype=torch.float32, device="zyx")
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    z[5:9] = 3.0
    z.cpu()
    plain = counters()["kernels_launched"]
    for dst in (torch.int32, torch.int64):
        torch_zyx.reset_counters()
        z.view(dst)[5:7] = 3
        z.cpu()
        assert counters()["kernels_launched"] == plain
