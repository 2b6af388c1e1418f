"""ZYX_AUTOTUNE (execute/autotune.py): kernels searched once, the choices stored per device and
found by the next process, damaged stores ignored and rewritten, tuned results equal CPU torch's.

The CPU device's choice is whether row kernels (softmax, layer norm) pipeline their rows; devices
with work groups (the OpenCL pass: PoCL) choose the group size of grouped reductions (a sum of
few long rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_zyx
from torch_zyx.config import CONFIG
from torch_zyx.execute import autotune, realize

# Row kernels (softmax, layer norm: choices on the CPU) and a grouped sum (on work-group devices).
PROGRAM = """
import json, torch, torch_zyx
torch.manual_seed(0)
x, long_rows = torch.randn(96, 1000), torch.randn(64, 5000)
torch_zyx.reset_counters()
y = torch.softmax(x.to("zyx"), -1).cpu()
z = torch.nn.functional.layer_norm(x.to("zyx"), (1000,)).cpu()
s = long_rows.to("zyx").sum(-1).cpu()
torch.testing.assert_close(y, torch.softmax(x, -1))
torch.testing.assert_close(z, torch.nn.functional.layer_norm(x, (1000,)), rtol=1e-4, atol=1e-4)
torch.testing.assert_close(s, long_rows.sum(-1), rtol=1e-4, atol=1e-3)
counts = torch_zyx.counters()
print(json.dumps({k: counts[k] for k in ("autotune_searches", "autotune_cache_hits")}))
"""


def _run(cache: Path, level: int = 1) -> tuple[dict, str]:
    env = dict(os.environ, ZYX_CACHE_DIR=str(cache), ZYX_AUTOTUNE=str(level))
    result = subprocess.run([sys.executable, "-c", "import torch_zyx\n" + PROGRAM], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def _store_file(cache: Path) -> Path:
    files = list((cache / "autotune").glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def test_search_once_then_the_next_process_reads_the_choices(tmp_path):
    first, _ = _run(tmp_path)
    searched = first["autotune_searches"]
    assert searched >= 1 and first["autotune_cache_hits"] == 0
    stored = json.loads(_store_file(tmp_path).read_text())
    assert len(stored["entries"]) == searched and stored["device"]
    second, _ = _run(tmp_path)
    assert second == {"autotune_searches": 0, "autotune_cache_hits": searched}


@pytest.mark.parametrize("damage", ["truncated", "garbled", "edited", "empty"])
def test_a_damaged_store_is_ignored_reported_once_and_rewritten(tmp_path, damage):
    searched = _run(tmp_path)[0]["autotune_searches"]
    path = _store_file(tmp_path)
    text = path.read_text()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "garbled":
        path.write_bytes(os.urandom(300))
    elif damage == "edited":  # entries changed without the checksum
        data = json.loads(text)
        data["entries"] = {key: "group 7" for key in data["entries"]}
        path.write_text(json.dumps(data))
    else:
        path.write_text("")
    counts, stderr = _run(tmp_path)
    assert counts == {"autotune_searches": searched, "autotune_cache_hits": 0}
    assert stderr.count("ignoring the autotuning results") == 1
    assert json.loads(path.read_text())["entries"]  # rewritten whole
    assert _run(tmp_path)[0]["autotune_cache_hits"] == searched


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    """Autotuning on in this process, its store in a fresh directory, no plans cached."""
    monkeypatch.setattr(CONFIG, "autotune", 1)
    monkeypatch.setattr(CONFIG, "cache_dir", tmp_path)
    autotune._stores.clear()
    realize._plans.clear()
    realize._lowered.clear()
    yield tmp_path
    autotune._stores.clear()
    realize._plans.clear()
    realize._lowered.clear()


def test_every_stored_choice_computes_what_cpu_torch_does(tuning):
    """Each choice the search may store, forced in turn, gives CPU torch's results (the search
    itself drops a candidate whose outputs differ from the heuristic's)."""
    from torch_zyx.execute.contexts import devices

    device = devices()[0]
    if device.runtime.renderer == "llvm":
        x = torch.randn(64, 700)

        def op(t):
            return torch.softmax(t, -1)
    else:
        x = torch.randn(64, 5000)

        def op(t):
            return t.sum(-1)
    op(x.to("zyx")).cpu()  # searched and stored
    store = autotune._store(device)
    (key,) = store.entries
    choices = [description for description, _ in autotune.variants(device.lowering, device.runtime.renderer, 1)]
    assert len(choices) >= 2
    for choice in choices:
        store.entries[key] = choice
        realize._plans.clear()
        realize._lowered.clear()
        torch_zyx.reset_counters()
        torch.testing.assert_close(op(x.to("zyx")).cpu(), op(x), rtol=1e-4, atol=1e-3)
        counts = torch_zyx.counters()
        assert counts["autotune_searches"] == 0
        assert counts["autotune_cache_hits"] == 1 or choice != "heuristic"


def test_kernels_without_choices_are_not_searched(tuning):
    torch_zyx.reset_counters()
    x = torch.randn(1000)
    torch.testing.assert_close((x.to("zyx") * 2 + 1).cpu(), x * 2 + 1)
    assert torch_zyx.counters()["autotune_searches"] in (0, 1)  # one elementwise kernel at most
    torch.testing.assert_close(torch.rand(100, device="zyx").cpu().shape, torch.Size([100]))
