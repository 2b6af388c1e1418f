"""Random programs on zyx against CPU torch, generated and shrunk by hypothesis.

A program is a list of steps over a growing list of tensors: inputs of random shapes and dtypes,
elementwise ops with broadcasting and type promotion, reductions, scans, matmuls, views (slices
with steps, permutes, transposes, expands, flips, reshapes, ``as_strided``), pads, indexing
and scatters, writes in place through views, and realizations at random points. Each step is
checked while the program is generated on meta tensors (an invalid step is never drawn). The
program runs on zyx:0 and on CPU torch; every tensor must agree in shape, dtype, strides (all
of them, size-1 dimensions' too) and values (strides: for inputs, views and pointwise results,
see ``_ITERATOR``), and so must aliasing: at the end one tensor is written in place and every
tensor compared again (a view zyx did not share, or shared where torch copies, shows there). A
step that raises on CPU torch must raise the same exception type on zyx. A failure shrinks to a
minimal program, printed as a standalone script.

``make test`` runs ``ZYX_FUZZ_EXAMPLES`` (default 200) programs per backend pass, derandomized
(the same programs every run); ``make fuzz`` runs 10,000 with a random seed.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (pip install -e '.[test]')")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("ZYX_FUZZ_EXAMPLES", "200"))
RANDOM = os.environ.get("ZYX_FUZZ_RANDOM", "") not in ("", "0")
MAX_STEPS = 10
MAX_TENSORS = 8

# Each op: (function of (tensors, *args) -> a new tensor or None (in place), the source of the
# step for the reproducer: a format over ``t`` (the tensor names) and the args).
OPS = {
    "unary": (lambda t, i, name: _UNARY[name](t[i]), "{name}({t[i]})"),
    "scalar": (lambda t, i, name, c: _BINARY[name](t[i], c), "{name}({t[i]}, {c!r})"),
    "binary": (lambda t, i, j, name: _BINARY[name](t[i], t[j]), "{name}({t[i]}, {t[j]})"),
    "where": (lambda t, i, j, k: torch.where(t[i] > 0, t[j], t[k]), "torch.where({t[i]} > 0, {t[j]}, {t[k]})"),
    "reduce": (lambda t, i, name, dim, keep: getattr(t[i], name)(dim, keepdim=keep) if dim is not None
               else getattr(t[i], name)(), "{t[i]}.{name}({dim!r}, keepdim={keep!r})"),
    "cumsum": (lambda t, i, dim: t[i].cumsum(dim), "{t[i]}.cumsum({dim})"),
    "matmul": (lambda t, i, j: t[i] @ t[j], "{t[i]} @ {t[j]}"),
    "slice": (lambda t, i, dim, lo, hi, step: t[i][(slice(None),) * dim + (slice(lo, hi, step),)],
              "{t[i]}[(slice(None),) * {dim} + (slice({lo}, {hi}, {step}),)]"),
    "permute": (lambda t, i, perm: t[i].permute(perm), "{t[i]}.permute({perm!r})"),
    "transpose": (lambda t, i, a, b: t[i].transpose(a, b), "{t[i]}.transpose({a}, {b})"),
    "expand": (lambda t, i, shape: t[i].expand(shape), "{t[i]}.expand({shape!r})"),
    "unsqueeze": (lambda t, i, dim: t[i].unsqueeze(dim), "{t[i]}.unsqueeze({dim})"),
    "flip": (lambda t, i, dims: t[i].flip(dims), "{t[i]}.flip({dims!r})"),
    "reshape": (lambda t, i, shape: t[i].reshape(shape), "{t[i]}.reshape({shape!r})"),
    "as_strided": (lambda t, i, size, stride, offset: t[i].as_strided(size, stride, offset),
                   "{t[i]}.as_strided({size!r}, {stride!r}, {offset})"),
    "pad": (lambda t, i, pads, value: F.pad(t[i], pads, value=value), "F.pad({t[i]}, {pads!r}, value={value!r})"),
    "index_select": (lambda t, i, dim, index: t[i].index_select(dim, torch.tensor(index, device=t[i].device)),
                     "{t[i]}.index_select({dim}, torch.tensor({index!r}, device=dev))"),
    "scatter_add": (lambda t, i, j, dim, index: t[i].scatter_add(dim, torch.tensor(index, device=t[i].device),
                                                                 t[j]),
                    "{t[i]}.scatter_add({dim}, torch.tensor({index!r}, device=dev), {t[j]})"),
    "clone": (lambda t, i: t[i].clone(), "{t[i]}.clone()"),
    "add_": (lambda t, i, c: t[i].add_(c), "{t[i]}.add_({c!r})"),
    "mul_": (lambda t, i, c: t[i].mul_(c), "{t[i]}.mul_({c!r})"),
    "copy_": (lambda t, i, j: t[i].copy_(t[j]), "{t[i]}.copy_({t[j]})"),
    "fill_": (lambda t, i, c: t[i].fill_(c), "{t[i]}.fill_({c!r})"),
    "sync": (lambda t: _sync(t), "sync()"),
    "read": (lambda t, i: t[i].cpu(), "{t[i]}.cpu()"),
}
_IN_PLACE = {"add_", "mul_", "copy_", "fill_", "sync", "read"}
# Ops whose result is a view (or, for reshape, a view or a copy decided by the strides alone): its
# strides follow from its source's.
_VIEWS = {"slice", "permute", "transpose", "expand", "unsqueeze", "as_strided", "reshape"}
# Pointwise ops (and clone): ATen's TensorIterator lays their results out after their inputs
# (``torch.abs(t.t())`` has strides (1, n)), and so does zyx (ops/layout.py); the number of tensor
# operands leading their arguments. Strides are compared for the inputs, their views and the
# results of these ops on such tensors; other computed results (reductions, scans, pads, gathers)
# are laid out by each op's own rule, compared by value only.
_ITERATOR = {"unary": 1, "scalar": 1, "binary": 2, "where": 3, "clone": 1}
_UNARY = {"torch.neg": torch.neg, "torch.abs": torch.abs, "torch.exp": torch.exp, "torch.tanh": torch.tanh,
          "torch.sigmoid": torch.sigmoid, "torch.relu": torch.relu, "torch.sin": torch.sin,
          "torch.square": torch.square}
_FLOAT_ONLY = {"torch.exp", "torch.tanh", "torch.sigmoid", "torch.sin"}
_BINARY = {"torch.add": torch.add, "torch.sub": torch.sub, "torch.mul": torch.mul,
           "torch.maximum": torch.maximum, "torch.minimum": torch.minimum}


def _sync(tensors):
    if any(t.device.type == "zyx" for t in tensors):
        torch.zyx.synchronize()


def _inputs(spec, device):
    """The program's input tensors: (shape, dtype name) each, from one seeded generator."""
    gen = torch.Generator().manual_seed(len(spec))
    out = []
    for shape, dtype in spec:
        data = torch.randn(shape, generator=gen)
        out.append((data * 4).round().to(torch.int64) if dtype == "int64" else data)
    return [t.to(device) for t in out]


def run(program, device):
    """The tensors of ``program`` ((input spec, steps)) run on ``device``, and the first error a
    step raised (its step index and exception type; the program stops there) or None."""
    spec, steps = program
    tensors = _inputs(spec, device)
    for n, (op, args) in enumerate(steps):
        try:
            result = OPS[op][0](tensors, *args)
            if op != "read":  # (a read realizes; a lazy error shows there, as on torch's side)
                _sync(tensors)
        except Exception as exc:  # noqa: BLE001  (CPU torch's error: zyx must raise its type)
            return tensors, (n, type(exc).__name__)
        if op not in _IN_PLACE:
            tensors.append(result)
    return tensors, None


def reproducer(program) -> str:
    """``program`` as a standalone script that compares zyx with CPU torch."""
    spec, steps = program
    lines = ["import torch", "import torch.nn.functional as F", "import torch_zyx", "", "def program(dev):",
             "    def sync():", "        if dev == 'zyx':", "            torch.zyx.synchronize()",
             f"    gen = torch.Generator().manual_seed({len(spec)})"]
    names = []
    for shape, dtype in spec:
        data = f"torch.randn({shape!r}, generator=gen)"
        lines.append(f"    t{len(names)} = ({f'({data} * 4).round().to(torch.int64)' if dtype == 'int64' else data})"
                     f".to(dev)")
        names.append(f"t{len(names)}")
    for op, args in steps:
        fmt = OPS[op][1]
        keys = OPS[op][0].__code__.co_varnames[1:1 + len(args)]
        values = dict(zip(keys, args))
        text = fmt.format(t=_Names(names, values), **values)
        if op in _IN_PLACE:
            lines.append(f"    {text}")
        else:
            lines.append(f"    t{len(names)} = {text}")
            names.append(f"t{len(names)}")
    lines += [f"    return [{', '.join(names)}]", "", "for z, c in zip(program('zyx'), program('cpu')):",
              "    torch.testing.assert_close(z.cpu(), c, equal_nan=True)",
              "    assert z.stride() == c.stride() or not c.numel()"]
    return "\n".join(lines)


class _Names:
    """``{t[i]}`` in a step's format (str.format looks the key "i" up): the name of the tensor
    the step's argument ``i`` (or ``j``, ``k``) refers to."""

    def __init__(self, names: list[str], values: dict):
        self.names, self.values = names, values

    def __getitem__(self, key: str) -> str:
        return self.names[self.values[key]]


# ---------------------------------------------------------------------------------- strategies

_SMALL = st.integers(1, 5)


@st.composite
def _shape(draw, max_dims=4):
    return tuple(draw(st.lists(_SMALL, min_size=0, max_size=max_dims)))


def _dims(t):
    return max(t.dim(), 1)


@st.composite
def _step(draw, meta):
    """One step valid on ``meta`` (the program so far, on meta tensors): (op, args)."""
    n = len(meta)
    pick = st.integers(0, n - 1)
    i = draw(pick)
    t = meta[i]
    is_float = t.dtype.is_floating_point
    const = st.sampled_from([-2.5, -1.0, 0.5, 2.0, 3.0])
    op = draw(st.sampled_from(sorted(OPS)))
    if op == "unary":
        names = sorted(_UNARY) if is_float else sorted(set(_UNARY) - _FLOAT_ONLY)
        return op, (i, draw(st.sampled_from(names)))
    if op == "scalar":
        return op, (i, draw(st.sampled_from(sorted(_BINARY))), draw(const))
    if op in ("binary", "matmul", "copy_", "scatter_add"):
        j = draw(pick)
        if op == "binary":
            return op, (i, j, draw(st.sampled_from(sorted(_BINARY))))
        if op == "scatter_add":
            if t.dim() == 0 or meta[j].dim() != t.dim() or meta[j].dtype != t.dtype:
                return None
            dim = draw(st.integers(0, t.dim() - 1))
            if t.shape[dim] == 0:
                return None
            shape = [min(a, b) for a, b in zip(t.shape, meta[j].shape)]
            flat = draw(st.lists(st.integers(0, t.shape[dim] - 1), min_size=_numel(shape), max_size=_numel(shape)))
            return op, (i, j, dim, torch.tensor(flat).reshape(shape).tolist())
        return op, (i, j)
    if op == "where":
        return op, (i, draw(pick), draw(pick))
    if op == "reduce":
        name = draw(st.sampled_from(["sum", "mean", "amax", "amin"] if is_float else ["sum", "amax", "amin"]))
        dim = draw(st.one_of(st.none(), st.integers(-_dims(t), _dims(t) - 1)))
        return op, (i, name, dim, draw(st.booleans()) if dim is not None else False)
    if op == "cumsum":
        return op, (i, draw(st.integers(-_dims(t), _dims(t) - 1)))
    if op == "slice":
        if t.dim() == 0:
            return None
        dim = draw(st.integers(0, t.dim() - 1))
        size = t.shape[dim]
        lo = draw(st.integers(0, size))
        return op, (i, dim, lo, draw(st.integers(lo, size)), draw(st.integers(1, 3)))
    if op == "permute":
        return op, (i, tuple(draw(st.permutations(range(t.dim())))))
    if op == "transpose":
        return op, (i, draw(st.integers(-_dims(t), _dims(t) - 1)), draw(st.integers(-_dims(t), _dims(t) - 1)))
    if op == "expand":
        shape = tuple(draw(_SMALL) if s == 1 else s for s in t.shape)
        lead = tuple(draw(st.lists(_SMALL, max_size=1)))
        return op, (i, lead + shape)
    if op == "unsqueeze":
        return op, (i, draw(st.integers(-t.dim() - 1, t.dim())))
    if op == "flip":
        return op, (i, tuple(draw(st.lists(st.integers(0, _dims(t) - 1), unique=True, max_size=2))) if t.dim() else ())
    if op == "reshape":
        shapes = [s for s in _factorings(t.numel()) if len(s) <= 4]
        return op, (i, draw(st.sampled_from(shapes)))
    if op == "as_strided":
        if not t.is_contiguous() or t.numel() == 0:
            return None
        size = draw(_shape(max_dims=2))
        stride = tuple(draw(st.integers(0, 3)) for _ in size)
        extent = sum((s - 1) * st_ for s, st_ in zip(size, stride)) if size and all(size) else 0
        if extent >= t.numel():
            return None
        return op, (i, size, stride, draw(st.integers(0, t.numel() - 1 - extent)))
    if op == "pad":
        if t.dim() == 0 or not is_float:
            return None
        pads = tuple(draw(st.integers(0, 2)) for _ in range(2 * min(t.dim(), 2)))
        return op, (i, pads, draw(const))
    if op == "index_select":
        if t.dim() == 0:
            return None
        dim = draw(st.integers(0, t.dim() - 1))
        if t.shape[dim] == 0:
            return None
        return op, (i, dim, draw(st.lists(st.integers(0, t.shape[dim] - 1), min_size=1, max_size=4)))
    if op in ("add_", "mul_", "fill_"):
        return op, (i, draw(const))
    if op in ("clone", "read"):
        return op, (i,)
    return op, ()  # sync


def _numel(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _factorings(numel: int) -> list[tuple[int, ...]]:
    """Shapes of ``numel`` elements: (numel,), (a, numel / a), (a, b, numel / (a b)) for small a, b."""
    out = [(numel,), (1, numel)]
    for a in range(2, 6):
        if numel % a == 0:
            out.append((a, numel // a))
            for b in range(2, 6):
                if (numel // a) % b == 0:
                    out.append((a, b, numel // a // b))
    return out


def _overlapping(t) -> bool:
    """Whether several elements of ``t`` share memory (an in-place write there is an error)."""
    return any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride())) or \
        t._base is not None and t.numel() > 1 and len(set(_offsets(t))) < t.numel()


def _base(t):
    return t._base if t._base is not None else t


def _offsets(t) -> list[int]:
    """The memory offset of every element of ``t``."""
    offsets = [0]
    for size, stride in zip(t.shape, t.stride()):
        offsets = [o + k * stride for o in offsets for k in range(size)]
    return offsets


@st.composite
def programs(draw):
    spec = [(draw(_shape()), draw(st.sampled_from(["float32", "float32", "int64"])))
            for _ in range(draw(st.integers(1, 2)))]
    meta = [torch.empty(shape, dtype=getattr(torch, dtype), device="meta") for shape, dtype in spec]
    steps = []
    for _ in range(draw(st.integers(1, MAX_STEPS))):
        if len(meta) >= MAX_TENSORS:
            break
        step = draw(_step(meta))
        if step is None:
            continue
        op, args = step
        if op in ("add_", "mul_", "copy_", "fill_") and _overlapping(meta[args[0]]):
            continue
        if op == "copy_" and args[0] != args[1] and _base(meta[args[0]]) is _base(meta[args[1]]):
            continue  # (a copy from memory it overwrites: CPU torch's result depends on its loop order)
        try:
            result = OPS[op][0](meta, *args) if op not in ("sync", "read") else None
        except (RuntimeError, IndexError, ValueError, TypeError):
            continue
        steps.append(step)
        if op not in _IN_PLACE:
            meta.append(result)
    # The final in-place write that shows aliasing: to a tensor whose elements do not overlap and
    # whose strides are compared (another computed result's layout may differ, and with it
    # whether a reshape of it is a view: see ``_ITERATOR``).
    defined = _layout_defined((spec, steps, None))
    writable = [k for k, t in enumerate(meta) if not _overlapping(t) and t.numel() and defined[k]]
    final = draw(st.sampled_from(writable)) if writable else None
    return spec, steps, final


def _layout_defined(program) -> list[bool]:
    """Per tensor of ``program``: whether its strides follow from the inputs' through views and
    TensorIterator's layout rule alone (``_VIEWS``, ``_ITERATOR``)."""
    spec, steps, _final = program
    defined = [True] * len(spec)
    for op, args in steps:
        if op not in _IN_PLACE:
            operands = 1 if op in _VIEWS else _ITERATOR.get(op, 0)
            defined.append(operands > 0 and all(defined[a] for a in args[:operands]))
    return defined


def _compare(zyx_tensors, cpu_tensors, program, when: str) -> None:
    defined = _layout_defined(program)
    for k, (z, c) in enumerate(zip(zyx_tensors, cpu_tensors)):
        where = f"t{k} {when}"
        assert z.shape == c.shape, f"{where}: shape {tuple(z.shape)} != {tuple(c.shape)}"
        assert z.dtype == c.dtype, f"{where}: dtype {z.dtype} != {c.dtype}"
        # Every stride, those of size-1 dimensions too: they address no other element, but a
        # later op's layout reads them (TensorIterator's order of dimensions). An empty tensor's
        # strides address nothing.
        same = z.stride() == c.stride() or not c.numel()
        assert not defined[k] or same, f"{where}: strides {z.stride()} != {c.stride()}"
        torch.testing.assert_close(z.cpu(), c, rtol=1e-4, atol=1e-4, equal_nan=True,
                                   msg=lambda m, where=where: f"{where}: {m}")


@settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs_match_cpu_torch(program):
    spec, steps, final = program
    try:
        cpu, cpu_error = run((spec, steps), "cpu")
        zyx, zyx_error = run((spec, steps), "zyx")
        assert zyx_error == cpu_error, f"errors (step, type): zyx {zyx_error}, CPU torch {cpu_error}"
        if cpu_error is not None:
            return
        _compare(zyx, cpu, program, "after the program")
        if final is not None:
            # Aliasing: a write through one tensor shows in exactly the tensors sharing its memory.
            for tensors in (cpu, zyx):
                tensors[final].add_(100.0 if tensors[final].dtype.is_floating_point else 100)
            _compare(zyx, cpu, program, f"after t{final}.add_(100)")
    except AssertionError as exc:
        text = reproducer((spec, steps))
        if final is not None:
            text += f"\n# then t{final}.add_(100) on both and compare again"
        raise AssertionError(f"{exc}\n\nReproducer:\n{text}") from None
