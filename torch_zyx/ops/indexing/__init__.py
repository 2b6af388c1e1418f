"""Indexing, gathers and scatters, masked copies, searching, counting and sorting."""
