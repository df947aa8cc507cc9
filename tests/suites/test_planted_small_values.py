"""Bugs that are right at typical magnitudes and wrong only at small ones (issue 39) are caught by the op sweep and by
the suite that exercises the op, and a faithful rewrite of the same table entries stays green in both.

The plants (tests/suites/planted/small_values.py): ``log1p`` as log(1 + x) (a cancelling rewrite), SiLU with results
below 1e-6 flushed to 0, ``tanh`` 1e-6 too large. Each is within the sweep's old ``atol = 1e-5`` everywhere, and its
errors are far below the old RMSE rule's 1e-5 floor in the suites. The control (small_values_faithful.py) replaces the
same three entries with what torch computes. The fusion suite's pointwise chains run in CI; the sweep and the
fragile-layer corpus, minutes each on 2 cores, are heavy (tests/conftest.py HEAVY).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .suite_run import SuiteRun, run_suite

OP = "test_op_matches_eager"
OPS_SELECTION = (f"test_sweep_is_planned or ({OP} and float32 and (log1p or tanh or silu) "
                 "and not (xlog1py or tanhshrink or atanh or hardtanh))")
FUSED = "test_inductor_fuses_pointwise_chain_into_one_kernel"
FRAGILE = "test_fragile_layer and (gelu or silu)"


def _fragile(layers: tuple[str, ...], variants: tuple[str, ...]) -> set[str]:
    return {f"test_fragile_layer[{layer}-{variant}]" for layer in layers for variant in variants}


# plant -> (the sweep's cases it fails, fusion's chains it fails, the fragile-layer cases it fails)
CAUGHT: dict[str, tuple[set[str], set[str], set[str]]] = {
    # log(1 + x) near 0: softplus's decomposition is log1p(exp(x)), so mish = x tanh(softplus(x)) for x < -4.
    "log1p_by_log": ({f"{OP}[log1p-float32]"}, {f"{FUSED}[mish]"}, set()),
    # 0 for |silu(x)| < 1e-6: the small inputs, the tiny ones, and the large negative ones (silu(-99) is -9e-42).
    "silu_flush": ({f"{OP}[nn.functional.silu-float32]"}, set(),
                   _fragile(("silu",), ("small", "lowp_small", "large", "tiny"))),
    # + 1e-6: 8 ULPs at 1, and far more where 1 + tanh cancels (gelu_tanh of large negative inputs).
    "tanh_offset": ({f"{OP}[tanh-float32]"}, {f"{FUSED}[gelu_bias]", f"{FUSED}[mish]"},
                    _fragile(("gelu_tanh",), ("fp32", "large", "nonfinite", "lowp_large", "lowp_nonfinite"))),
}
TIMEOUT = 1500
pytestmark = pytest.mark.timeout(TIMEOUT + 60)


def _run(suite: str, selection: str, workdir: Path, plant: str | None) -> SuiteRun:
    if plant is None:
        return run_suite(suite, selection, workdir, plant="small_values_faithful", timeout=TIMEOUT)
    return run_suite(suite, selection, workdir, plant="small_values", timeout=TIMEOUT,
                     extra_env={"COMPILE_CI_TEST_PLANT": plant})


@pytest.mark.parametrize("plant", [*CAUGHT, None], ids=[*CAUGHT, "faithful"])
def test_the_fused_chains_catch_the_plants_on_their_ops_and_pass_the_faithful_rewrite(
        plant: str | None, tmp_path: Path) -> None:
    run = _run("fusion", FUSED, tmp_path, plant)
    expected = CAUGHT[plant][1] if plant else set()
    assert run.named("failed") == expected, run.describe()
    assert run.returncode == (1 if expected else 0), run.describe()
    for test in expected:
        message = run.messages[test]
        assert "output (37,) float32" in message and "ULPs from float64" in message, message


@pytest.mark.parametrize("plant", [*CAUGHT, None], ids=[*CAUGHT, "faithful"])
def test_the_sweep_catches_each_plant_at_its_op_and_names_the_small_input(plant: str | None, tmp_path: Path) -> None:
    run = _run("ops", OPS_SELECTION, tmp_path, plant)
    expected = CAUGHT[plant][0] if plant else set()
    assert run.named("failed") == expected, run.describe()
    for test in expected:
        assert "ULPs from float64" in run.messages[test] and "inputs there: input = " in run.messages[test]
    if plant is None:
        assert run.returncode == 0 and {f"{OP}[log1p-float32]", f"{OP}[tanh-float32]",
                                        f"{OP}[nn.functional.silu-float32]"} <= run.named("passed"), run.describe()


@pytest.mark.parametrize("plant", [*CAUGHT, None], ids=[*CAUGHT, "faithful"])
def test_the_fragile_layers_catch_the_plants_only_where_values_are_small(plant: str | None, tmp_path: Path) -> None:
    run = _run("correctness", FRAGILE, tmp_path, plant)
    expected = CAUGHT[plant][2] if plant else set()
    assert run.named("failed") == expected, run.describe()
    assert _fragile(("gelu", "silu"), ("fp32", "lowp")) <= run.named("passed", "skipped"), run.describe()
