"""aten op lowerings: each aten overload maps to a function that builds lazy nodes.

Stage 1 of the flow (recording: dispatch.py → these lowerings → the tensor model in record/).
``registry.LOWERINGS`` is the table the dispatcher consults; every module imported here
registers its ops on import. The lowerings are grouped by family:

- ``core/``: creation and copies (factory), views and movement, storage-changing ops;
- ``math/``: elementwise math, special functions, reductions and scans;
- ``indexing/``: indexing, gathers and scatters, searching and sorting;
- ``nn/``: neural-network ops (softmax and losses, layer norm, convolution, pooling, CTC, RNN
  cells, transformer fast path, distances, resampling);
- ``linalg/``: matmul and dense linear algebra;
- ``random/``: random numbers and samplers;
- ``optim/``: fused optimizer steps, ``_foreach_*`` ops and gradient scaling;
- ``complex/``: ops on complex values (a table of its own, which dispatch consults for them).

Shared helpers live next to the table: ``registry`` (operands, promotion, broadcasting),
``expr`` (formula nodes), ``fastpath`` (recording fast paths), ``derived_backward``,
``argument_checks`` (ATen's argument and dtype checks that lowerings and dispatch share), and
``prims`` (the ``prims.*`` ops of PyTorch's references, mapped to the aten lowerings).
"""

from . import complex, derived_backward, prims  # noqa: F401  (registration; prims looks its aten twins up when called)
from .core import factory, movement, storage_views  # noqa: F401
from .indexing import index, scatter, search, sort  # noqa: F401
from .linalg import dense, fft, ldl, matmul, spectral  # noqa: F401
from .math import cephes, combine, elementwise, igamma, polynomials, reduce, scan, special  # noqa: F401
from .nn import (  # noqa: F401
    attention,
    conv,
    ctc,
    distance,
    functional,
    grid_sample,
    layer_norm,
    margin_losses,
    pooling,
    resample,
    rnn,
    transformer,
)
from .optim import amp, foreach, fused  # noqa: F401
from .random import rejection, reparam, sampling  # noqa: F401
