"""Fusion: how many kernels common patterns become, and the schedule cache (through counters())."""

import array
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close


def _chain(x):
    # Ten elementwise ops: scalar operands, an in-place op and an out= op among them.
    t = x * 2 + 1
    t = t.relu() * x - 3
    t = t * 0.5 + x
    t.mul_(2)
    out = torch.empty_like(t)
    torch.sub(t, 1.5, out=out)
    return out.exp()


def _count(fn, *cpu_args):
    import torch_zyx

    args = [a.to("zyx") for a in cpu_args]
    torch.zyx.synchronize()
    torch_zyx.reset_counters()
    result = fn(*args)
    torch.zyx.synchronize()
    launched = torch_zyx.counters()["kernels_launched"]
    assert_close(result, fn(*cpu_args), rtol=1e-4, atol=1e-4)
    return launched


def test_elementwise_chain_is_one_kernel(counters):
    assert _count(_chain, torch.randn(64, 33)) == 1


def test_mul_sum_is_one_kernel(counters):
    assert _count(lambda x, y: (x * y).sum(-1), torch.randn(48, 40), torch.randn(48, 40)) == 1


def test_linear_relu_is_one_kernel(counters):
    fn = lambda x, w, b: torch.relu(x @ w + b)
    assert _count(fn, torch.randn(32, 24), torch.randn(24, 48), torch.randn(48)) == 1


def test_softmax_is_one_kernel(counters):
    # Max, sum of exp and normalize run over each row in one kernel (row reduces fuse).
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(16, 100)) == 1
    assert _count(lambda x: torch.log_softmax(x, -1), torch.randn(16, 100)) == 1
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(4, 8, 50)) == 1


def test_softmax_is_one_composite_node(counters):
    # Softmax and log-softmax record one SOFTMAX node (lazy/composite.py), on any dim.
    x = torch.randn(6, 20, 7)
    for fn in (lambda t: torch.softmax(t, 1), lambda t: torch.log_softmax(t, -1)):
        out = fn(x.to("zyx"))
        assert out._storage._shaped.op == "SOFTMAX"
        assert_close(out, fn(x), rtol=1e-5, atol=1e-5)


def test_layer_norm_is_one_kernel(counters):
    fn = lambda x, w, b: F.layer_norm(x, (64,), w, b)
    assert _count(fn, torch.randn(16, 64), torch.randn(64), torch.randn(64)) == 1
    assert _count(lambda x: F.layer_norm(x, (64,)), torch.randn(16, 64)) == 1
    assert _count(lambda x: F.layer_norm(x, (6, 40)), torch.randn(4, 6, 40)) == 1


def test_layer_norm_is_one_composite_node(counters):
    # Without statistics, layer norm records one LAYER_NORM node (lazy/composite.py), expanded
    # into primitives only on a schedule miss. eps is a parameter of the plan: the second call,
    # another eps on other values, reuses the plan (no kernelizer run) and must still use its
    # own eps (values with a tiny variance, where eps decides the result).
    import torch_zyx
    from torch_zyx.lazy import graph as g

    x, w, b = torch.randn(12, 48), torch.randn(48), torch.randn(48)
    xz, wz, bz = x.to("zyx"), w.to("zyx"), b.to("zyx")
    torch.zyx.synchronize()
    g.PendingCounter.count = 0
    out = F.layer_norm(xz, (48,), wz, bz, eps=1e-5)
    assert out._storage._shaped.op == "LAYER_NORM"
    assert g.PendingCounter.count <= 3  # (the node, eps, at most one cast)
    assert_close(out, F.layer_norm(x, (48,), w, b, eps=1e-5), rtol=1e-4, atol=1e-4)
    before = torch_zyx.counters()
    flat = torch.randn(12, 48) * 1e-3
    second = F.layer_norm(flat.to("zyx"), (48,), wz, bz, eps=1e-4).cpu()
    after = torch_zyx.counters()
    assert after["kernelizer_runs"] == before["kernelizer_runs"]
    assert after["schedule_cache_hits"] == before["schedule_cache_hits"] + 1
    torch.testing.assert_close(second, F.layer_norm(flat, (48,), w, b, eps=1e-4), rtol=1e-4, atol=1e-4)
    # With the statistics (what autograd saves): three composite nodes, one graph once expanded.
    results = torch.native_layer_norm(xz, (48,), wz, bz, 1e-5)
    assert [r._storage._shaped.op for r in results] == ["LAYER_NORM"] * 3
    for got, want in zip(results, torch.native_layer_norm(x, (48,), w, b, 1e-5)):
        assert_close(got, want, rtol=1e-4, atol=1e-4)
    # Weight only, and a consumer fused after the composite: still one kernel; half input.
    fn = lambda x, w: (F.layer_norm(x, (48,), w) * 2).sum(-1)
    assert _count(fn, x, w) == 1
    half = F.layer_norm(x.half().to("zyx"), (48,), w.half().to("zyx"))
    assert half.dtype == torch.float16
    assert_close(half, F.layer_norm(x.half(), (48,), w.half()), rtol=2e-3, atol=2e-3)


def test_layer_norm_with_statistics_is_two_kernels(counters):
    # Mean and rstd kept (as autograd saves them): stored by one kernel, read by the other.
    fn = lambda x: torch.native_layer_norm(x, (64,), None, None, 1e-5)
    assert _count(fn, torch.randn(16, 64)) <= 2


def test_row_reduce_fusion_keeps_other_patterns_right(counters):
    x = torch.randn(24, 40)
    # A row reduce read by a sum over the rows (a weight gradient): stored, not recomputed.
    assert _count(lambda x: (x - x.mean(-1, keepdim=True)).sum(0), x) <= 2
    # A matmul and a row reduce in one value; a reduce over another axis; a full reduce.
    assert _count(lambda a, w: a @ w + a.sum(-1, keepdim=True), x, torch.randn(40, 40)) <= 2
    assert _count(lambda x: torch.softmax(x, 0), x) <= 3
    assert _count(lambda x: x - x.mean(), x) <= 2
    # Few long rows: the row reduces are split across threads / work groups instead.
    assert _count(lambda x: torch.softmax(x, -1), torch.randn(2, 40000)) <= 6


def test_row_kernels_with_work_groups(counters):
    # Devices with work groups and no row loops (GPUs): one work group per row, its row
    # reduces as group reduces. Checked on OpenCL (PoCL) with those options forced.
    from torch_zyx.execute import contexts, realize

    ctx = contexts.devices()[0]
    if ctx.runtime.name != "opencl" or ctx.lowering.group_size < 2:
        pytest.skip("needs an OpenCL device as zyx:0 (make test-opencl): CPU kernels have no work groups")
    saved = ctx.lowering
    ctx.lowering = dataclasses.replace(saved, row_loops=False)
    before = set(realize._lowered)
    try:
        # Shapes no other test uses: their plans are built under the options above.
        x, w = torch.randn(37, 1000), torch.randn(1000)
        assert _count(lambda x: torch.softmax(x, -1), x) == 1
        assert _count(lambda x: torch.log_softmax(x, -1), x) == 1
        assert _count(lambda x, w: F.layer_norm(x, (1000,), w), x, w) == 1
        assert _count(lambda x: F.layer_norm(x, (3, 257)), torch.randn(5, 3, 257)) == 1
    finally:
        ctx.lowering = saved
    new = [realize._lowered[k][0] for k in set(realize._lowered) - before]
    assert new and all(k.group_size for k in new)


@pytest.mark.parametrize("tile", [(4, 16), (8, 32)])
def test_matmul_register_tiles(counters, monkeypatch, tile):
    # Each device chooses its matmul register tile (the CPU: 8 x 32 with 512-bit vectors, else
    # 4 x 16); both must give the same results and kernels whatever divides the shapes: rows
    # by the tile's, by 4 or by 2 only, columns by the tile's or by 16 only, operands packed
    # (large) or read in place, a computed operand (ReLU's gradient) stored first.
    from torch_zyx.execute import contexts, realize
    from torch_zyx.lazy.panels import MatmulTile

    ctx = contexts.devices()[0]
    monkeypatch.setattr(ctx, "lowering", dataclasses.replace(ctx.lowering, matmul_tile=MatmulTile(*tile)))
    monkeypatch.setattr(realize, "_plans", {})  # (plans and kernels built for the other tile)
    monkeypatch.setattr(realize, "_lowered", {})
    for m, k, n in [(256, 64, 512), (260, 40, 48), (10, 33, 80), (136, 96, 528)]:
        a, w = torch.randn(m, k), torch.randn(n, k)
        assert _count(lambda a, w: a @ w.t(), a, w) <= 2  # (B packed, then the matmul)
        b = w.t().contiguous()  # (B laid out along n: read in place)
        assert_close(a.to("zyx") @ b.to("zyx"), a @ b, rtol=1e-4, atol=1e-4)
    x, w = torch.randn(128, 64, requires_grad=True), torch.randn(512, 64, requires_grad=True)
    xz, wz = x.detach().to("zyx").requires_grad_(), w.detach().to("zyx").requires_grad_()
    F.linear(x, w).relu().square().sum().backward()
    F.linear(xz, wz).relu().square().sum().backward()
    assert_close(xz.grad, x.grad, rtol=1e-4, atol=1e-3)
    assert_close(wz.grad, w.grad, rtol=1e-4, atol=1e-3)


def test_row_reduces_over_gathered_rows_are_not_register_tiled(counters, monkeypatch):
    # The layer norms of a GPT's pre-norm blocks read the token ids once per output row (the
    # embedding under the residual stream), not along their reduce: no reason for a matmul's
    # register tile of rows, which unrolled 256 rows into one kernel of ~18,000 instructions
    # with one iteration (2 GFLOP/s; 10% of a d256 GPT's training step).
    from torch import nn

    from torch_zyx.execute import realize

    monkeypatch.setattr(realize, "_plans", {})
    monkeypatch.setattr(realize, "_lowered", {})
    torch.manual_seed(0)
    embed, positions = nn.Embedding(128, 64), nn.Embedding(32, 64)
    block = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
    tokens = torch.randint(0, 128, (8, 32))

    def loss(embed, positions, block, tokens):
        h = embed(tokens) + positions(torch.arange(32, device=tokens.device))
        return block(h).square().mean()

    loss(embed, positions, block, tokens).backward()
    modules = [m.to("zyx") for m in (embed, positions, block)]
    for m in modules:
        m.zero_grad()
    got = loss(*modules, tokens.to("zyx"))
    got.backward()
    assert_close(got, loss(embed.cpu(), positions.cpu(), block.cpu(), tokens), rtol=1e-4, atol=1e-5)
    biggest = max(len(entry[0].instrs) for entry in realize._lowered.values())
    assert biggest < 8000, biggest


def test_second_run_hits_schedule_cache(counters):
    import torch_zyx

    fn = lambda x, y: (x * y + 1).relu().sum(0)
    a, b = torch.randn(20, 30), torch.randn(20, 30)
    first = fn(a.to("zyx"), b.to("zyx")).cpu()
    before = torch_zyx.counters()
    # New buffers with the same graph shape: the plan is reused, nothing is kernelized.
    c, d = torch.randn(20, 30), torch.randn(20, 30)
    second = fn(c.to("zyx"), d.to("zyx")).cpu()
    after = torch_zyx.counters()
    assert after["kernelizer_runs"] == before["kernelizer_runs"]
    assert after["schedule_cache_hits"] == before["schedule_cache_hits"] + 1
    assert after["kernels_compiled"] == before["kernels_compiled"]
    torch.testing.assert_close(first, fn(a, b))
    torch.testing.assert_close(second, fn(c, d))


def _long_loop(x, steps):
    # Each step's value depends on all the steps before it; nothing realizes in between.
    for i in range(steps):
        x = (x * 0.999 + 1e-3).sin() if i % 2 else (x.exp() + 1).log()
    return x


def test_long_chain_without_realization_splits_into_kernels(counters):
    """A chain far longer than one kernel's expression may be (a training loop never synced)
    is stored every so often instead of overflowing the recursion of lowering."""
    x = torch.randn(257)
    launched = _count(lambda t: _long_loop(t, 1500), x)
    assert 2 <= launched <= 40


def test_many_independent_results_merge_into_bounded_kernels(counters):
    """Same-shape results with no dependency merge into shared kernels, at most
    MAX_MERGED_STORES stores each (one kernel of 1000 stores compiled for 18 s)."""
    from torch_zyx.lazy.kernelize import MAX_MERGED_STORES

    sources = [torch.full((100,), float(i)) for i in range(3 * MAX_MERGED_STORES + 5)]
    results = [s.to("zyx") * 2 for s in sources]
    torch.zyx.synchronize()
    assert counters()["kernels_launched"] == 4  # 3 full kernels and one of 5 stores
    for source, result in zip(sources, results):
        assert torch.equal(result.cpu(), source * 2)


# ----------------------------------------------------------------- the node table and the walk
# graph.py builds nodes through one of two tables with one surface: the C module (_native.c,
# built by the install) and its Python reference (nodes_py.py). Both are checked directly.


def _tables():
    from torch_zyx.lazy import nodes_py

    tables = [pytest.param(nodes_py, id="python")]
    try:
        from torch_zyx.lazy import _native
    except ImportError:
        tables.append(pytest.param(None, id="native", marks=pytest.mark.skip(
            reason="the C node table is not built here (no C compiler or Python headers)")))
    else:
        tables.append(pytest.param(_native, id="native"))
    return tables


def test_native_table_is_built_and_used_where_it_can_be():
    import shutil
    import sysconfig
    from pathlib import Path

    from torch_zyx.config import CONFIG
    from torch_zyx.lazy import graph

    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    if shutil.which("cc") is None or not headers:
        pytest.skip("no C compiler or Python headers: the install keeps the Python node table")
    # Installed from a clean clone (make venv), the build must not have failed silently.
    assert graph.NATIVE == CONFIG.native


def _float32():
    from torch_zyx import dtypes

    return dtypes.float32


@pytest.mark.parametrize("table", _tables())
def test_nodes_are_interned_by_key(table):
    import math

    f32 = _float32()
    leaf = table.Node("IOTA", None, (), f32, (3,))
    assert table.Node("IOTA", None, (), f32, (3,)) is leaf
    a = table.Node("CONST", 0.0, (), f32, (3,))
    assert table.Node("CONST", 0.0, (), f32, (3,)) is a
    assert table.Node("CONST", -0.0, (), f32, (3,)) is not a  # 0.0 == -0.0, keyed apart
    nan = table.Node("CONST", math.nan, (), f32, (3,))
    assert table.Node("CONST", float("nan"), (), f32, (3,)) is nan  # nan != nan, keyed alike
    bounds = table.Node("SHRINK", ((0, 2),), (leaf,), f32, (2,))
    assert table.intern("SHRINK", ((0, 2),), ((0, 2),), (leaf,), f32, (2,)) is bounds
    total = table.binary_node("add", leaf, a, f32)
    assert table.intern("BINARY", "add", "add", (leaf, a), f32, (3,)) is total
    assert table.binary_node("add", a, leaf, f32) is not total  # sources in order
    neg = table.unary_node("neg", total)
    assert (neg.op, neg.arg, neg.srcs, neg.dtype, neg.shape) == ("UNARY", "neg", (total,), f32, (3,))
    assert table.Node("UNARY", "neg", (total,), f32, (3,)) is neg
    assert neg._key == ("UNARY", "neg", (total,), f32, (3,)) and neg.numel == 3
    assert repr(neg) == "<UNARY 'neg' float32 (3,)>"
    before = table.pending.count
    table.unary_node("exp", neg)
    assert table.pending.count == before + 1


@pytest.mark.parametrize("table", _tables())
def test_dead_nodes_leave_the_table(table):
    import gc

    f32 = _float32()
    leaf = table.Node("IOTA", None, (), f32, (5,))
    gc.collect()  # (earlier tests' garbage holding nodes would leave during the count below)
    base = table.table_size()
    node = table.unary_node("sin", leaf)
    assert table.table_size() == base + 1
    del node
    assert table.table_size() == base  # its entry went with it
    # Built again after its death: one node for the key again.
    again = table.unary_node("sin", leaf)
    assert table.unary_node("sin", leaf) is again and table.table_size() == base + 1
    del again
    # A chain deeper than the C stack frees (without recursing to its end), every entry with it.
    chain = leaf
    for _ in range(200_000):
        chain = table.unary_node("neg", chain)
    assert table.table_size() == base + 200_000
    del chain
    assert table.table_size() == base


def _walk_graph(table):
    """A layer norm's graph on two buffers, a scalar parameter and a random leaf."""
    f32 = _float32()
    x = table.Node("BUFFER", "x", (), f32, (8,))
    w = table.Node("BUFFER", "w", (), f32, (8,))
    eps = table.Node("CONST", 1e-5, (), f32, (8,))
    noise = table.Node("RANDOM", (7, 0), (), f32, (8,))
    mean = table.Node("REDUCE", ("sum", (0,)), (x,), f32, (1,))
    wide = table.Node("EXPAND", (8,), (mean,), f32, (8,))
    diff = table.binary_node("sub", x, wide, f32)
    scaled = table.binary_node("mul", table.binary_node("mul", diff, diff, f32), w, f32)
    out = table.binary_node("add", table.binary_node("add", scaled, eps, f32), noise, f32)
    return [out, mean, x]


def _signature(table, roots):
    from torch_zyx.lazy.kernelize import INLINE_FLOATS

    return table.signature(roots, INLINE_FLOATS)


def _decode(key: bytes):
    """A signature key as (root numbers, per node (op, how, arg, dtype, shape, source numbers)),
    checking its layout (nodes_py.signature) on the way."""
    words = array.array("q", key)
    n_roots = words[0]
    roots = tuple(words[1:1 + n_roots])
    n_nodes, at = words[1 + n_roots], 2 + n_roots
    items = []
    for _ in range(n_nodes):
        op, how, arg, dtype, shape, n_srcs = words[at:at + 6]
        items.append((op, how, arg, dtype, shape, tuple(words[at + 6:at + 6 + n_srcs])))
        at += 6 + n_srcs
    assert at == len(words)
    return roots, items


def _one_number_each(pairs) -> None:
    """``pairs`` of (value, its number in a key) give each distinct value one number, and
    distinct values distinct numbers."""
    number_of, value_of = {}, {}
    for value, number in pairs:
        assert number_of.setdefault(value, number) == number
        assert value_of.setdefault(number, value) == value


@pytest.mark.parametrize("table", _tables())
def test_signature_numbers_nodes_and_abstracts_leaves(table):
    from torch_zyx.lazy.nodes_py import ARG_BUFFER, ARG_KEYED, ARG_RANDOM, ARG_SCALAR

    roots = _walk_graph(table)
    nodes, key, buffers, random_args, scalar_dtypes, scalar_values, scalar_slot = _signature(table, roots)
    root_numbers, items = _decode(key)
    assert root_numbers == (0, 1, 2)
    assert nodes[:3] == roots and len(nodes) == len(set(map(id, nodes))) == len(items) == 11
    position = {id(node): i for i, node in enumerate(nodes)}
    for node, item in zip(nodes, items):
        # Every node's sources are numbered (the key needs no topological order).
        assert item[5] == tuple(position[id(s)] for s in node.srcs)
    # Ops, dtypes, shapes and inner nodes' args are written as numbers, one per distinct value.
    _one_number_each((node.op, item[0]) for node, item in zip(nodes, items))
    _one_number_each((node.dtype, item[3]) for node, item in zip(nodes, items))
    _one_number_each((node.shape, item[4]) for node, item in zip(nodes, items))
    _one_number_each((node._karg, item[2]) for node, item in zip(nodes, items) if node.srcs)
    assert all(item[1] == ARG_KEYED for node, item in zip(nodes, items) if node.srcs)
    leaves = {node.op: item[1:3] for node, item in zip(nodes, items) if not node.srcs}
    # Buffers by first appearance (x is a root, w is found later), each once.
    assert buffers == ["x", "w"]
    assert sorted(item[2] for node, item in zip(nodes, items) if node.op == "BUFFER") == [0, 1]
    assert all(item[1] == ARG_BUFFER for node, item in zip(nodes, items) if node.op == "BUFFER")
    assert leaves["RANDOM"] == (ARG_RANDOM, 0) and random_args == [7, 0]
    assert leaves["CONST"] == (ARG_SCALAR, 0) and scalar_dtypes == [_float32()]
    assert scalar_values == [[1e-5]]
    const = next(n for n in nodes if n.op == "CONST")
    assert scalar_slot == {id(const): (0, 0)}
    # Inline constants stay in the key (structural values the code folds).
    f32 = _float32()
    keys = []
    for value in (1.0, 2.0, 1.0):
        inline = table.Node("CONST", value, (), f32, (8,))
        _, key, *_, values, slots = _signature(table, [table.binary_node("mul", roots[2], inline, f32)])
        assert _decode(key)[1][2][1] == ARG_KEYED and values == [] and slots == {}
        keys.append(key)
    assert keys[0] != keys[1] and keys[0] == keys[2]


@pytest.mark.parametrize("table", _tables())
def test_signature_keys_structure_not_values(table):
    """Equal structures on other buffers and scalar parameters have one key; another shape,
    op, inline constant or sharing of a buffer has another."""
    f32 = _float32()

    def graph(a, b, scale, shape=(8,), op="add"):
        x = table.Node("BUFFER", a, (), f32, shape)
        y = table.Node("BUFFER", b, (), f32, shape)
        c = table.Node("CONST", scale, (), f32, shape)
        return _signature(table, [table.binary_node(op, table.binary_node("mul", x, c, f32), y, f32)])[1]

    base = graph("p", "q", 0.3)
    assert graph("r", "s", 0.7) == base
    assert graph("p", "p", 0.3) != base  # one buffer read twice binds one slot
    assert graph("p", "q", 0.3, shape=(9,)) != base
    assert graph("p", "q", 0.3, op="sub") != base
    assert graph("p", "q", 1.0) != base  # 1.0 is an inline constant


@pytest.mark.parametrize("table", _tables())
def test_signature_walk_inside_another(table):
    """A walk can start while another is under way (the garbage collector runs finalizers, and
    through them other threads, at allocations inside a walk): both give their own keys."""
    import gc

    f32 = _float32()

    def graph(name, n):
        out = table.Node("BUFFER", name, (), f32, (8,))
        for i in range(n):  # scalar parameters (the walk allocates for each), each read twice
            out = table.binary_node("mul", out, table.Node("CONST", 0.1 + i % 20, (), f32, (8,)), f32)
        return [out]

    # The inner graph reads the outer one's constants: one walk's numbers in those nodes must
    # not be taken for the other's.
    outer, inner = graph("x", 40), graph("y", 20)
    expected_outer, expected_inner = _signature(table, outer)[1], _signature(table, inner)[1]
    inner_keys = []

    class Cycle:
        def __del__(self):
            inner_keys.append(_signature(table, inner)[1])

    threshold = gc.get_threshold()
    try:
        # A collection after ``allocations`` more container allocations: the walk's own (its
        # lists, a tuple per scalar parameter) reach it at some point of the walk, which then
        # finalizes the cycle (a nested walk) there.
        for allocations in range(2, 60, 2):
            gc.collect()
            cycle = Cycle()
            cycle.me = cycle
            del cycle
            gc.set_threshold(allocations)
            key = _signature(table, outer)[1]
            gc.set_threshold(*threshold)
            assert key == expected_outer
        gc.collect()
    finally:
        gc.set_threshold(*threshold)
    assert inner_keys and all(k == expected_inner for k in inner_keys)


def test_both_tables_give_one_signature():
    """The signature's key is what the schedule cache is keyed by: the C table and the Python
    one must write one structure (their value numbers may differ, one to one) and the same
    bindings for one graph."""
    tables = [t.values[0] for t in _tables() if not t.marks]
    if len(tables) < 2:
        pytest.skip("the C node table is not built here (no C compiler or Python headers)")
    results = []
    for table in tables:
        _, key, *parts, slots = _signature(table, _walk_graph(table))
        results.append((_decode(key), parts, sorted(slots.values())))
    (roots_c, items_c), *rest_c = results[0]
    (roots_py, items_py), *rest_py = results[1]
    assert roots_c == roots_py and rest_c == rest_py and len(items_c) == len(items_py)
    for item_c, item_py in zip(items_c, items_py):
        assert item_c[1] == item_py[1] and item_c[5] == item_py[5]
        if item_c[1] != 0:  # a leaf's position
            assert item_c[2] == item_py[2]
    for field in (0, 3, 4):
        _one_number_each((c[field], p[field]) for c, p in zip(items_c, items_py))
    _one_number_each((c[2], p[2]) for c, p in zip(items_c, items_py) if c[1] == 0)


def _configured(table):
    """``table`` with graph.py's configuration (graph.py configures the table it uses)."""
    from torch_zyx.lazy import graph

    if table is not graph.nodes:
        table.configure(graph.UNARY_OPS, graph.BINARY_OPS, graph.COMPARE_OPS, graph.REDUCE_OPS,
                        graph.dtypes.bool_, graph.const)
    return table


@pytest.mark.parametrize("table", _tables())
def test_constructors_check_simplify_and_key(table):
    from torch_zyx import dtypes

    t = _configured(table)
    f32, i64, b = dtypes.float32, dtypes.int64, dtypes.bool_
    x = t.Node("BUFFER", "x", (), f32, (2, 3))
    k = t.Node("BUFFER", "k", (), i64, (2, 3))
    two = t.Node("CONST", 2.5, (), f32, (2, 3))
    assert t.unary("isnan", x).dtype is b and t.unary("exp", x).dtype is f32
    assert t.binary("lt", x, two).dtype is b and t.binary("add", x, two).srcs == (x, two)
    with pytest.raises(AssertionError):
        t.binary("add", x, k)  # dtypes differ
    with pytest.raises(AssertionError):
        t.unary("nope", x)
    assert t.where(t.binary("lt", x, two), x, two).srcs[1:] == (x, two)
    assert t.cast(x, f32) is x and t.cast(x, i64).op == "CAST"
    cast_const = t.cast(two, i64)  # a constant converts (graph.const)
    assert (cast_const.op, cast_const.arg, cast_const.dtype) == ("CONST", 2, i64)
    total = t.reduce("sum", x, (-1, 1, -1))
    assert (total.arg, total.shape) == (("sum", (1,)), (2, 1))
    assert t.reduce("max", x, ()) is x and t.reduce("sum", x, [0, 1]).shape == (1, 1)
    flat = t.reshape(x, [6])
    assert flat.shape == (6,) and t.reshape(x, (2, 3)) is x
    assert t.reshape(flat, (3, 2)).srcs == (x,)  # a reshape of a reshape
    assert t.reshape(two, (6,)).op == "CONST"
    with pytest.raises(AssertionError):
        t.reshape(x, (5,))
    row = t.reduce("sum", x, (1,))
    wide = t.expand(row, (2, 3))
    assert wide.op == "EXPAND" and wide.arg == (2, 3) and t.expand(row, [2, 1]) is row
    with pytest.raises(AssertionError):
        t.expand(x, (4, 3))
    part = t.shrink(x, [(0, 2), (1, 3)])
    assert (part.arg, part.shape) == (((0, 2), (1, 3)), (2, 2))
    assert t.shrink(x, ((0, 2), (0, 3))) is x
    assert t.shrink(two, ((0, 1), (0, 3))).op == "CONST"
    assert t.const_like(two, (3,)).shape == (3,)
