"""Loop IR: a flat list of instructions with structured loops, what renderers consume.

Each ``Instr`` is one value (SSA) or effect. Index arithmetic stays symbolic (``Expr``) in
``INDEX`` instructions so each renderer prints it with its own integer syntax.

  BUF      arg=slot                       pointer to kernel buffer ``slot`` (element dtype)
  PARAM    arg=i                          64-bit kernel parameter i
  CONST    arg=value                      constant of ``dtype``
  INDEX    arg=Expr (integer or 0/1 bool) symbolic index, variables are RANGE instrs
  RANGE    arg=(var, start, end, vectorize)  loop ``var`` from start to end (ints or 'start'/'end');
                                         ``vectorize`` False asks the compiler not to vectorize it
  ENDRANGE srcs=(range,)
  LOAD     srcs=(buf, index[, valid])     element load; masked loads give 0 when not valid
  STORE    srcs=(buf, index, value)
  ALU      arg=op srcs=operands           result ``dtype``; comparisons give bool
  CAST     srcs=(x,)                      to ``dtype``
  BITCAST  srcs=(x,)
  WHERE    srcs=(cond, a, b)
  ACC      arg=initial value              accumulator cell; ACC_SET srcs=(acc, value), ACC_GET srcs=(acc,)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dtypes import DType


@dataclass(frozen=True, eq=False)
class Instr:
    op: str
    dtype: DType | None
    srcs: tuple[int, ...]
    arg: Any = None


@dataclass
class LoopKernel:
    name: str
    instrs: list[Instr]
    n_buffers: int
    buffer_dtypes: list[DType]
    global_size: int  # outer iterations split across threads / work items
    work: int  # estimated scalar operations
    flops: int
    bytes: int
