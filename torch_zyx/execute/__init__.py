"""The executor: lazy graphs in, buffers out (stage between the tensor model and codegen).

``contexts.py``: the zyx devices (runtime, pool, event table, programs) in the configured
backend order. ``realize.py``: a graph's plan from the schedule cache (kernelizer, lowering,
rendering and compiling on a miss), then its launches under the ASYNC EVENT RULES.
"""
