"""Compatibility shim for the foreign suite (PyTorch's own compiler tests, extracted from ../shared/seeds at run time).

Those files were written against another torch and PyTorch's CI: names they import that this torch renamed are put
back, and their own switches are set for a CPU machine without NCCL. Nothing else is changed, so the outcomes are
the files' own, and bare pytest and compile-ci run the very same files.
"""

import os

import torch.testing._internal.inductor_utils as inductor_utils

# test_layout_optim wraps models in DistributedDataParallel unless told not to. Its class setup still opens an NCCL
# process group, which a CPU build lacks: there its 11 tests error in setup, for bare pytest and compile-ci alike.
os.environ.setdefault("USE_DDP_WRAPPER", "0")

if not hasattr(inductor_utils, "HAS_CUDA"):  # renamed HAS_CUDA_AND_TRITON in newer torch
    inductor_utils.HAS_CUDA = inductor_utils.HAS_CUDA_AND_TRITON
