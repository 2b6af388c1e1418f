"""Loop IR: a flat list of instructions with structured loops, what renderers consume.

Each ``Instr`` is one value (SSA) or effect. Index arithmetic stays symbolic (``Expr``) in
``INDEX`` instructions so each renderer prints it with its own integer syntax.

  BUF      arg=slot                       pointer to kernel buffer ``slot`` (element dtype)
  PARAM    arg=i                          64-bit kernel parameter i
  CONST    arg=value                      constant of ``dtype``
  INDEX    arg=Expr (integer or 0/1 bool) symbolic index, variables are RANGE instrs
  RANGE    arg=(var, start, end, vectorize)  loop ``var`` from start to end (ints or 'start'/'end',
                                         the chunk of outer iterations a call runs; CPU loops also
                                         take an Expr of the variables 'start' and 'end' there);
                                         ``vectorize`` False asks the compiler not to vectorize it
  ENDRANGE srcs=(range,)
  LOAD     srcs=(buf, index[, valid])     element load; masked loads give 0 when not valid
  STORE    srcs=(buf, index, value)
  ALU      arg=op srcs=operands           result ``dtype``; comparisons give bool
  CAST     srcs=(x,)                      to ``dtype``
  BITCAST  srcs=(x,)
  WHERE    srcs=(cond, a, b)
  ACC      arg=initial value              accumulator cell; ACC_SET srcs=(acc, value), ACC_GET srcs=(acc,)
  DEFINE   arg=var srcs=(value,)          the int64 ``value`` as INDEX variable ``var`` (a gathered
                                         position: data-dependent index arithmetic)

Grouped kernels only (``LoopKernel.group_size`` > 0; lowering emits them only when its options
allow, so the CPU renderer never receives them). Each outer iteration is one work group of
``group_size`` work items that cooperate through group-shared memory:

  SPECIAL  arg=(var, "lid")               the work item's index in its group, an INDEX variable
  LOCAL    arg=size                       group-shared array of ``size`` ``dtype`` elements, held
                                          as computed (float for half); LOAD/STORE take it in
                                          place of a BUF (never masked). arg=(size, "stored"):
                                          held as buffers store ``dtype`` (16-bit half)
  BARRIER                                 every item of the group waits; shared writes visible
  IF       srcs=(cond,)                   block run when cond (an INDEX) holds; ENDIF srcs=(if,)

Tensor-core kernels only (``LoweringOptions.tensor_cores``): a warp's 16 x 8 x 16 product.

  FRAGMENT arg=(kind, pitch) srcs=(local, index)   the lane's "a" (16 x 16) or "b" (16 x 8)
                                          fragment of a stored LOCAL, read from ``index`` on
                                          (rows ``pitch`` apart); ``dtype`` the element dtype
  MMA      srcs=(a, b, acc0..acc3)        the accumulators (ACC cells, float) += a @ b
  PACK     arg="a" srcs=(x0..x7)          an "a" fragment of values the lane holds (floats
                                          rounded to ``dtype``): x0, x1 its row l / 4 at k
                                          2 (l % 4) and + 1, x2, x3 row l / 4 + 8 there, x4..x7
                                          the same at k + 8 (an MMA's outputs, as its next input)
  SHUFFLE  arg=("xor", m) srcs=(x,)       ``x`` of the warp's lane ``l ^ m`` (every lane takes part)
  ASYNC_COPY arg=n srcs=(local, index, buf, index)  ``n`` elements (16 bytes) from the buffer to a
                                          stored LOCAL, both runs contiguous and 16-byte aligned,
                                          without registers (done by the next ASYNC_WAIT)
  ASYNC_COMMIT                            the item's copies issued so far form a group
  ASYNC_WAIT arg=n                        wait until at most ``n`` of the item's groups are pending
"""

from __future__ import annotations

import math
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
    group_size: int = 0  # > 0: one work group of this many items per outer iteration


def is_plus_zero(ins: Instr) -> bool:
    """Whether ``ins`` is the constant +0 (all its bits zero: the stored bits of a masked lane)."""
    return ins.op == "CONST" and ins.arg == 0 and math.copysign(1.0, float(ins.arg)) > 0
