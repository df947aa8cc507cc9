"""A bisection's question (suites/bisect_probe.py) counts what the test's verdict rests on: a difference that a
suite finds only to decide whether to measure the rounding noise (judging.preliminary), and that the judgement with
the noise then clears, makes no run wrong, or a bisection would find every run after it wrong (a declared pass
disabled, its step right within the noise, was judged wrong, and the bisector named no subsystem)."""

from __future__ import annotations

import torch

from suites import bisect_probe, judging

EAGER = torch.tensor([1.0, 2.0, 3.0])
FP64 = EAGER.double()
WRONG = torch.tensor([1.0, 2.5, 3.0])


def test_a_difference_found_before_the_noise_then_cleared_is_no_verdict() -> None:
    bisect_probe.install()
    with bisect_probe.watching() as seen:
        with judging.preliminary():
            assert judging.differences_from_reference(WRONG, EAGER, FP64)
        assert judging.differences_from_reference(EAGER.clone(), EAGER, FP64) == []
    assert (seen.calls, seen.differed) == (2, 0)
    # the test then failed for a reason of its own (a pass never called): judged, and right
    assert bisect_probe.outcome_of(seen, failed=True) == bisect_probe.RIGHT


def test_the_same_difference_as_the_verdict_is_wrong() -> None:
    bisect_probe.install()
    with bisect_probe.watching() as seen:
        with judging.preliminary():
            judging.differences_from_reference(WRONG, EAGER, FP64)
        assert judging.differences_from_reference(WRONG, EAGER, FP64)
    assert (seen.calls, seen.differed) == (2, 1)
    assert bisect_probe.outcome_of(seen, failed=True) == bisect_probe.WRONG


def test_preliminary_ends_with_its_block_even_when_it_raises() -> None:
    try:
        with judging.preliminary():
            assert judging.is_preliminary()
            raise RuntimeError("a judgement that broke")
    except RuntimeError:
        pass
    assert not judging.is_preliminary()
