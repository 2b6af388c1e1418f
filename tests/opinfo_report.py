"""Summarize a recorded OpInfo run and (with ``--write``) regenerate the expected failures.

Usage::

    ZYX_OPINFO_FULL=1 ZYX_OPINFO_RECORD=/tmp/opinfo .venv/bin/python -m pytest -n auto tests/test_opinfo.py
    .venv/bin/python tests/opinfo_report.py /tmp/opinfo [--write]

A run with an OpenCL device as zyx:0 (``ZYX_BACKENDS=opencl``) is reported with ``--backend
opencl``: its expected failures are the CPU file's plus ``opinfo_expected_failures_opencl.json``,
and ``--write`` rewrites only the OpenCL file, with the failures the CPU file does not list. A
recorded OpenCL run is usually a slice, so the OpenCL entries of tests it did not run are kept.

The pass rate counts (op, dtype) pairs of ``test_forward`` that pass natively (CPU fallback
disabled), for float32 and over all tested dtypes; gradient and error-input variants are
reported separately. Failures are grouped by their one-line reason with numbers masked.

A record of tests/test_opinfo_compile.py (``test_compile_forward_*``, float32 forward through
``torch.compile(backend="zyx")``) gets a section of its own: the compiled pass rate over the ops
whose eager float32 forward passes in the same record (``make test-ops`` records both; without
eager records, over the compiled tests run), the ops that ran a graph op by op
(``compile_fallbacks``) or whose samples Dynamo ran without a graph, and the compiled failures
grouped by cause. ``--write-compile`` rewrites ``opinfo_expected_failures_compile.json`` from it.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

EXPECTED_FILE = Path(__file__).with_name("opinfo_expected_failures.json")
EXPECTED_OPENCL_FILE = Path(__file__).with_name("opinfo_expected_failures_opencl.json")
EXPECTED_COMPILE_FILE = Path(__file__).with_name("opinfo_expected_failures_compile.json")
COMPILE_PREFIX = "test_compile_forward_"
DTYPES = ("float32", "float64", "int64", "int32", "bool", "float16", "bfloat16", "uint16", "uint32", "uint64",
          "complex64", "complex128")


def load(record_dir: Path, info: dict | None = None) -> dict[str, tuple[str, str]]:
    """Test name -> (outcome, reason); the last record of a test wins. ``info`` records (what a
    compiled test's samples did) go to ``info`` (test name -> record) instead."""
    results = {}
    for path in sorted(record_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec["outcome"] == "info":
                    if info is not None:
                        info[rec["test"]] = rec
                    continue
                results[rec["test"]] = (rec["outcome"], rec["reason"])
    return results


def group_key(reason: str) -> str:
    # Shapes, sizes, indices and dtypes differ per sample; masking them groups failures by cause.
    reason = re.sub(r"\(dtypes [^)]*\)", "(dtypes ...)", reason)
    reason = re.sub(r"torch\.\w+\d+", "<dtype>", reason)
    return re.sub(r"(?<![A-Za-z_])\d+", "N", reason)[:110]


def rate(results, names) -> str:
    names = list(names)
    passed = sum(results[n][0] == "pass" for n in names)
    pct = 100.0 * passed / len(names) if names else 0.0
    return f"{passed}/{len(names)} ({pct:.1f}%)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record_dir", type=Path)
    parser.add_argument("--write", action="store_true",
                        help=f"rewrite {EXPECTED_FILE.name} "
                             f"(with --backend opencl: {EXPECTED_OPENCL_FILE.name})")
    parser.add_argument("--backend", choices=("cpu", "opencl"), default="cpu",
                        help="the backend that was zyx:0 in the recorded run")
    parser.add_argument("--top", type=int, default=15, help="failure groups to print")
    parser.add_argument("--write-compile", action="store_true",
                        help=f"rewrite {EXPECTED_COMPILE_FILE.name} from the compiled tests recorded")
    args = parser.parse_args()
    info: dict[str, dict] = {}
    everything = load(args.record_dir, info)
    compiled = {n: r for n, r in everything.items() if n.startswith(COMPILE_PREFIX)}
    results = {n: r for n, r in everything.items() if not n.startswith(COMPILE_PREFIX)}
    if compiled:
        report_compiled(results, compiled, info, args.top, args.write_compile)
        if not results:
            return
        print()
    forward = [n for n in results if n.startswith("test_forward_")]
    print(f"tests recorded: {len(results)}")
    print(f"forward (op, dtype) pairs, all dtypes: {rate(results, forward)}")
    for dtype in DTYPES:
        print(f"  {dtype:9s}: {rate(results, [n for n in forward if n.endswith('_' + dtype)])}")
    print(f"grad (float32): {rate(results, [n for n in results if n.startswith('test_grad_')])}")
    print(f"error inputs:   {rate(results, [n for n in results if n.startswith('test_errors_')])}")

    groups = collections.Counter(group_key(r) for o, r in results.values() if o == "fail")
    print(f"\ntop failure groups ({sum(groups.values())} failures):")
    for key, count in groups.most_common(args.top):
        print(f"  {count:5d}  {key}")

    kinds = collections.Counter(r.split(":", 1)[0] for o, r in results.values() if o == "fail")
    print("by exception type: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    crashes = collections.Counter(n.rsplit("_", 1)[-1] for n, (o, r) in results.items()
                                  if o == "fail" and r.startswith("Crash:"))
    if crashes:
        print("crashes by dtype (last id part): " + ", ".join(f"{k} {v}" for k, v in crashes.most_common()))

    expected = load_expected(EXPECTED_FILE)
    opencl_expected = load_expected(EXPECTED_OPENCL_FILE) if args.backend == "opencl" else {}
    stale = sorted(n for n in {**expected, **opencl_expected} if results.get(n, ("",))[0] == "pass")
    if stale:
        print(f"\n{len(stale)} expected failures pass now (stale), e.g. {stale[:5]}")
    failing = {n: r for n, (o, r) in sorted(results.items()) if o == "fail"}
    if args.backend == "opencl":
        # Failures the CPU file lists are not the OpenCL file's business (the CPU run owns them).
        only_here = {n: r for n, r in failing.items() if n not in expected}
        print(f"failures not in {EXPECTED_FILE.name}: {len(only_here)}")
        if args.write:
            kept = {n: r for n, r in opencl_expected.items() if n not in results}
            write_expected(EXPECTED_OPENCL_FILE, {**kept, **only_here})
    elif args.write:
        write_expected(EXPECTED_FILE, failing)


def report_compiled(eager: dict, compiled: dict, info: dict, top: int, write: bool) -> None:
    """The compiled float32 forward rate against the eager one, and the compiled failures."""
    eager_f32 = {n: r for n, r in eager.items() if n.startswith("test_forward_") and n.endswith("_float32")}
    if eager_f32:
        base = sorted(COMPILE_PREFIX + n[len("test_forward_"):] for n, (o, _) in eager_f32.items()
                      if o == "pass")
        print(f"eager float32 forward: {rate(eager_f32, eager_f32)}")
        not_run = [n for n in base if n not in compiled]
        if not_run:
            # Listed as eager failures (so skipped) but passing eager now: stale entries.
            print(f"  {len(not_run)} of its passes have no compiled record (stale eager expected "
                  f"failures?), e.g. {not_run[:5]}")
        base = [n for n in base if n in compiled]
        label = "of the ops eager zyx passes"
    else:
        base = sorted(compiled)
        label = "(no eager records: over the compiled tests run)"
    print(f"compiled float32 forward: {rate(compiled, base)} {label}")
    passed = [n for n in base if compiled[n][0] == "pass"]
    op_by_op = [n for n in passed if info.get(n, {}).get("compile_fallbacks")]
    no_graph = [n for n in passed if info.get(n, {}).get("graphs") == 0]
    some_eager = [n for n in passed if info.get(n, {}).get("no_graph") and n not in no_graph]
    with_breaks = [n for n in passed if info.get(n, {}).get("graph_breaks")]

    def short(names) -> str:
        return ", ".join(n[len(COMPILE_PREFIX):].rsplit("_zyx_", 1)[0] for n in names)

    print(f"  passes with a graph run op by op (compile_fallbacks): {len(op_by_op)}: {short(op_by_op)}")
    print(f"  passes where Dynamo compiled no graph for any sample: {len(no_graph)}: {short(no_graph)}")
    print(f"  passes where some samples ran without a graph: {len(some_eager)}: {short(some_eager)}")
    print(f"  passes with graph breaks: {len(with_breaks)}")
    failing = {n: compiled[n][1] for n in base if compiled[n][0] == "fail"}
    groups = collections.defaultdict(list)
    for n, reason in failing.items():
        groups[group_key(reason)].append(n)
    print(f"compiled failures by cause ({len(failing)}):")
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]:
        print(f"  {len(names):5d}  {key}\n         {short(names)[:300]}")
    also = [n for n, (o, _) in compiled.items() if o == "pass" and n not in base and eager_f32]
    if also:
        print(f"compiled passes whose eager test did not pass: {short(also)}")
    expected = load_expected(EXPECTED_COMPILE_FILE)
    stale = sorted(n for n in expected if compiled.get(n, ("",))[0] == "pass")
    if stale:
        print(f"{len(stale)} compiled expected failures pass now (stale), e.g. {stale[:5]}")
    if write:
        kept = {n: r for n, r in expected.items() if n not in compiled}
        write_expected(EXPECTED_COMPILE_FILE,
                       {**kept, **{n: r for n, (o, r) in compiled.items() if o == "fail"}})


def load_expected(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.exists() else {}


def write_expected(path: Path, entries: dict[str, str]) -> None:
    path.write_text(json.dumps(dict(sorted(entries.items())), indent=0, sort_keys=True) + "\n")
    print(f"wrote {len(entries)} entries to {path}")


if __name__ == "__main__":
    main()
