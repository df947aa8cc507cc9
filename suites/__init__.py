"""Built-in pytest suites that exercise torch.compile inside the runner (import torch and pytest only)."""
