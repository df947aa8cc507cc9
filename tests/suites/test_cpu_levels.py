"""The built-in numerics corpus is green at every x86-64 CPU level this host can run (issue 27): inductor's vector ISA,
eager's kernels, oneDNN and oneMKL pinned to AVX2, AVX-512, AVX-512 with BF16, and AMX in turn
(``tests/suites/cpu_levels.py``), so a CPU difference shows here rather than on a user's default branch. A level the
host lacks is skipped, saying so.

Focused on the bf16 half of the fragile-layer corpus (one compiled graph per level, about 20 s cold here): bf16 is
where the CPU's instructions change results (AVX512-BF16 and AMX kernels flush bf16 subnormals; oneDNN's bf16 GELU
does on this CPU). ``bench/isa_matrix.py`` runs the whole numerics module at every level, and on CUDA.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.adversarial import variants
from suites.fragile_layers import LAYERS

from .cpu_levels import LEVEL_ENV, LEVELS, CpuLevel, host_lacks
from .suite_run import run_suite

SELECTION = "test_fragile_layer and lowp"
WELL_SCALED_BF16 = {f"test_fragile_layer[{layer}-lowp]" for layer in LAYERS}
# Its compiled form reaches oneMKL's bf16 GEMM through inductor's attention rewrite, eager's does not: the case that
# was red on AMX hosts.
ATTENTION_ON_SUBNORMALS = "test_fragile_layer[attention-lowp_tiny]"


@pytest.mark.parametrize("level", LEVELS, ids=[level.name for level in LEVELS])
def test_the_bf16_corpus_is_green_at_each_cpu_level(level: CpuLevel, tmp_path: Path) -> None:
    lacking = host_lacks(level)
    if lacking:
        pytest.skip(f"cpu level {level.name} ({level.cpus}) not checked on this host: {lacking}")
    run = run_suite("correctness", SELECTION, tmp_path, plugin="tests.suites.cpu_levels", timeout=600,
                    extra_env={**level.env, LEVEL_ENV: level.name})
    assert run.returncode == 0, run.describe()
    assert f"cpu level {level.name}: inductor " in run.output, run.describe()  # the pin took effect
    assert WELL_SCALED_BF16 | {ATTENTION_ON_SUBNORMALS} <= run.named("passed"), run.describe()
    lowp = [v for v in variants("cpu") if v.name.startswith("lowp")]  # lowp and its adversarial variants
    assert len(run.outcomes) == len(LAYERS) * len(lowp), run.describe()
