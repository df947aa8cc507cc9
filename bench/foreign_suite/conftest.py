"""Compatibility shim for the foreign suite (PyTorch's own compiler tests, extracted from ../shared/seeds at run time).

Those files were written against another torch: names they import that this torch renamed are put back here, and
nothing else is changed, so the outcomes are the files' own.
"""

import torch.testing._internal.inductor_utils as inductor_utils

if not hasattr(inductor_utils, "HAS_CUDA"):  # renamed HAS_CUDA_AND_TRITON in newer torch
    inductor_utils.HAS_CUDA = inductor_utils.HAS_CUDA_AND_TRITON
