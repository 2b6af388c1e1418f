"""Summarize a recorded OpInfo run and (with ``--write``) regenerate the expected failures.

Usage::

    ZYX_OPINFO_FULL=1 ZYX_OPINFO_RECORD=/tmp/opinfo .venv/bin/python -m pytest -n auto tests/test_opinfo.py
    .venv/bin/python tests/opinfo_report.py /tmp/opinfo [--write]

The pass rate counts (op, dtype) pairs of ``test_forward`` that pass natively (CPU fallback
disabled), for float32 and over all tested dtypes; gradient and error-input variants are
reported separately. Failures are grouped by their one-line reason with numbers masked.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

EXPECTED_FILE = Path(__file__).with_name("opinfo_expected_failures.json")
DTYPES = ("float32", "float64", "int64", "int32", "bool", "float16", "bfloat16")


def load(record_dir: Path) -> dict[str, tuple[str, str]]:
    """Test name -> (outcome, reason); the last record of a test wins."""
    results = {}
    for path in sorted(record_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
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
    parser.add_argument("--write", action="store_true", help=f"rewrite {EXPECTED_FILE.name}")
    parser.add_argument("--top", type=int, default=15, help="failure groups to print")
    args = parser.parse_args()
    results = load(args.record_dir)
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

    expected = json.loads(EXPECTED_FILE.read_text()) if EXPECTED_FILE.exists() else {}
    stale = sorted(n for n in expected if results.get(n, ("",))[0] == "pass")
    if stale:
        print(f"\n{len(stale)} expected failures pass now (stale), e.g. {stale[:5]}")
    if args.write:
        failing = {n: r for n, (o, r) in sorted(results.items()) if o == "fail"}
        EXPECTED_FILE.write_text(json.dumps(failing, indent=0, sort_keys=True) + "\n")
        print(f"wrote {len(failing)} entries to {EXPECTED_FILE}")


if __name__ == "__main__":
    main()
