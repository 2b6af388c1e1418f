"""aten op lowerings: each aten overload maps to a function that builds lazy nodes.

Stage 1→2 of the flow. ``registry.LOWERINGS`` is the table the dispatcher consults; every
module here registers its ops on import.
"""

from . import (  # noqa: F401  (registration)
    amp,
    conv,
    ctc,
    derived_backward,
    distance,
    elementwise,
    factory,
    foreach,
    grid_sample,
    index,
    layer_norm,
    linalg,
    linalg_ldl,
    linalg_spectral,
    margin_losses,
    matmul,
    movement,
    nn,
    optim,
    pooling,
    reduce,
    rejection,
    reparam,
    resample,
    rnn,
    sampling,
    scan,
    scatter,
    search,
    sort,
    special,
    storage_views,
    transformer,
)
