"""The user-facing tools: the demo (``python -m torch_zyx.demo``) and the environment report
(``python -m torch_zyx.info``), each run as a user runs it, in a subprocess, plus the report's
data checked in-process.

The demo exits non-zero when zyx's results differ from CPU torch's beyond its tolerances, so
running it here is also an end-to-end check of fusion (the chain must stay one kernel) and of
training with torch.optim.
"""

import re
import subprocess
import sys

import pytest
import torch

from torch_zyx import config, info
from torch_zyx.config import CONFIG

# Generous next to the demo's ~5-10 s on an idle 2-core box: under a parallel test run (-n auto)
# its timed loops share the cores, and the first import may compile the device guard (~12 s).
TIMEOUT_S = 240


def _run(module: str) -> str:
    result = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                            timeout=TIMEOUT_S, check=False)
    assert result.returncode == 0, f"{module} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_demo():
    out = _run("torch_zyx.demo")
    kernels = re.search(r"kernels zyx launched per call: (\d+)", out)
    assert kernels and int(kernels.group(1)) == 1, out  # the chain is fused into one kernel
    assert re.search(r"first call: [\d.]+ ms \(compiling 1 kernel included\)", out), out
    assert re.search(r"warm call: zyx [\d.]+ ms, CPU torch [\d.]+ ms: zyx [\d.]+x (faster|slower)", out), out
    assert re.search(r"warm step: zyx [\d.]+ ms, CPU torch [\d.]+ ms", out), out
    assert re.search(r"step\s+loss zyx\s+loss CPU", out), out
    rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)$", out, re.MULTILINE)
    assert len(rows) >= 5 and rows[0][0] == "0", out
    assert re.search(r"kernels zyx launched per step once warm: \d+", out), out
    assert re.search(r"first step: [\d.]+ s \(compiling \d+ kernels included\)", out), out
    assert "float32 rounding, not bit for bit" in out
    assert re.search(r"max \|weight difference\| after \d+ steps: .*\n\s+within the tolerance", out), out
    assert "result: zyx matches CPU torch within tolerance" in out


def test_info_output():
    out = _run("torch_zyx.info")
    for title in ("== Versions", "== Backends", "== Devices zyx sees", "== Native parts", "== Paths",
                  "== Configuration (CONFIG)", "== Environment"):
        assert title in out, out
    assert f"torch: {torch.__version__}" in out
    assert re.search(r"^  Python: \d+\.\d+", out, re.MULTILINE), out
    assert re.search(r"^  llvmlite: \d", out, re.MULTILINE), out
    assert re.search(r"^  cpu +found: LLVM \d", out, re.MULTILINE), out
    # (found on a GPU machine; elsewhere the reason: cuda-bindings, the driver or NVRTC missing)
    assert re.search(r"^  cuda +(found: \S|not found: \S)", out, re.MULTILINE), out
    assert re.search(r"^  zyx:0 ", out, re.MULTILINE), out
    assert "config.json: " in out and "cache directory: " in out
    # (as a fresh process reads them: test_backends.py adds OpenCL to this process's CONFIG)
    assert f"backends: {config._load().backends}" in out


def test_info_data():
    report = info.collect()
    assert not any(isinstance(section, dict) and "error" in section for section in report.values()), report
    backends = report["Backends"]
    assert backends["cpu"]["found"] is True and "LLVM" in backends["cpu"]["detail"]
    from torch_zyx.execute.contexts import cuda_unavailable

    missing = cuda_unavailable()
    assert backends["cuda"]["found"] is not bool(missing)
    assert missing in backends["cuda"].get("reason", missing)
    for entry in backends.values():
        assert entry["found"] or (isinstance(entry["reason"], str) and entry["reason"])
    devices = report["Devices zyx sees"]
    assert [d["index"] for d in devices] == list(range(torch.zyx.device_count()))
    assert devices[0]["backend"] == (CONFIG.backends[0] if CONFIG.backends else "cpu")
    assert set(report["Configuration (CONFIG)"]) >= {"debug", "backends", "threads", "cache_dir", "native"}
    assert report["Paths"]["cache directory"] == str(CONFIG.cache_dir)
    assert isinstance(report["Paths"]["config.json exists"], bool)
    assert report["Versions"]["torch"] == torch.__version__


def test_info_missing_packages(monkeypatch):
    """A backend whose package is missing is reported not found, with the package named."""
    real_find_spec = info.importlib.util.find_spec
    monkeypatch.setattr(info.importlib.util, "find_spec",
                        lambda name, *args: None if name in ("pyopencl", "llvmlite") else real_find_spec(name, *args))
    backends = info.backends()
    assert backends["opencl"]["found"] is False and backends["cpu"]["found"] is False
    assert "pyopencl is not installed" in backends["opencl"]["reason"]
    assert "llvmlite is not installed" in backends["cpu"]["reason"]


def test_info_probe_errors_are_reported(monkeypatch):
    """A probe that raises becomes its section's error; the rest of the report still comes."""
    def broken():
        raise RuntimeError("no devices today")

    monkeypatch.setattr(torch.zyx, "device_count", broken)
    report = info.collect()
    assert report["Devices zyx sees"] == {"error": "RuntimeError: no devices today"}
    text = info.format_report(report)
    assert "probe failed: RuntimeError: no devices today" in text
    assert "== Configuration (CONFIG)" in text


@pytest.mark.parametrize("value, expected", [(True, "yes"), ({}, "(none)"), ({"A": "1"}, "A=1"), (3, "3")])
def test_info_format_value(value, expected):
    assert info._format_value(value) == expected
