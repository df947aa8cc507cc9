"""Upstream failures the sweep knows: each listed with the torch versions it was seen on and why, reported as an
expected failure of its test (never skipped), so a new failure in the same op still fails the test.

An entry covers the samples it names (all of the case's samples when it names none) on the torch versions whose
version string starts with one of its prefixes; on any other torch the entry does not apply and the failure counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Known:
    op: str  # the case's OpInfo name and variant, e.g. "round.decimals_3"
    dtypes: tuple[str, ...]  # dtype names ("float32", "bfloat16" ...); () for every dtype
    devices: tuple[str, ...]
    torch: tuple[str, ...]  # version prefixes, e.g. ("2.13",)
    reason: str
    samples: tuple[int, ...] = ()  # sample indices; () for every sample

    def applies(self, op: str, dtype: str, device: str, version: str) -> bool:
        return (self.op == op and (not self.dtypes or dtype in self.dtypes) and device in self.devices
                and version.startswith(self.torch))

    def covers(self, sample: int) -> bool:
        return not self.samples or sample in self.samples

    def describe(self) -> str:
        which = f"samples {', '.join(map(str, self.samples))}" if self.samples else "every sample"
        dtypes = "/".join(self.dtypes) or "every dtype"
        return (f"{self.op} ({dtypes}, {'/'.join(self.devices)}, torch {' or '.join(self.torch)}; {which}): "
                f"{self.reason}")


CPU, CUDA, BOTH = ("cpu",), ("cuda",), ("cpu", "cuda")

# Inductor's vectorised C++ float remainder is a - floor(a / b) * b in the input's precision; where the quotient is
# beyond the dtype's integer range (-1e20 % 4988429) it is off by up to 1e13, while ATen's kernel (fmod, then the
# divisor's sign) is exact.
_REMAINDER = "inductor's CPU float remainder loses the quotient's precision for |a / b| beyond 2^24 (ATen's is exact)"

# On CUDA (seen on torch 2.11 on an H100) the same quotient loss, and inf % inf is inf where ATen's is nan.
_REMAINDER_CUDA = "inductor's CUDA float remainder loses the quotient's precision for |a / b| beyond 2^24"
_REMAINDER_INF = "inductor's CUDA float remainder of inf by inf is inf, ATen's is nan"

# Found by a sixteenth of the CPU sweep on stock torch 2.13 (bench/ops_sweep.py --part 1/16): the samples of each
# case that differ; a case's other samples still count.
_LINSPACE = ("inductor's linspace (with scalar or tensor start and end) gives other values than ATen's at some "
             "points in bfloat16 (-0.04077 for -0.03906) and int64 (4 for 3)")
_STD_MEAN_EMPTY = "inductor's std_mean of an empty tensor gives mean 0.0 where ATen's is nan"

# Found by sixteenths 2-4 and 6-9 of the CPU sweep on stock torch 2.13 (2026-11-26/27, AVX-512 host without AMX).
_GRID_SAMPLE = ("inductor's grid_sample decomposition computes source coordinates in another order than ATen's CPU "
                "kernel: bilinear results differ by up to 1e-2 at inputs of 100-250 (both are that far from "
                "float64), and nearest rounds a coordinate at .5 to the other neighbour")
_GRID_SAMPLE_BF16 = ("ATen's bfloat16 bicubic grid_sample on CPU is wrong at one element (-9.81 where float64 gives "
                     "-0.00076; inductor's -0.00084)")
_SIGNBIT_BF16 = ("GCC 12 (Debian 12's, the runner image's compiler) stops with an internal compiler error "
                 "(unrecognizable insn, in extract_insn) on inductor's vectorised signbit of a non-contiguous "
                 "bfloat16 tensor")
_VAR_MEAN_EMPTY = "inductor's var_mean of an empty tensor gives mean 0.0 where ATen's is nan"
# Found by sixteenths 5 and 10-15 (2026-11-27, the same host).
_LOGSPACE = ("inductor's logspace (scalar or tensor start and end) in bfloat16 gives another value than ATen's at some "
             "points (19968 where ATen and float64 give 20480)")
_DIFF_HIGH_ORDER = ("a 7th-order diff in bfloat16: ATen rounds each order's differences to bfloat16, inductor "
                    "keeps them in float32; both are far from float64 (-3.0 and -2.5625 for -2.77)")
_MULTI_MARGIN_0D = ("inductor's multi_margin_loss with reduction='none' returns shape [1] for a 0-d input, where "
                    "ATen's result is 0-d")

KNOWN: tuple[Known, ...] = (
    Known("nn.functional.grid_sample", ("float32",), CPU, ("2.13",), _GRID_SAMPLE,
          samples=(0, 1, 2, 3, 4, 5, 8, 10, 12, 13, 14, 15, 16, 17)),
    Known("nn.functional.grid_sample", ("bfloat16",), CPU, ("2.13",), _GRID_SAMPLE_BF16,
          samples=(12, 13, 14, 15, 16, 17)),
    Known("signbit", ("bfloat16",), CPU, ("2.13",), _SIGNBIT_BF16, samples=(22, 26, 27, 29, 30, 31, 32, 33, 34)),
    Known("var_mean", ("float32", "bfloat16"), CPU, ("2.13",), _VAR_MEAN_EMPTY, samples=(14, 15)),
    Known("std_mean", ("float32", "bfloat16"), CPU, ("2.13",), _STD_MEAN_EMPTY, samples=(14, 15)),
    Known("var_mean.unbiased", ("float32", "bfloat16"), CPU, ("2.13",), _VAR_MEAN_EMPTY, samples=(2, 3)),
    Known("logspace", ("bfloat16",), CPU, ("2.13",), _LOGSPACE,
          samples=(310, 314, 315, 319, 330, 334, 335, 339, 350, 354, 355, 359, 370, 374, 375, 379, 390, 394, 395, 399)),
    Known("logspace.tensor_overload", ("bfloat16",), CPU, ("2.13",), _LOGSPACE),
    Known("diff", ("bfloat16",), CPU, ("2.13",), _DIFF_HIGH_ORDER, samples=(60,)),
    Known("nn.functional.multi_margin_loss", ("float32",), CPU, ("2.13",), _MULTI_MARGIN_0D,
          samples=tuple(range(11, 104, 4))),
    Known("linspace", ("bfloat16",), CPU, ("2.13",), _LINSPACE, samples=(8, 11, 14, 32, 47)),
    Known("linspace", ("int64",), CPU, ("2.13",), _LINSPACE, samples=(32, 35, 38, 44, 60)),
    Known("linspace.tensor_overload", ("bfloat16", "int64"), CPU, ("2.13",), _LINSPACE),
    Known("std_mean.unbiased", ("float32", "bfloat16"), CPU, ("2.13",), _STD_MEAN_EMPTY),
    Known("remainder", ("float32", "bfloat16"), CPU, ("2.13",), _REMAINDER, samples=(16,)),
    Known("remainder", ("float32",), CUDA, ("2.11",), _REMAINDER_CUDA, samples=(16, 63)),
    Known("remainder", ("float32",), CUDA, ("2.11",), _REMAINDER_INF, samples=(45, 92)),
    Known("__rmod__", ("float32", "bfloat16"), CPU, ("2.13",), _REMAINDER, samples=(16,)),
)


def for_case(op: str, dtype: str, device: str, version: str = torch.__version__) -> list[Known]:
    return [known for known in KNOWN if known.applies(op, dtype, device, version)]


def listed(device: str, version: str = torch.__version__) -> list[Known]:
    """Every entry that applies to this device and torch: the list the sweep reports."""
    return [known for known in KNOWN if device in known.devices and version.startswith(known.torch)]
