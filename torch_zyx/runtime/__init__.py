"""Device runtimes: compile rendered source into programs and launch them (last stage of the flow).

Every runtime module has the same small surface: a ``Device`` with ``name``, ``compile(name,
source) → program``, ``pool`` (its memory pool), and programs called as
``program.launch(buffers, params, global_size, wait_events) → Event``.
"""
