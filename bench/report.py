"""What the CPU benchmark scripts share: their block-timing arguments, and their tables (markdown,
as README's tables are written, or aligned columns)."""

from __future__ import annotations


def add_block_arguments(parser) -> None:
    """The options of alternating timed blocks (bench.py, bench_math.py)."""
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per block")
    parser.add_argument("--rounds", type=int, default=5, help="alternating zyx / torch blocks")
    parser.add_argument("--settle", type=int, default=3, help="untimed calls before each block")


def print_table(header: tuple, lines: list[tuple], footer: str, markdown: bool) -> None:
    """``lines`` under ``header``, then ``footer`` (what the figures are)."""
    if markdown:
        print(f"| {' | '.join(header)} |")
        print(f"|{'|'.join('---' for _ in header)}|")
        for line in lines:
            print(f"| {' | '.join(line)} |")
        print(f"\n{footer}")
        return
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)))
    print(footer)


def threads_line() -> str:
    """How many threads each side computes with (zyx's CPU team and CPU torch's)."""
    import torch

    import torch_zyx
    from torch_zyx.execute import contexts

    team = getattr(contexts.devices()[0].runtime, "team", None)
    return (f"zyx threads={torch_zyx.config.CONFIG.threads} ({type(team).__name__}), "
            f"torch threads={torch.get_num_threads()}")
