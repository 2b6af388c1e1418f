"""The lazy graph and the kernelizer (stages 2 and 3 of the flow)."""
