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
_REMAINDER = ("inductor's CPU float remainder loses the quotient's precision for |a / b| beyond 2^24 (ATen's is "
              "exact); and a - floor(a / b) * b cancels where the remainder is small against a: 8.4 % 0.56 is "
              "0.0032644 where ATen's and float64's is 0.0032641 (1,536 ULPs; issue 39), and -0.0 comes back +0.0")

# On CUDA (seen on torch 2.11 on an H100) the same quotient loss, and inf % inf is inf where ATen's is nan.
_REMAINDER_CUDA = "inductor's CUDA float remainder loses the quotient's precision for |a / b| beyond 2^24"
_REMAINDER_INF = "inductor's CUDA float remainder of inf by inf is inf, ATen's is nan"

# Seen on torch 2.11 on an H200 (2026-11-28, gpu-bundle's CUDA_LAUNCH_BLOCKING=1 diagnosis): eager, float64 and the
# nudged runs of all 1,440 float16 samples run; compiling the sweep's batch of samples 864-887 into one graph, the
# generated Triton kernel asserts during autotuning (`index out of bounds: 0 <= tmp47 < 9`, the pooling window's
# offset taken from the indices), while each of those 24 samples compiled alone runs. A trap ends the process's CUDA
# context: the case cannot be judged in its process, the job's later tests run in a fresh one (device_context.py).
_MAX_POOL_BACKWARD_TRAP = ("inductor's CUDA kernel for several max_pool2d_with_indices_backward samples in one graph "
                           "asserts on the device (index out of bounds: 0 <= tmp < 9, in autotuning); each sample "
                           "alone runs")

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

# Issue 39: what the per-element ULP rule (suites/precision.py) finds that assert_close's atol = 1e-5 and float64's
# arbitration passed. CPU: this 2-core AVX-512 host (torch 2.13) and the device host's Xeon with AMX (torch 2.11,
# bench/ulp_calibration.py); CUDA: an H100, torch 2.11. Each with a failure line as the sweep writes it.
_EXPM1 = ("inductor's vectorised CPU expm1 is exp(x) - 1 (CppVecOverrides.expm1, 'decompose for a better "
          "performance'): expm1(1e-8) is 0, and at -0.00128 it is 135 ULPs from float64 where eager's is 0.3; -0.0 "
          "comes back +0.0. ELU, CELU and SELU go through it (celu at -1.07e-6: 2.1e5 ULPs)")
_ATANH = "inductor's CPU atanh at -0.000142 is 560 ULPs from float64, where ATen's is 0.07 (a formula that cancels)"
_ACOSH = ("inductor's CPU acosh overflows to inf for inputs near 1e20, where ATen's is 46.74 (x * x in the input's "
          "precision)")
_SOFTSHRINK = "inductor's softshrink of NaN is 0 where ATen's is NaN (and -0.0 comes back +0.0)"
_ZERO_SIGN = ("max/min of 0.0 and -0.0 (and clamps at 0): inductor returns the other zero than ATen, e.g. -0.0 for "
              "max(0.0, -0.0) where eager gives 0.0")
_RDIV_ZERO = "0 / negative int64 divisor: inductor's float result is +0.0 where ATen's is -0.0"
_MULTILABEL = ("inductor's multilabel_margin_loss differs from ATen's by up to 22 where ATen and float64 agree (the "
               "CPU sweep's last sixteenth, never run before issue 39)")
_NEXTAFTER = ("inductor's CUDA nextafter flushes subnormal results: nextafter(0, 1) is 1.2e-38 (the smallest normal) "
              "where ATen's is 1.4e-45 (8.4e6 ULPs); in float16 NaN/inf positions differ")
_LDEXP_INT = "inductor's CUDA ldexp of int64 inputs differs from ATen's by 1.7e7 float32 ULPs at two samples"
_SPACE_CUDA = ("inductor's CUDA linspace/logspace give other values than ATen's at some points (up to 57 ULPs in "
               "float16)")
_LOG_SOFTMAX_F64 = ("inductor's CUDA log_softmax with dtype=float64 is up to 65535 float64 ULPs (1.5e-11) from "
                    "ATen's, which is float64's own")
# Judged on torch 2.11 on an H200 (2026-11-28, bench/ops_sweep.py --device cuda --select '__rmod__ or ...'): the
# swapped-operand remainder differs where remainder does, and integer division by zero differs too. float16 and
# int64 differ on 13 and 15 samples, of which the evidence names 8: listed for every sample.
_RMOD_F16_CUDA = ("inductor's CUDA __rmod__ in float16 returns the other zero than ATen at 0.0 and -0.0 (samples "
                  "14-16, 46, 61-63 of 13) and inf for inf % inf where ATen's is nan (45)")
_RMOD_INT_CUDA = ("x % 0 of int64 on CUDA: ATen's kernel gives 4294967295, inductor's -1 (division by zero; samples "
                  "5-7, 13-15, 50, 58 of 15)")
_ZERO_SIGN_CUDA = ("inductor's CUDA maximum/fmax/clamp_max/frexp/remainder return the other zero than ATen at 0.0 and "
                   "-0.0")

KNOWN: tuple[Known, ...] = (
    Known("expm1", ("float32",), CPU, ("2.11", "2.13"), _EXPM1, samples=(0, 1, 2, 8, 11, 25)),
    Known("expm1", ("bfloat16",), CPU, ("2.11",), _EXPM1, samples=(8,)),
    Known("nn.functional.elu", ("float32",), CPU, ("2.11", "2.13"), _EXPM1, samples=(3, 4, 10, 13, 29)),
    Known("nn.functional.celu", ("float32",), CPU, ("2.11", "2.13"), _EXPM1, samples=(3, 4, 10, 13, 29)),
    Known("nn.functional.celu", ("bfloat16",), CPU, ("2.13",), _EXPM1, samples=(3,)),
    Known("nn.functional.selu", ("float32",), CPU, ("2.11", "2.13"), _EXPM1, samples=(3, 4, 10, 13, 29)),
    Known("atanh", ("float32",), CPU, ("2.11", "2.13"), _ATANH, samples=(0, 1, 2, 8, 11, 25)),
    Known("acosh", ("float32", "bfloat16"), CPU, ("2.11", "2.13"), _ACOSH, samples=(11,)),
    Known("nn.functional.softshrink", ("float32",), CPU, ("2.11", "2.13"), _SOFTSHRINK,
          samples=(14, 15, 21, 22, 28, 30, 31, 32, 33)),
    Known("nn.functional.softshrink", ("bfloat16",), CPU, ("2.11", "2.13"), _SOFTSHRINK, samples=(14, 15, 30, 31)),
    *(Known(op, ("float32",), CPU, ("2.11", "2.13"), _ZERO_SIGN, samples=(15, 56))
      for op in ("fmax", "fmin", "clamp_max", "clamp_min", "max.binary", "min.binary", "maximum", "minimum")),
    *(Known(op, ("bfloat16",), CPU, ("2.11",), _ZERO_SIGN, samples=(56,))
      for op in ("clamp_min", "max.binary", "min.binary")),
    Known("frac", ("float32",), CPU, ("2.11",), "inductor's frac returns the other zero than ATen", samples=(8, 20)),
    Known("__rdiv__", ("int64",), CPU, ("2.11", "2.13"), _RDIV_ZERO, samples=(39, 83)),
    Known("nn.functional.multilabel_margin_loss", ("float32",), CPU, ("2.11",), _MULTILABEL),
    Known("nextafter", ("float32", "float16"), CUDA, ("2.11",), _NEXTAFTER, samples=(15, 39, 56, 80)),
    Known("ldexp", ("int64",), CUDA, ("2.11",), _LDEXP_INT, samples=(15, 54)),
    *(Known(op, ("float32", "float16", "bfloat16"), CUDA, ("2.11",), _SPACE_CUDA)
      for op in ("linspace", "linspace.tensor_overload", "logspace", "logspace.tensor_overload")),
    Known("log_softmax.with_dtype", (), CUDA, ("2.11",), _LOG_SOFTMAX_F64, samples=(2, 3, 4)),
    *(Known(op, ("float32", "float16", "bfloat16"), CUDA, ("2.11",), _ZERO_SIGN_CUDA, samples=(10, 15, 24, 56))
      for op in ("maximum", "fmax", "clamp_max", "frexp")),
    Known("max_pool2d_with_indices_backward", ("float16", "bfloat16"), CUDA, ("2.11",), _MAX_POOL_BACKWARD_TRAP),
    Known("__rmod__", ("float32",), CUDA, ("2.11",), _ZERO_SIGN_CUDA, samples=(15, 16, 62, 63)),
    Known("__rmod__", ("float32", "bfloat16"), CUDA, ("2.11",), _REMAINDER_CUDA, samples=(16, 63)),
    Known("__rmod__", ("float32", "bfloat16"), CUDA, ("2.11",), _REMAINDER_INF, samples=(45, 92)),
    Known("__rmod__", ("float16",), CUDA, ("2.11",), _RMOD_F16_CUDA),
    Known("__rmod__", ("int64",), CUDA, ("2.11",), _RMOD_INT_CUDA),
    Known("remainder", ("float16",), CUDA, ("2.11",), _ZERO_SIGN_CUDA,
          samples=(13, 14, 15, 16, 45, 46, 60, 61, 62, 63, 92, 93, 94, 95, 96, 99, 100)),
    Known("remainder", ("float32",), CUDA, ("2.11",), _ZERO_SIGN_CUDA, samples=(15, 62)),
    Known("remainder", ("bfloat16",), CUDA, ("2.11",), _REMAINDER_CUDA, samples=(16, 63)),
    Known("remainder", ("bfloat16",), CUDA, ("2.11",), _REMAINDER_INF, samples=(45, 92)),
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
    Known("remainder", ("float32",), CPU, ("2.13",), _REMAINDER),
    Known("remainder", ("bfloat16",), CPU, ("2.13",), _REMAINDER, samples=(14, 16)),
    Known("remainder", ("float32",), CUDA, ("2.11",), _REMAINDER_CUDA, samples=(16, 63)),
    Known("remainder", ("float32",), CUDA, ("2.11",), _REMAINDER_INF, samples=(45, 92)),
    Known("__rmod__", ("float32",), CPU, ("2.13",), _REMAINDER),
    Known("__rmod__", ("bfloat16",), CPU, ("2.13",), _REMAINDER, samples=(16,)),
)


def for_case(op: str, dtype: str, device: str, version: str = torch.__version__) -> list[Known]:
    return [known for known in KNOWN if known.applies(op, dtype, device, version)]


def listed(device: str, version: str = torch.__version__) -> list[Known]:
    """Every entry that applies to this device and torch: the list the sweep reports."""
    return [known for known in KNOWN if device in known.devices and version.startswith(known.torch)]
