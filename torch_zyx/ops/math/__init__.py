"""Elementwise math, special functions (Cephes, incomplete gamma, orthogonal polynomials),
reductions and scans."""
