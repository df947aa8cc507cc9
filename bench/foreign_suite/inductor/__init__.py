"""Stand-ins for PyTorch's test/inductor helpers that the foreign suite imports (see ../conftest.py)."""
