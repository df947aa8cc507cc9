"""The passes suite catches a compiler that rewrites cosines into sines behind the user's back."""

from __future__ import annotations

from pathlib import Path

from .suite_run import run_suite

# The control test of the cos->sin hook checks and the zoo (a rotary-embedding model with cosines, a conv block
# without): enough to show the plant is caught and attributed, in about 20 s on 2 cores.
SELECTION = "cos_stays_cos or every_hook"
CAUGHT = {
    "test_without_custom_pass_cos_stays_cos",
    "test_every_hook_sees_the_graphs_and_numerics_hold[rotary_attention]",
}


def test_clean_compiler_passes(tmp_path: Path) -> None:
    run = run_suite("passes", SELECTION, tmp_path)
    assert run.returncode == 0, run.output[-4000:]
    assert run.named("passed") == CAUGHT | {"test_every_hook_sees_the_graphs_and_numerics_hold[conv_block]"}


def test_compiler_swapping_cos_for_sin_is_caught(tmp_path: Path) -> None:
    run = run_suite("passes", SELECTION, tmp_path, plant="cos_to_sin_compiler")
    assert run.returncode == 1, run.output[-4000:]
    assert run.named("failed") == CAUGHT, run.outcomes
    # A model without cosines is unaffected, so the failure points at the rewrite, not at the compiler as a whole.
    assert run.named("passed") == {"test_every_hook_sees_the_graphs_and_numerics_hold[conv_block]"}
