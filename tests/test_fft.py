"""torch.fft, torch.stft and torch.istft on zyx against CPU torch: lengths that are powers of two,
odd, prime (7, 97 as a dense stage, 1009 through Bluestein) and mixed (12, 360); 1-d, 2-d and
n-d transforms over any dims; every norm; ``n``/``s`` padding and trimming; real and complex
inputs in float32 and float64 (results complex64 / complex128 as CPU torch gives); round trips;
short-time transforms with windows; gradients through autograd. With the CPU fallback off, so
every op is a zyx lowering (ops/linalg/fft.py). Tolerances grow with log(n), as an FFT's
rounding error does."""

import math

import pytest
import torch
from conftest import assert_close

import torch_zyx
from torch_zyx.ops.linalg.fft import radices

pytestmark = pytest.mark.usefixtures("no_fallback")

REAL = [torch.float32, torch.float64]
COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
LENGTHS = [1, 2, 7, 8, 12, 16, 33, 97, 360, 1009, 1024]
NORMS = [None, "backward", "ortho", "forward"]


def tol(dtype, n, scale=1.0):
    """Relative/absolute tolerance for a transform of length ``n`` whose results are of size up
    to ``scale`` (an FFT's error grows with log(n) relative to its largest values)."""
    eps = 1.2e-7 if dtype in (torch.float32, torch.complex64) else 2.3e-16
    t = 8 * eps * max(math.log2(max(n, 2)), 1.0)
    return {"rtol": t, "atol": t * scale}


def make(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        part = torch.float32 if dtype == torch.complex64 else torch.float64
        return torch.complex(torch.randn(shape, generator=gen, dtype=part),
                             torch.randn(shape, generator=gen, dtype=part))
    return torch.randn(shape, generator=gen, dtype=dtype)


def close(got, expected, size):
    """``got`` (zyx) against ``expected`` (CPU) for a transform of length ``size``."""
    scale = expected.abs().max().item() if expected.numel() else 1.0
    assert_close(got, expected, **tol(expected.dtype, size, scale))


def check(fn, x, size, **kwargs):
    """``fn(x, **kwargs)`` on zyx against CPU torch, ``size`` the transform's length."""
    expected = fn(x, **kwargs)
    got = fn(x.to("zyx"), **kwargs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    close(got, expected, size)


def test_plans():
    assert radices(8) == [8] and radices(32) == [32]
    assert math.prod(radices(360)) == 360 and max(radices(360)) <= 16
    assert radices(97 * 4) == [97, 4]
    assert radices(1009) is None and radices(2 * 1009) is None


# ------------------------------------------------------------------------------ 1-d


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("n", LENGTHS)
def test_fft_1d(dtype, n):
    x = make((3, n), dtype)
    c = make((3, n), COMPLEX_OF[dtype], seed=1)
    check(torch.fft.fft, x, n)
    check(torch.fft.fft, c, n)
    check(torch.fft.ifft, c, n)
    check(torch.fft.rfft, x, n)
    check(torch.fft.irfft, torch.fft.rfft(x), n, n=n)
    check(torch.fft.hfft, c[:, : n // 2 + 1], n, n=n)
    check(torch.fft.ihfft, x, n)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [12, 97, 1009])
def test_norms(norm, n):
    x = make((2, n), torch.float64)
    c = make((2, n), torch.complex128, seed=2)
    for fn in (torch.fft.fft, torch.fft.ifft):
        check(fn, c, n, norm=norm)
    check(torch.fft.rfft, x, n, norm=norm)
    check(torch.fft.irfft, torch.fft.rfft(x), n, n=n, norm=norm)
    check(torch.fft.hfft, c[:, : n // 2 + 1], n, n=n, norm=norm)
    check(torch.fft.ihfft, x, n, norm=norm)


@pytest.mark.parametrize("dtype", REAL)
def test_padding_trimming_and_dims(dtype):
    x = make((4, 10, 6), dtype)
    c = make((4, 10, 6), COMPLEX_OF[dtype])
    for n in (4, 10, 16, 17):
        check(torch.fft.fft, c, n, n=n, dim=1)
        check(torch.fft.rfft, x, n, n=n, dim=0)
        check(torch.fft.irfft, c, n, n=n, dim=1)
    check(torch.fft.fft, c, 6, dim=-1)
    check(torch.fft.fft, c.transpose(0, 2), 10, dim=1)  # (a strided input)
    check(torch.fft.fft, c[:, ::2], 5, dim=1)
    check(torch.fft.fft, c.conj(), 10, dim=1)  # (the conjugate bit)
    check(torch.fft.fft, torch.arange(12), 12)  # (integers promote to float32)


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("n", [7, 12, 97, 360, 1009])
def test_round_trips(dtype, n):
    x = make((2, n), dtype).to("zyx")
    close(torch.fft.irfft(torch.fft.rfft(x), n=n), x.cpu(), n)
    c = make((2, n), COMPLEX_OF[dtype]).to("zyx")
    close(torch.fft.ifft(torch.fft.fft(c)), c.cpu(), n)


# ------------------------------------------------------------------------------ 2-d and n-d


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("shape", [(8, 8), (7, 12), (5, 97), (3, 4, 6)])
def test_fft_nd(dtype, shape):
    x = make(shape, dtype)
    c = make(shape, COMPLEX_OF[dtype], seed=3)
    n = math.prod(shape)
    for fn in (torch.fft.fft2, torch.fft.ifft2, torch.fft.fftn, torch.fft.ifftn):
        check(fn, c, n)
        check(fn, x, n)
    for fn in (torch.fft.rfft2, torch.fft.rfftn, torch.fft.ihfft2, torch.fft.ihfftn):
        check(fn, x, n)
    last = shape[-1]
    check(torch.fft.irfftn, torch.fft.rfftn(x), n, s=shape[-2:], dim=(-2, -1))
    check(torch.fft.irfft2, c, n, s=(shape[-2], 2 * last - 2))
    check(torch.fft.hfft2, c, n)
    check(torch.fft.hfftn, c, n, s=(3, 5), dim=(0, -1))
    check(torch.fft.fftn, c, n, s=(4, 9), dim=(0, -1), norm="ortho")
    check(torch.fft.rfftn, x, n, dim=(0,), norm="forward")


def test_shift_and_freqs():
    x = make((6, 9), torch.float32)
    check(torch.fft.fftshift, x, 9)
    check(torch.fft.ifftshift, x, 9, dim=1)
    assert_close(torch.fft.fftfreq(10, device="zyx"), torch.fft.fftfreq(10))
    assert_close(torch.fft.rfftfreq(9, d=0.5, device="zyx"), torch.fft.rfftfreq(9, d=0.5))


def test_half_is_refused_as_cpu_torch():
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(RuntimeError, match="Unsupported dtype"):
            torch.fft.fft(torch.randn(8, dtype=dtype))
        with pytest.raises(RuntimeError, match="Unsupported dtype"):
            torch.fft.fft(torch.randn(8, dtype=dtype).to("zyx"))


def test_one_kernel_per_stage():
    x = make((16, 1024), torch.complex64).to("zyx")
    torch_zyx.synchronize()
    torch_zyx.reset_counters()
    torch.fft.fft(x).cpu()
    assert torch_zyx.counters()["kernels_launched"] == len(radices(1024))


# ------------------------------------------------------------------------------ stft / istft


@pytest.mark.filterwarnings("ignore:A window was not provided")
@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("n_fft,hop,window", [(16, 4, "hann"), (12, 3, None), (64, 16, "hamming"),
                                              (7, 2, "hann")])
def test_stft_istft(dtype, n_fft, hop, window):
    signal = make((2, 200), dtype)
    win = None if window is None else getattr(torch, f"{window}_window")(n_fft, dtype=dtype)

    def spec(s, w):
        return torch.stft(s, n_fft, hop_length=hop, window=w, return_complex=True)

    expected = spec(signal, win)
    got = spec(signal.to("zyx"), None if win is None else win.to("zyx"))
    close(got, expected, n_fft)
    if window is not None:  # (istft needs a window that satisfies the overlap-add condition)
        back = torch.istft(got, n_fft, hop_length=hop, window=win.to("zyx"), length=200)
        close(back, torch.istft(expected, n_fft, hop_length=hop, window=win, length=200), n_fft)
        close(back, signal, n_fft)
    onesided = torch.stft(signal, n_fft, hop_length=hop, window=win, return_complex=True,
                          onesided=False, center=False, normalized=True)
    got = torch.stft(signal.to("zyx"), n_fft, hop_length=hop, window=None if win is None else win.to("zyx"),
                     return_complex=True, onesided=False, center=False, normalized=True)
    close(got, onesided, n_fft)


# ------------------------------------------------------------------------------ gradients


def grads(fn, x, weight_seed=5):
    """d(sum(Re(w * fn(x))))/dx on zyx and on the CPU, for a random complex weight w."""
    results = []
    for device in ("cpu", "zyx"):
        leaf = x.detach().to(device).requires_grad_(True)
        y = fn(leaf)
        w = make(y.shape, y.dtype, seed=weight_seed).to(device)
        (y * w).real.sum().backward() if y.is_complex() else (y * w).sum().backward()
        results.append(leaf.grad)
    return results


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("n", [8, 12, 97, 1009])
def test_gradients(dtype, n):
    x = make((2, n), dtype)
    c = make((2, n), COMPLEX_OF[dtype], seed=4)
    cases = [(torch.fft.fft, x), (torch.fft.fft, c), (torch.fft.ifft, c), (torch.fft.rfft, x),
             (lambda t: torch.fft.irfft(t, n=n), c[:, : n // 2 + 1]),
             (lambda t: torch.fft.fft2(t, norm="ortho"), c), (torch.fft.rfft2, x),
             (lambda t: torch.fft.irfft2(t, s=(2, n)), c[:, : n // 2 + 1]), (torch.fft.hfft, c),
             (torch.fft.ihfft, x)]
    for fn, inp in cases:
        expected, got = grads(fn, inp)
        close(got, expected, n)


def test_stft_gradient():
    signal = make((100,), torch.float64)
    win = torch.hann_window(16, dtype=torch.float64)

    def fn(s):
        return torch.stft(s, 16, hop_length=4, window=win.to(s.device), return_complex=True)

    expected, got = grads(fn, signal)
    close(got, expected, 16)
