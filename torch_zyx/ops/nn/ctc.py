"""CTC loss (forward and backward): the alpha/beta recursions of Graves et al. in log space.

The recursion runs over time, which is static: a Python loop over T records one step per
time position, each step vectorized over (batch, extended label). The three predecessors of
a label position (same, previous, two back when allowed) are stacked on a small axis and
combined with a max/sum REDUCE (a stable log-sum-exp); reductions store their result, so each
step reads the previous one from memory instead of inlining the whole history.
"""

from __future__ import annotations

import torch

from ... import dtypes
from ...lazy import graph as g
from ...lazy.graph import Node
from ...record.tensor import ZyxTensor, read, wrap
from ...record.transfer import from_cpu, zdtype
from ..registry import aten, register

_NEG_INF = float("-inf")


def _lengths(value, device) -> Node:
    """Per-batch lengths (Python list or tensor) as an int64 (N,) node."""
    if isinstance(value, ZyxTensor):
        return g.cast(read(value), dtypes.int64)
    if isinstance(value, torch.Tensor):
        return from_cpu(value.to(torch.int64), device)
    return from_cpu(torch.tensor(list(value), dtype=torch.int64), device)


def _logsumexp_last(x: Node) -> Node:
    """log(sum(exp(x))) over the last axis (kept as 1); all -inf gives -inf."""
    last = len(x.shape) - 1
    m = g.reduce("max", x, (last,))
    finite = g.binary("lt", g.const(_NEG_INF, x.dtype, m.shape), m)
    safe = g.where(finite, m, g.const(0.0, x.dtype, m.shape))
    total = g.reduce("sum", g.unary("exp", g.binary("sub", x, g.expand(safe, x.shape))), (last,))
    return g.where(finite, g.binary("add", safe, g.unary("log", total)), g.const(_NEG_INF, x.dtype, m.shape))


def _shift(x: Node, k: int, fill) -> Node:
    """x[..., s - k] along the last axis (``fill`` where s < k)."""
    n = x.shape[-1]
    if k == 0:
        return x
    bounds = tuple((0, s) for s in x.shape[:-1]) + ((0, n - k),)
    pad = ((0, 0),) * (len(x.shape) - 1) + ((k, 0),)
    valid = g.pad(g.const(True, dtypes.bool_, x.shape[:-1] + (n - k,)), pad)
    return g.where(valid, g.pad(g.shrink(x, bounds), pad), g.const(fill, x.dtype, x.shape))


class _Problem:
    """Everything both recursions need: extended labels, their log-probs per time step, masks."""

    def __init__(self, log_probs, targets, input_lengths, target_lengths, blank):
        dev = log_probs._storage.device
        self.device = dev
        lp = read(log_probs)
        self.dtype = lp.dtype
        t_len, n, c = lp.shape
        if targets.dim() == 1:  # concatenated targets: padded rows from the (host) lengths
            tl = target_lengths.tolist() if isinstance(target_lengths, torch.Tensor) else list(target_lengths)
            width = max(tl) if tl else 0
            flat = g.cast(read(targets) if isinstance(targets, ZyxTensor) else from_cpu(targets, dev),
                          dtypes.int64)
            rows, start = [], 0
            for length in tl:
                row = g.shrink(flat, ((start, start + length),))
                rows.append(g.reshape(g.pad(row, ((0, width - length),)), (1, width)))
                start += length
            tgt = rows[0]
            for i, row in enumerate(rows[1:], start=1):
                tgt = g.binary("add", g.pad(tgt, ((0, 1), (0, 0))), g.pad(row, ((i, 0), (0, 0))))
        else:
            tgt = g.cast(read(targets), dtypes.int64)
        s_max = tgt.shape[1]
        ext = 2 * s_max + 1
        self.t_len, self.n, self.c, self.ext = t_len, n, c, ext
        # Extended labels: blank, l1, blank, l2, ..., blank: (N, L).
        inter = g.reshape(g.pad(g.reshape(tgt, (n, s_max, 1)), ((0, 0), (0, 0), (1, 0))), (n, 2 * s_max))
        blank_fill = g.const(blank, dtypes.int64, (n, ext))
        odd = g.binary("eq", g.binary("mod", g.expand(g.reshape(g.iota((ext,)), (1, ext)), (n, ext)),
                                      g.const(2, dtypes.int64, (n, ext))), g.const(1, dtypes.int64, (n, ext)))
        self.labels = g.where(odd, g.pad(inter, ((0, 0), (0, 1))), blank_fill)
        # Skipping a blank (s-2 → s) is allowed onto a label that differs from the one two back.
        two_back = _shift(self.labels, 2, blank)
        self.skip = g.binary("and", odd, g.binary("ne", self.labels, two_back))
        self.in_len = _lengths(input_lengths, dev)
        self.tgt_len = _lengths(target_lengths, dev)
        self.valid = g.binary("lt", g.expand(g.reshape(g.iota((ext,)), (1, ext)), (n, ext)),
                              g.expand(g.reshape(g.binary("add", g.binary("mul", self.tgt_len,
                                                                          g.const(2, dtypes.int64, (n,))),
                                                          g.const(1, dtypes.int64, (n,))), (n, 1)), (n, ext)))
        # log-probs of the extended labels at every time step: (T, N, L), one-hot over classes.
        wide = (t_len, n, ext, c)
        hit = g.binary("eq", g.expand(g.reshape(self.labels, (1, n, ext, 1)), wide),
                       g.expand(g.reshape(g.iota((c,)), (1, 1, 1, c)), wide))
        src = g.expand(g.reshape(lp, (t_len, n, 1, c)), wide)
        self.lp = lp
        self.label_lp = g.reshape(g.reduce("sum", g.where(hit, src, g.const(0.0, lp.dtype, wide)), (3,)),
                                  (t_len, n, ext))

    def at(self, t: int) -> Node:
        return g.reshape(g.shrink(self.label_lp, ((t, t + 1), (0, self.n), (0, self.ext))),
                         (self.n, self.ext))

    def ninf(self) -> Node:
        return g.const(_NEG_INF, self.dtype, (self.n, self.ext))


def _combine(a: Node, b: Node, c: Node) -> Node:
    stacked = g.binary("add", g.binary("add", g.pad(g.reshape(a, a.shape + (1,)), ((0, 0), (0, 0), (0, 2))),
                                       g.pad(g.reshape(b, b.shape + (1,)), ((0, 0), (0, 0), (1, 1)))),
                       g.pad(g.reshape(c, c.shape + (1,)), ((0, 0), (0, 0), (2, 0))))
    # pad fills zeros; the -inf candidates stay -inf because each slot has one source only.
    return g.reshape(_logsumexp_last(stacked), a.shape)


def _alpha(p: _Problem) -> list[Node]:
    ninf = p.ninf()
    first = g.binary("lt", g.expand(g.reshape(g.iota((p.ext,)), (1, p.ext)), (p.n, p.ext)),
                     g.const(2, dtypes.int64, (p.n, p.ext)))
    alpha = g.where(g.binary("and", first, p.valid), p.at(0), ninf)
    out = [alpha]
    for t in range(1, p.t_len):
        prev1 = _shift(alpha, 1, _NEG_INF)
        prev2 = g.where(p.skip, _shift(alpha, 2, _NEG_INF), ninf)
        step = g.binary("add", _combine(alpha, prev1, prev2), p.at(t))
        alpha = g.where(p.valid, step, ninf)
        out.append(alpha)
    return out


def _pick_time(rows: list[Node], when: Node, n: int, ext: int) -> Node:
    """rows[when[b]][b, :] for each batch b: (N, L)."""
    stacked = g.reshape(rows[0], (1, n, ext))
    for i, r in enumerate(rows[1:], start=1):
        stacked = g.binary("add", g.pad(stacked, ((0, 1), (0, 0), (0, 0))),
                           g.pad(g.reshape(r, (1, n, ext)), ((i, 0), (0, 0), (0, 0))))
    t_len = len(rows)
    wide = (t_len, n, ext)
    hit = g.binary("eq", g.expand(g.reshape(g.iota((t_len,)), (t_len, 1, 1)), wide),
                   g.expand(g.reshape(when, (1, n, 1)), wide))
    return g.reshape(g.reduce("sum", g.where(hit, stacked, g.const(0.0, stacked.dtype, wide)), (0,)),
                     (n, ext))


def _stack(rows: list[Node]) -> Node:
    n, ext = rows[0].shape
    out = g.reshape(rows[0], (1, n, ext))
    for i, r in enumerate(rows[1:], start=1):
        out = g.binary("add", g.pad(out, ((0, 1), (0, 0), (0, 0))), g.pad(g.reshape(r, (1, n, ext)),
                                                                           ((i, 0), (0, 0), (0, 0))))
    return out


def _nll(p: _Problem, alphas: list[Node]) -> Node:
    last_t = g.binary("sub", p.in_len, g.const(1, dtypes.int64, (p.n,)))
    # -inf rows would make the time pick's sum NaN: pick finite stand-ins, restore -inf after.
    finite = [g.where(g.binary("eq", a, p.ninf()), g.const(0.0, p.dtype, a.shape), a) for a in alphas]
    masks = [g.cast(g.binary("eq", a, p.ninf()), p.dtype) for a in alphas]
    final = _pick_time(finite, last_t, p.n, p.ext)
    is_ninf = g.binary("lt", g.const(0.5, p.dtype, final.shape), _pick_time(masks, last_t, p.n, p.ext))
    final = g.where(is_ninf, p.ninf(), final)
    end = g.binary("mul", p.tgt_len, g.const(2, dtypes.int64, (p.n,)))  # index of the last blank
    pos = g.expand(g.reshape(g.iota((p.ext,)), (1, p.ext)), (p.n, p.ext))
    e = g.expand(g.reshape(end, (p.n, 1)), (p.n, p.ext))
    take = g.binary("or", g.binary("eq", pos, e),
                    g.binary("eq", pos, g.binary("sub", e, g.const(1, dtypes.int64, e.shape))))
    ends = g.where(take, final, p.ninf())
    return g.unary("neg", g.reshape(_logsumexp_last(ends), (p.n,)))


@register(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    if log_probs.dim() != 3:
        raise NotImplementedError("zyx: ctc_loss on unbatched input")  # F.ctc_loss batches it first
    p = _Problem(log_probs, targets, input_lengths, target_lengths, blank)
    alphas = _alpha(p)
    nll = _nll(p, alphas)
    if zero_infinity:
        inf = g.binary("eq", nll, g.const(float("inf"), p.dtype, nll.shape))
        nll = g.where(inf, g.const(0.0, p.dtype, nll.shape), nll)
    # log_alpha: (N, T, L), -inf past each input length.
    stacked = _stack(alphas)
    t_idx = g.expand(g.reshape(g.iota((p.t_len,)), (p.t_len, 1, 1)), stacked.shape)
    live = g.binary("lt", t_idx, g.expand(g.reshape(p.in_len, (1, p.n, 1)), stacked.shape))
    stacked = g.where(live, stacked, g.const(_NEG_INF, p.dtype, stacked.shape))
    dev = log_probs._storage.device
    return wrap(g.cast(nll, zdtype(log_probs.dtype)), dev), wrap(g.permute(stacked, (1, 0, 2)), dev)


@register(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                      blank, zero_infinity=False):
    """d loss / d log_probs[t, b, c] = exp(lp) - exp(logsumexp_{s: l'_s = c}(alpha + beta) + nll - lp),
    zero past the input length (and for infinite losses when zero_infinity)."""
    p = _Problem(log_probs, targets, input_lengths, target_lengths, blank)
    n, ext, t_len, c = p.n, p.ext, p.t_len, p.c
    ninf = p.ninf()
    alphas = [g.reshape(g.shrink(g.permute(read(log_alpha), (1, 0, 2)), ((t, t + 1), (0, n), (0, ext))),
                        (n, ext))
              for t in range(t_len)]
    # beta: backward recursion; it starts at each sequence's own last time step.
    last_t = g.binary("sub", p.in_len, g.const(1, dtypes.int64, (n,)))
    end = g.expand(g.reshape(g.binary("mul", p.tgt_len, g.const(2, dtypes.int64, (n,))), (n, 1)), (n, ext))
    pos = g.expand(g.reshape(g.iota((ext,)), (1, ext)), (n, ext))
    at_end = g.binary("or", g.binary("eq", pos, end), g.binary("eq", pos, g.binary("sub", end, g.const(
        1, dtypes.int64, end.shape))))
    skip_next = _shift_left(p.skip, 2, False)
    betas: list[Node] = [ninf] * t_len
    beta = ninf
    for t in range(t_len - 1, -1, -1):
        is_last = g.expand(g.reshape(g.binary("eq", last_t, g.const(t, dtypes.int64, (n,))), (n, 1)),
                           (n, ext))
        start = g.where(at_end, p.at(t), ninf)
        nxt1 = _shift_left(beta, 1, _NEG_INF)
        nxt2 = g.where(skip_next, _shift_left(beta, 2, _NEG_INF), ninf)
        step = g.binary("add", _combine(beta, nxt1, nxt2), p.at(t))
        beta = g.where(p.valid, g.where(is_last, start, step), ninf)
        betas[t] = beta
    ab = _stack([g.binary("add", a, b) for a, b in zip(alphas, betas)])  # (T, N, L)
    wide = (t_len, n, ext, c)
    hit = g.binary("eq", g.expand(g.reshape(p.labels, (1, n, ext, 1)), wide),
                   g.expand(g.reshape(g.iota((c,)), (1, 1, 1, c)), wide))
    per_class = g.where(hit, g.expand(g.reshape(ab, (t_len, n, ext, 1)), wide),
                        g.const(_NEG_INF, p.dtype, wide))
    lcab = g.reshape(_logsumexp_last(g.permute(per_class, (0, 1, 3, 2))), (t_len, n, c))
    nll = g.cast(read(neg_log_likelihood), p.dtype)
    lp = p.lp
    nll_w = g.expand(g.reshape(nll, (1, n, 1)), lp.shape)
    res = g.binary("sub", g.unary("exp", lp),
                   g.unary("exp", g.binary("sub", g.binary("add", lcab, nll_w), lp)))
    gy = g.expand(g.reshape(g.cast(read(grad), p.dtype), (1, n, 1)), lp.shape)
    res = g.binary("mul", res, gy)
    t_idx = g.expand(g.reshape(g.iota((t_len,)), (t_len, 1, 1)), lp.shape)
    live = g.binary("lt", t_idx, g.expand(g.reshape(p.in_len, (1, n, 1)), lp.shape))
    if zero_infinity:
        live = g.binary("and", live, g.binary("ne", nll_w, g.const(float("inf"), p.dtype, lp.shape)))
    res = g.where(live, res, g.const(0.0, p.dtype, lp.shape))
    return wrap(g.cast(res, zdtype(log_probs.dtype)), log_probs._storage.device)


def _shift_left(x: Node, k: int, fill) -> Node:
    """x[..., s + k] along the last axis (``fill`` past the end)."""
    n = x.shape[-1]
    bounds = tuple((0, s) for s in x.shape[:-1]) + ((k, n),)
    pad = ((0, 0),) * (len(x.shape) - 1) + ((0, k),)
    valid = g.pad(g.const(True, dtypes.bool_, x.shape[:-1] + (n - k,)), pad)
    return g.where(valid, g.pad(g.shrink(x, bounds), pad), g.const(fill, x.dtype, x.shape))


def ctc_loss_tensor_lengths(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                            zero_infinity=False):
    """``ctc_loss`` with length tensors, registered for zyx above autograd (torch_zyx._register).

    PyTorch sends tensor subclasses through a composite form that ends dividing the zyx losses
    by ``target_lengths`` where they are, usually on the CPU: a device mismatch. CPU and CUDA
    tensors take a fast path that reads the lengths to the host first; this is that path, so
    the lengths' values come to the host here as they do there."""
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
            raise RuntimeError(f"{name} must be integral")
    return torch.ctc_loss(log_probs, targets, input_lengths.cpu().long().tolist(),
                          target_lengths.cpu().long().tolist(), blank, reduction, zero_infinity)
