"""The numerics judgement excuses exactly one hardware behaviour (issue 27): a bfloat16 result below bfloat16's smallest
normal that comes back as zero (whatever its sign). Any other flush, and any other wrong value, is still a difference
(issue 39's rule, suites/precision.py: each element in ULPs of its dtype)."""

from __future__ import annotations

import pytest
import torch

from suites import adversarial

BF16_TINY = torch.finfo(torch.bfloat16).tiny  # 1.18e-38, float32's too
FP16_TINY = torch.finfo(torch.float16).tiny  # 6.1e-5


def _judge(reference: list[float], eager: list[float], compiled: list[float], dtype: torch.dtype) -> list[str]:
    reference64 = torch.tensor(reference, dtype=torch.float64)
    return adversarial.judge(
        torch.tensor(compiled, dtype=dtype), torch.tensor(eager, dtype=dtype), reference64, what="out"
    ).problems


# (case, dtype, the true values, eager, compiled, whether it is a difference)
CASES = [
    ("bf16 subnormals flushed", torch.bfloat16,
     [-1.7e-39, 3e-39, 5e-40], [-1.7e-39, 3e-39, 5e-40], [0.0, 0.0, 0.0], False),
    ("bf16 subnormals partly flushed, the rest right", torch.bfloat16,
     [-1.7e-39, 3e-39, 5e-40], [-1.7e-39, 3e-39, 5e-40], [-1.7e-39, 0.0, 5e-40], False),
    ("bf16 normals flushed", torch.bfloat16,
     [2e-38, 3e-38, 5e-36], [2e-38, 3e-38, 5e-36], [0.0, 0.0, 0.0], True),
    ("bf16 one normal flushed among subnormals", torch.bfloat16,
     [-1.7e-39, 3e-39, 5e-36], [-1.7e-39, 3e-39, 5e-36], [0.0, 0.0, 0.0], True),
    ("bf16 subnormal flushed to a zero of the other sign", torch.bfloat16,
     [-1.7e-39, 3e-39], [-1.7e-39, 3e-39], [0.0, -0.0], False),
    ("bf16 subnormals wrong, not flushed", torch.bfloat16,
     [-1.7e-39, 3e-39, 5e-40], [-1.7e-39, 3e-39, 5e-40], [1.7e-39, -3e-39, -5e-40], True),
    ("float32 subnormals flushed", torch.float32,
     [-1.7e-39, 3e-39, 5e-40], [-1.7e-39, 3e-39, 5e-40], [0.0, 0.0, 0.0], True),
    ("float16 subnormals flushed", torch.float16,
     [-3e-6, 2e-5, 4e-7], [-3e-6, 2e-5, 4e-7], [0.0, 0.0, 0.0], True),
]


@pytest.mark.parametrize(("dtype", "reference", "eager", "compiled", "differs"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_only_bf16_subnormal_results_may_flush(
    dtype: torch.dtype, reference: list[float], eager: list[float], compiled: list[float], differs: bool
) -> None:
    problems = _judge(reference, eager, compiled, dtype)
    assert bool(problems) == differs, problems


def test_a_failure_names_the_flushes_it_excused() -> None:
    problems = _judge([-1.7e-39, 3e-39, 5e-36], [-1.7e-39, 3e-39, 5e-36], [0.0, 0.0, 0.0], torch.bfloat16)
    assert len(problems) == 1 and "2 results below bfloat16's smallest normal flushed to 0" in problems[0]
    assert "at [2]: compiled 0.0, eager 5.0" in problems[0], problems  # the normal one, not an excused one


def test_the_cases_sit_where_they_claim() -> None:
    # "subnormal" and "normal" above are relative to each dtype's smallest normal.
    assert all(abs(v) < BF16_TINY for v in CASES[0][2]) and all(abs(v) >= BF16_TINY for v in CASES[2][2])
    assert all(abs(v) < FP16_TINY for v in CASES[-1][2])
