"""Training-step ops: torch.optim's fused steps (fused.py), ``_foreach_*`` ops (foreach.py)
and the gradient scaler's ops (amp.py)."""
