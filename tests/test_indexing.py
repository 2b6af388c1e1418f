"""Indexing on zyx against CPU torch: data-dependent reads (gathers: index_select, gather, take,
embedding, advanced indexing) and writes (scatter, index_put, masked_fill).

Reads are ``GATHER`` nodes (graph.gather): each output element loads from the position its
index entry names, so their work follows the output, not the table; the tests check values,
dtypes, negative entries, fusion with the ops around them and that work bound.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, check, make

import torch_zyx
from torch_zyx.execute import realize


def test_index_select_gather_scatter():
    x = make((4, 5), torch.float32)
    idx = torch.tensor([3, 0, 0, 2])
    check(lambda t, i: t.index_select(0, i), x, idx)
    check(lambda t, i: t.index_select(1, i), x, idx)
    check(lambda t, i: t.index_select(1, i), make((4, 5), torch.int64), idx.to(torch.int32))
    gi = torch.tensor([[0, 1, 4], [2, 2, 0]])
    check(lambda t, i: t.gather(1, i), x, gi)
    check(lambda t, i: t.gather(0, i), x, torch.tensor([[0, 1, 3], [2, 2, 0]]))
    src = make((2, 3), torch.float32, seed=4)
    check(lambda t, i, s: t.scatter(1, i, s), x, torch.tensor([[0, 1, 4], [2, 3, 0]]), src)
    check(lambda t, i: t.scatter(0, i, 9.0), x, torch.tensor([[0, 1, 3], [2, 2, 0]]))
    check(lambda t, i, s: t.scatter_add(1, i, s), x, gi, src)
    check(lambda t, i, s: t.scatter_add_(0, i, s), x, torch.tensor([[0, 1, 3], [0, 1, 3]]), src, mutates=(0,))
    check(lambda t, i, s: t.scatter_(1, i, s), x, torch.tensor([[0, 1, 4], [2, 3, 0]]), src, mutates=(0,))


def test_masked_fill_and_index():
    x = make((4, 5), torch.float32)
    mask = make((4, 5), torch.bool, seed=3)
    check(lambda t, m: t.masked_fill(m, 2.5), x, mask)
    check(lambda t, m: t.masked_fill(m[0], -1), x, mask)
    check(lambda t, m: t.masked_fill_(m, 0), x, mask, mutates=(0,))
    check(lambda t, m: t.masked_fill(m, torch.tensor(7.0)), x, mask)
    idx = torch.tensor([2, 0, -1])
    check(lambda t, i: t[i], x, idx)
    check(lambda t, i: t[i.view(3, 1)], x, idx)
    check(lambda t, i: t[1:, i], x, idx)
    check(lambda t, i: t[:, i], x, idx)
    check(lambda t, i, j: t[i, j], x, idx, torch.tensor([4, 1, 0]))
    check(lambda t, m: (t.__setitem__(m, 3.0), t)[1], x, mask, mutates=(0,))
    check(lambda t, i: t.index_put_((i,), torch.tensor(1.5)), x, idx, mutates=(0,))
    check(lambda t, i, v: t.index_put_((i,), v, accumulate=True), x, torch.tensor([1, 1, 3]),
          make((3, 5), torch.float32), mutates=(0,))
    check(lambda t, i: (t.__setitem__(i, 0.0), t)[1], x, idx, mutates=(0,))


def test_bool_mask_read():
    x = make((4, 5), torch.float32)
    mask = make((4, 5), torch.bool, seed=3)
    check(lambda t, m: t[m], x, mask)
    check(lambda t, m: t[m[:, 0]], x, mask)


def test_advanced_indexing():
    x = make((3, 4, 5), torch.float32)
    i, j = torch.tensor([2, 0, 1, 2]), torch.tensor([[1], [3]])
    mask = make((3, 4), torch.bool, seed=3)
    reads = [lambda t: t[i, j], lambda t: t[:, j, i], lambda t: t[i, :, j], lambda t: t[..., i],
             lambda t: t[None, i], lambda t: t[1, :, i], lambda t: t[mask], lambda t: t[:, mask[0]],
             lambda t: t[mask, 2], lambda t: t[i.to(torch.int32)],
             lambda t: t[torch.tensor([], dtype=torch.long)]]
    for fn in reads:
        check(fn, x)
    writes = [lambda t: t.__setitem__((i, j), 7.0), lambda t: t.__setitem__((slice(None), j, i), -1.0),
              lambda t: t.__setitem__(mask, torch.arange(5.0)), lambda t: t.__setitem__(mask, 0.5),
              lambda t: t.index_put_((i, j), torch.ones(2, 4, 5), accumulate=True),
              lambda t: t.__setitem__((i[:2], slice(1, 3)), torch.zeros(2, 2, 5))]
    for fn in writes:
        check(lambda t, fn=fn: (fn(t), t)[1], x)
    check(lambda t: torch.nonzero(t), make((3, 4), torch.bool))
    check(lambda t: t.nonzero(as_tuple=True), make((5,), torch.int64, low=-1, high=1))
    check(lambda t: t[t > 0], make((6,), torch.float32))


# ---------------------------------------------------------------------------- gathers


def _plans_of(fn, *cpu_args):
    """(result, the plans built while ``fn`` ran on zyx copies of ``cpu_args``): every kernel
    of a new graph shape with its loop IR (``Plan.kernels_ir``)."""
    built = []
    original = realize._build_plan

    def build(*args):
        plan = original(*args)
        built.append(plan)
        return plan

    args = [a.to("zyx") for a in cpu_args]
    torch_zyx.synchronize()
    realize._build_plan = build
    try:
        out = fn(*args)
        torch_zyx.synchronize()
    finally:
        realize._build_plan = original
    return out, built


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8,
                                   torch.bool])
def test_index_reads_all_dtypes(dtype, no_fallback):
    table = make((7, 6), dtype)
    rows = torch.tensor([[5, 0], [3, 3], [1, 4]])
    check(lambda t, i: F.embedding(i, t), table, rows)
    check(lambda t, i: t.index_select(0, i.flatten()), table, rows)
    check(lambda t, i: t.index_select(1, i.flatten()), table, rows)
    check(lambda t, i: t.gather(1, i), table, rows)
    check(lambda t, i: t.take(i - 20), table, rows)  # negative: counted from the end
    check(lambda t, i: t[i - 7, 2:], table, rows)


def test_gathers_along_each_axis_of_views(no_fallback):
    x = make((4, 5, 6), torch.float32)
    gen = torch.Generator().manual_seed(0)
    for view in (lambda t: t, lambda t: t.transpose(0, 2), lambda t: t[:, ::2, 1:]):
        shape = view(x).shape
        for dim in range(3):
            index = torch.randint(0, shape[dim], (3, 2, 3), generator=gen)
            check(lambda t, i, v=view, d=dim: v(t).gather(d, i), x, index)
            check(lambda t, i, v=view, d=dim: v(t).gather(d, i.transpose(0, 2)), x, index)  # strided
            check(lambda t, i, v=view, d=dim: v(t).index_select(d, i.flatten()), x, index)


def test_gather_fuses_with_the_elementwise_ops_around_it(counters, no_fallback):
    x, index = make((64, 32), torch.float32), torch.randint(0, 64, (40,))
    fn = lambda t, i: torch.relu(F.embedding(i, t * 2 + 1) - 0.5) * 3
    out, plans = _plans_of(fn, x, index)
    assert_close(out, fn(x, index))
    kernels = [kernel for plan in plans for kernel in plan.schedule.kernels]
    # The table's arithmetic, the gather and the ops after it: one kernel; the other one checks
    # the indices' bounds.
    assert len(kernels) == 2 and counters()["kernels_launched"] == 2


def test_gathers_of_reduced_values_and_reduced_positions(no_fallback):
    x = make((8, 16), torch.float32)
    picks = torch.tensor([[3], [0], [15], [7], [1], [2], [9], [8]])
    check(lambda t, i: t.softmax(-1).gather(1, i), x, picks)  # the table holds a row reduce
    check(lambda t: t.gather(1, t.argmax(-1, keepdim=True)), x)  # the positions come from a reduce
    check(lambda t: t[t.argmin(0)], x)
    check(lambda t, i: t.gather(1, i).sum(), x, picks)  # gathered inside a reduce
    check(lambda t, i: F.embedding(i, t).sum(1), x, torch.randint(0, 8, (5, 9)))
    check(lambda t, i: F.pad(F.embedding(i, t), (2, 1)), x, torch.randint(0, 8, (3, 4)))
    check(lambda t, i: F.embedding(i, t).transpose(0, 1).contiguous(), x, torch.randint(0, 8, (5,)))


def test_gather_work_follows_the_output_not_the_table(no_fallback):
    """A read of 6 rows of a 200,000-row table: the kernels' estimated work is a few thousand
    operations (a one-hot read would compare each output with all 200,000 rows)."""
    table = make((200_000, 8), torch.float32)
    index = torch.tensor([199_999, 0, 5, 123_456, 5, 77_777])
    for fn in (lambda t, i: F.embedding(i, t), lambda t, i: t[i], lambda t, i: t.index_select(0, i),
               lambda t, i: t.take(i * 8 + 3)):
        out, plans = _plans_of(fn, table, index)
        assert_close(out, fn(table, index))
        work = sum(loop.work for plan in plans for loop in plan.kernels_ir)
        assert work < 10_000, work


def test_out_of_range_reads_raise_as_on_cpu(no_fallback):
    table = make((5, 3), torch.float32).to("zyx")
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(torch.tensor([1, 5]).to("zyx"), table).cpu()
    with pytest.raises(RuntimeError, match="out of bounds"):
        table.gather(0, torch.tensor([[0, -1, 2]]).to("zyx")).cpu()
    with pytest.raises(IndexError):
        table[torch.tensor([-6]).to("zyx")].cpu()
    # The device is still usable, and in-range reads give CPU's values.
    assert_close(table[torch.tensor([-5, 4]).to("zyx")], table.cpu()[torch.tensor([-5, 4])])


# ---------------------------------------------------------------------------- scatter-adds

EXACT = {"rtol": 0, "atol": 0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int8])
def test_scatter_adds_add_in_cpu_order(dtype, no_fallback):
    """Entries landing on one element are added one after the other in index order, in the
    element's dtype, as CPU torch adds them: the same bits, half precision included."""
    gen = torch.Generator().manual_seed(1)
    x = make((6, 5), dtype)
    src = make((40, 5), dtype, seed=2)
    rows = torch.randint(0, 6, (40,), generator=gen)
    index = torch.randint(0, 6, (40, 5), generator=gen)
    check(lambda t, i, s: t.scatter_add(0, i, s), x, index, src, **EXACT)
    check(lambda t, i, s: t.scatter_add(1, i[:6, :3] % 5, s[:6, :4]), x, index, src, **EXACT)
    check(lambda t, i, s: t.index_add(0, i, s), x, rows, src, **EXACT)
    check(lambda t, i, s: t.index_put((i,), s, accumulate=True), x, rows, src, **EXACT)
    check(lambda t, i, s: t.index_put((i - 6, i % 5), s[:, 0], accumulate=True), x, rows, src, **EXACT)
    check(lambda t, i, s: t.put(i * 5 - 30, s[:, 0], accumulate=True), x, rows, src, **EXACT)
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "sum"), x, index, src, **EXACT)
    check(lambda t, i, s: t[:, 0].index_add(0, i, s[:, 0]), x, rows, src, **EXACT)  # 1-D: ATen's own path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool])
def test_scatter_writes_keep_the_last_entry(dtype, no_fallback):
    """Several entries writing one element: the last one in index order stays, as on CPU."""
    gen = torch.Generator().manual_seed(4)
    x, src = make((6, 5), dtype), make((30, 5), dtype, seed=5)
    rows = torch.randint(0, 6, (30,), generator=gen)
    index = torch.randint(0, 6, (30, 5), generator=gen)
    check(lambda t, i, s: t.scatter(0, i, s), x, index, src, **EXACT)
    check(lambda t, i, s: t.index_put((i,), s), x, rows, src, **EXACT)
    check(lambda t, i, s: t.index_copy(0, i[:6].argsort(), s[:6]), x, rows, src, **EXACT)
    check(lambda t, i, s: (t.__setitem__((i - 6, slice(1, 3)), s[:, 1:3]), t)[1], x, rows, src, mutates=(0,),
          **EXACT)
    check(lambda t, i: (t.__setitem__(i, t[0] + t[1]), t)[1], x, rows, mutates=(0,), **EXACT)


def test_writes_to_a_large_target_follow_the_entries(no_fallback):
    """Writing 3 rows of a 100,000-row cache (a KV cache's update): the target is copied once,
    the write itself is 3 rows, not a one-hot over the cache."""
    cache, new = make((100_000, 8), torch.float32), make((3, 8), torch.float32, seed=1)
    where = torch.tensor([99_999, 17, 4_242])

    def update(c, v, i):
        c = c.clone()
        c[i] = v
        c.index_add_(0, i, v)
        return c

    out, plans = _plans_of(update, cache, new, where)
    assert_close(out, update(cache, new, where), **EXACT)
    work = sum(loop.work for plan in plans for loop in plan.kernels_ir)
    assert work < 100_000 * 8 * 4, work


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int8, torch.int16,
                                   torch.uint8])
def test_reducing_scatters_combine_in_place(reduce, dtype, no_fallback):
    # (int8/int16/uint8: the named elements start from their dtype's own limits without include_self)
    gen = torch.Generator().manual_seed(3)
    x, src = make((5, 4), dtype, low=-3, high=3), make((12, 4), dtype, seed=8, low=-3, high=3)
    index = torch.randint(0, 5, (12, 4), generator=gen)
    rows = torch.randint(0, 5, (12,), generator=gen)
    if dtype.is_floating_point:
        src[3, 1] = float("nan")  # propagated by max/min as on CPU
    for include_self in (True, False):
        check(lambda t, i, s, k=include_self: t.scatter_reduce(0, i, s, reduce, include_self=k),
              x, index, src)
        if reduce != "sum":
            check(lambda t, i, s, k=include_self: t.index_reduce(0, i, s, reduce, include_self=k),
                  x, rows, src)


def test_scatter_adds_in_place_fused_and_chained(no_fallback):
    x, y = make((8, 4), torch.float32), make((20, 4), torch.float32, seed=3)
    rows = torch.randint(0, 8, (20,), generator=torch.Generator().manual_seed(2))

    def chain(t, s, i):
        t.index_add_(0, i, s * 2 + 1)  # a computed source
        first = t.clone()
        t.index_add_(0, (i * 3) % 8, s.exp(), alpha=-0.5)  # again, in place on the result
        return first, t + 1

    check(chain, x, y, rows, mutates=(0,))
    check(lambda t, s, i: (t + 1).scatter_add(0, i.cumsum(0) % 8, s), x, y, rows.view(20, 1).expand(20, 4))
    # bool keeps the one-hot path (an add of bools is an or)
    flags = make((8, 4), torch.bool)
    check(lambda t, i: t.index_put((i,), torch.ones(20, 4, dtype=torch.bool), accumulate=True), flags, rows)
    check(lambda t, i, s: t.index_add(0, i, s), flags, rows, make((20, 4), torch.bool, seed=6))
    check(lambda t, i, s: t.scatter_add(0, i, s), flags, rows.view(20, 1).expand(20, 4),
          make((20, 4), torch.bool, seed=7))
    for reduce in ("sum", "prod", "amax", "amin"):  # (CPU torch has no bool mean)
        check(lambda t, i, s, r=reduce: t.scatter_reduce(0, i, s, r), flags, rows.view(20, 1).expand(20, 4),
              make((20, 4), torch.bool, seed=7))


def test_embedding_gradient_work_follows_the_tokens(no_fallback):
    """The weight gradient of 12 tokens of a 100,000-row embedding: tokens x width additions
    (plus zeroing the gradient), not a one-hot over the vocabulary."""
    weight = make((100_000, 16), torch.float32)
    tokens = torch.tensor([[5, 99_999, 5, 0], [7, 7, 7, 3], [0, 1, 2, 5]])

    def grad(w, t):
        w = w.clone().requires_grad_()
        (F.embedding(t, w, padding_idx=7) * torch.arange(16.0, device=w.device)).sum().backward()
        return w.grad

    out, plans = _plans_of(grad, weight, tokens)
    assert_close(out, grad(weight, tokens), **EXACT)
    work = sum(loop.work for plan in plans for loop in plan.kernels_ir)
    assert work < 100_000 * 16 * 4, work  # a few passes over the gradient, no vocabulary x tokens
