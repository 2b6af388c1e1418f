"""The autotuner: per kernel and device, the fastest of the lowering choices that compute the same.

Part of the executor, run where a plan's kernel is lowered for the first time
(``realize._build_plan``) when ``ZYX_AUTOTUNE`` is 1 or 2. The heuristics pick one set of
``LoweringOptions`` per device; the autotuner lowers the kernel under variants of them
(``variants``: each block tile of a GPU matmul, each tensor-core and attention tile, other
work-group sizes, the other vector width, CPU row kernels pipelined or not; level 2 adds more
block tiles), renders each, and keeps the
distinct sources: a variant that changes nothing in this kernel is no candidate. With more than
one candidate it searches: each is compiled and run on buffers of the kernel's own slot sizes
(inputs and temporaries holding random values, never the plan's: a compiled graph's are
placeholders; its own scalar parameters), timed over a few launches after a warm-up, and its
outputs compared with the heuristic's; one that differs beyond rounding is dropped. The fastest
wins.

Choices are stored under the cache directory (``autotune/<device>.json``), keyed by the device's
description (name, driver) and the kernel as the heuristics render it, and read by the next
process: a kernel found there is lowered with its stored choice and not searched again
(``counters()``: ``autotune_searches``, ``autotune_cache_hits``). A file that is truncated,
garbled or from another version is ignored, reported once and rewritten. Kernels that draw random
numbers or scatter are not searched (their outputs cannot be compared run to run, or depend on
what the buffer held).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ..codegen.lower import LoweringOptions, lower
from ..codegen.lower_attention import LARGE_HEAD_TILES
from ..codegen.lower_attention import TILES as ATTENTION_TILES
from ..codegen.lower_tiles import GPU_TILES, BlockTile
from ..config import CONFIG, DEBUG_AUTOTUNE
from ..counters import bump
from ..memory.buffer import Buffer

log = logging.getLogger("torch_zyx")

_VERSION = 1
# Timed launches per candidate (after one that compiles and warms it), of which the median counts.
_REPEATS = 5
# Level 2's extra block tiles: thinner and smaller blocks.
_MORE_TILES = (BlockTile(128, 64, 8, 8, 4), BlockTile(64, 128, 8, 4, 8), BlockTile(64, 64, 8, 4, 4))


def variants(options: LoweringOptions, renderer: str, level: int) -> list[tuple[str, LoweringOptions]]:
    """(description, options) of the choices tried for a device's kernels, the heuristic's first."""
    out = [("heuristic", options)]
    if options.block_tiles:
        tiles = GPU_TILES + (_MORE_TILES if level >= 2 else ())
        out += [(f"block tile {t.bm}x{t.bn}x{t.bk}/{t.tm}x{t.tn}",
                 dataclasses.replace(options, block_tiles=(t,))) for t in tiles]
    if options.tensor_cores:
        out += [(f"tensor-core tile {t.bm}x{t.bn}x{t.bk}/{t.warps_m}x{t.warps_n} warps",
                 dataclasses.replace(options, mma_tiles=(t,))) for t in options.mma_tiles]
        out += [(f"attention tile {t.rows} rows/{t.warps} warps, {t.keys} keys",
                 dataclasses.replace(options, attention_tile=t)) for t in ATTENTION_TILES + LARGE_HEAD_TILES]
    if options.group_size:
        out += [(f"group {size}", dataclasses.replace(options, group_size=size))
                for size in (128, 512) if size != options.group_size]
    if options.few_group_size:
        # (Kernels of fewer outputs than compute units take this one: a GPU's row sums.)
        out += [(f"few-output group {size}", dataclasses.replace(options, few_group_size=size))
                for size in (256, 512) if size != options.few_group_size]
    if options.vector_width > 1:
        out.append(("vector width 1", dataclasses.replace(options, vector_width=1)))
    if renderer == "llvm":
        out.append((f"pipelined rows {not options.pipeline_rows}",
                    dataclasses.replace(options, pipeline_rows=not options.pipeline_rows)))
    return out


class _Store:
    """One device's stored choices (a JSON file with a checksum of its entries)."""

    def __init__(self, device_key: str):
        self.device_key = device_key
        name = hashlib.sha1(device_key.encode()).hexdigest()[:16]
        self.path = Path(CONFIG.cache_dir) / "autotune" / f"{name}.json"
        self.entries: dict[str, str] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except OSError:
            return  # none yet
        try:
            data = json.loads(raw.decode())
            entries = data["entries"]
            if data.get("version") != _VERSION or data.get("checksum") != _checksum(entries) \
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
                raise ValueError("a checksum or version that does not match its entries")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("zyx: ignoring the autotuning results in %s (%s); kernels are searched again "
                        "and the file rewritten", self.path, exc)
            return
        self.entries = dict(entries)

    def save(self) -> None:
        data = {"version": _VERSION, "device": self.device_key, "entries": self.entries,
                "checksum": _checksum(self.entries)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(f".{threading.get_ident()}.tmp")
            partial.write_text(json.dumps(data, indent=1, sort_keys=True))
            partial.replace(self.path)  # whole or not at all, also next to another process
        except OSError as exc:
            log.warning("zyx: could not store autotuning results in %s: %s", self.path, exc)


def _checksum(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


_stores: dict[str, _Store] = {}
_lock = threading.Lock()


def _store(device) -> _Store:
    key = device.runtime.describe()
    with _lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = _Store(key)
        return store


def tuned(device, kernel, dtypes_: list, sig, schedule) -> tuple:
    """(loop IR, source) of ``kernel`` lowered with the best choice for ``device``: stored, or
    searched now (module docstring)."""
    level = CONFIG.autotune
    heuristic = lower(kernel, "zyx_kernel", dtypes_, device.lowering)
    source = device.render(heuristic, **device.render_options)
    if kernel.params or any(store.view is not None and store.view[0] == "scatter" for store in kernel.stores):
        return heuristic, source
    store = _store(device)
    key = hashlib.sha1(f"{level}\n{source}".encode()).hexdigest()
    candidates = {source: ("heuristic", heuristic)}
    # Every choice's source, those that render as another's included (a stored choice names one).
    described = {"heuristic": source}
    for description, options in variants(device.lowering, device.runtime.renderer, level)[1:]:
        try:
            loop = lower(kernel, "zyx_kernel", dtypes_, options)
        except Exception as exc:  # noqa: BLE001  (a choice this kernel cannot take is no candidate)
            log.debug("zyx autotune: %s not possible here: %s", description, exc)
            continue
        text = device.render(loop, **device.render_options)
        candidates.setdefault(text, (description, loop))
        described[description] = text
    if len(candidates) == 1:
        return heuristic, source
    text = described.get(store.entries.get(key))
    if text is not None:
        bump("autotune_cache_hits")
        return candidates[text][1], text
    bump("autotune_searches")
    best = _search(device, kernel, dtypes_, sig, schedule, list(candidates.items()))
    store.entries[key] = candidates[best][0]
    store.save()
    return candidates[best][1], best


def _search(device, kernel, dtypes_: list, sig, schedule, candidates: list) -> str:
    """The source of the fastest candidate whose outputs match the first's (the heuristic's)."""
    buffers = _slot_buffers(device, kernel, dtypes_, sig, schedule)
    outputs = [kernel.slots.index(("tmp", st.target)) for st in kernel.stores]
    times: dict[str, float] = {}
    reference = None
    progress = _progress(len(candidates), kernel)
    for source, (description, loop) in candidates:
        name = "k_" + hashlib.sha1(source.encode()).hexdigest()[:12]
        program = device.program(name, source.replace("zyx_kernel(", f"{name}("))
        _run(device, program, loop, buffers)  # compiled and warm
        samples = []
        for _ in range(_REPEATS):
            start = time.perf_counter()
            _run(device, program, loop, buffers)
            samples.append(time.perf_counter() - start)
        values = [_read(device, buffers[i]) for i in outputs]
        if reference is None:
            reference = values
        elif not all(_matches(v, r) for v, r in zip(values, reference)):
            log.warning("zyx autotune: %s of kernel %s computes other values than the heuristic's; "
                        "not used", description, name)
            progress.update(1)
            continue
        times[source] = statistics.median(samples)
        if CONFIG.debug & DEBUG_AUTOTUNE:
            print(f"zyx autotune {name}: {description}: {times[source] * 1e6:.1f} us")
        progress.update(1)
    progress.close()
    return min(times, key=times.get)


def _slot_buffers(device, kernel, dtypes_: list, sig, schedule) -> list:
    """A buffer for each of the kernel's slots: fresh ones of its inputs' and temporaries' sizes
    holding random floats (integers: zeros, valid indices), and its scalar parameters."""
    rng = np.random.default_rng(0)
    out = []
    for (kind, ref), dtype in zip(kernel.slots, dtypes_):
        if kind == "scalars":
            out.append(device.constant(sig.scalar_dtypes[ref], sig.scalar_values[ref]))
        else:
            numel = sig.buffers[ref].numel if kind == "in" else schedule.temps[ref][1]
            buffer = Buffer(device, dtype, numel)
            host = _random(rng, dtype, numel)
            if numel:
                buffer.write_from_host(host.ctypes.data, host, fresh=True)
            out.append(buffer)
    return out


def _random(rng, dtype, numel: int) -> np.ndarray:
    """``numel`` elements of ``dtype`` as host bytes: standard normal floats, zero integers."""
    if dtype.kind != "f":
        return np.zeros(numel * dtype.itemsize, dtype=np.uint8)
    values = rng.standard_normal(numel, dtype=np.float32)
    if dtype.itemsize == 8:
        return values.astype(np.float64)
    if dtype.name == "float16":
        return values.astype(np.float16)
    if dtype.name == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)  # (truncated: any values will do)
    return values


def _run(device, program, loop, buffers: list) -> None:
    wait = device.events.take([b.id for b in buffers])
    event = program.launch(buffers, [], loop.global_size, loop.work, wait)
    event.wait()
    device.settle()


def _read(device, buffer) -> np.ndarray:
    host = np.empty(buffer.nbytes, dtype=np.uint8)
    if buffer.nbytes:
        device.pool.pool_to_host(buffer.raw, host.ctypes.data, buffer.nbytes, device.events.take([buffer.id]))
    kind = buffer.dtype
    if kind.kind == "f" and kind.itemsize in (4, 8):
        return host.view(np.float32 if kind.itemsize == 4 else np.float64).astype(np.float64)
    if kind.name == "float16":
        return host.view(np.float16).astype(np.float64)
    if kind.name == "bfloat16":
        return (host.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return host


def _matches(values: np.ndarray, reference: np.ndarray) -> bool:
    """Equal up to the rounding of another summation order."""
    if values.dtype == np.uint8:
        return bool(np.array_equal(values, reference))
    scale = float(np.nanmax(np.abs(reference))) if reference.size and np.isfinite(reference).any() else 1.0
    return bool(np.allclose(values, reference, rtol=1e-3, atol=1e-4 * max(scale, 1e-30), equal_nan=True))


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, kernel):
    """A progress bar on a terminal (tqdm), else nothing."""
    if not sys.stderr.isatty():
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=total, desc=f"zyx autotune {kernel.shape}", leave=False, file=sys.stderr)
