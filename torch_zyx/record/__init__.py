"""Recording: the tensor model the lowerings write into (stage 1 of the flow, after ops/).

``tensor.py``: ``ZyxTensor`` wrappers over shared storages whose value is a lazy graph node;
``pending.py``: the storages waiting for a realization and ``realize_all``; ``checks.py``:
index checks computed on the device and raised at the next realization; ``overlap.py``: ATen's
memory-overlap rules for writes; ``random.py``: the counter-based generator's state. Nothing here
imports dispatch or ops: dispatch registers itself (``tensor.set_dispatcher``).
"""
