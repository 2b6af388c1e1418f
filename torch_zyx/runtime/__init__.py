"""Device runtimes: compile rendered source into programs and launch them (last stage of the flow).

Every runtime module has the same small surface: a ``Device`` with ``name``, ``renderer`` (the
key of its renderer in execute/contexts.py ``RENDERERS``), ``describe()``, ``compile(name,
source) → program``, ``pool`` (its memory pool), ``settle()`` (finish what the calling thread
launched and left for itself to join: the CPU's OpenMP regions), and programs called as
``program.launch(buffers, params, global_size, work, wait_events) → Event``. Optional device
facts the executor reads when present: ``render_options``, ``matmul_tile``, and for work-group
devices ``is_gpu``, ``compute_units``, ``max_group_size``, ``local_memory``.
"""


class CompileError(RuntimeError):
    """A kernel failed to compile: carries the source, the compiler's log and how to reproduce."""

    def __init__(self, name: str, source: str, message: str, reproduce: str):
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(source.splitlines()))
        super().__init__(f"zyx: compiling kernel {name} failed:\n{message}\n--- source ---\n{numbered}\n"
                         f"--- reproduce: {reproduce} ---")
        self.source, self.log = source, message
