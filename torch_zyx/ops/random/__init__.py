"""Random numbers: the RNG ops and factories (sampling.py), rejection samplers (rejection.py)
and reparameterized gradients (reparam.py)."""
