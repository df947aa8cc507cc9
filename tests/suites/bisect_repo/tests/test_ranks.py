"""A test module whose compiled steps run in other processes says so, as the distributed suite does."""

import torch

NOT_BISECTABLE = "its compiled steps run in other processes"


def test_compiled_elsewhere() -> None:
    torch.testing.assert_close(torch.ones(2), torch.zeros(2))
