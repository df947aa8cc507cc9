"""The x86-64 CPU levels a suite run can be pinned to, and the pytest plugin that pins one (issue 27).

What a CPU changes in a run is more than inductor's vector ISA: eager ATen kernels dispatch on their own capability,
oneDNN and oneMKL pick their own kernels (and with them, on AVX512-BF16 and AMX, instructions that flush bf16
subnormals), and inductor compiles with ``-march=native``. A level pins all of them to what a CPU of that generation
would use, so one host checks every level at or below its own. Each level sets, before torch starts:
``ATEN_CPU_CAPABILITY`` (eager's kernels; inductor reads it too), ``ONEDNN_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``
(oneMKL honours it on Intel CPUs only) and ``TORCHINDUCTOR_CPP_MARCH``; this plugin then pins inductor's vector ISA
(``torch._inductor.cpu_vec_isa``, which otherwise takes the best the CPU has) and its ``cpp.march``.

Load with ``-p tests.suites.cpu_levels`` and ``COMPILE_CI_TEST_CPU_LEVEL=<name>`` (plus ``level.env``); without the
variable the plugin does nothing. The terminal summary names what was pinned.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from typing import Any

import pytest

LEVEL_ENV = "COMPILE_CI_TEST_CPU_LEVEL"


@dataclass(frozen=True)
class CpuLevel:
    """One CPU generation: inductor's ISA class for it, the torch.cpu checks a host must pass, and the environment."""

    name: str
    cpus: str
    inductor_isa: str  # a class of torch._inductor.cpu_vec_isa
    requires: tuple[str, ...]  # torch.cpu._is_<x>_supported checks the host must pass
    env: dict[str, str] = field(default_factory=dict)
    bf16_instructions: bool = True  # whether inductor may add -mavx512bf16 (VecAVX512 does where the CPU has it)


LEVELS = (
    CpuLevel("avx2", "Haswell to Zen 3", "VecAVX2", ("avx2",), {
        "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3"}),
    CpuLevel("avx512", "Skylake-SP, Cascade Lake", "VecAVX512", ("avx512",), {
        "ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
        "TORCHINDUCTOR_CPP_MARCH": "x86-64-v4"}, bf16_instructions=False),
    CpuLevel("avx512_bf16", "Cooper Lake, Zen 4", "VecAVX512VNNI", ("avx512", "vnni", "avx512_bf16"), {
        "ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512_E3", "TORCHINDUCTOR_CPP_MARCH": "cooperlake"}),
    # Sapphire Rapids and later: nothing capped, so this is what such a host runs by default.
    CpuLevel("amx", "Sapphire Rapids and later", "VecAMX", ("avx512", "vnni", "avx512_bf16", "amx_tile"), {
        "ATEN_CPU_CAPABILITY": "avx512"}),
)
BY_NAME = {level.name: level for level in LEVELS}


def host_lacks(level: CpuLevel) -> str | None:
    """Why this host cannot run ``level`` (it lacks an instruction set, or is no x86-64), or None when it can."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"not an x86-64 host ({platform.machine()})"
    import torch

    missing = [name for name in level.requires if not getattr(torch.cpu, f"_is_{name}_supported", lambda: False)()]
    if "amx_tile" in level.requires and not missing and not torch.cpu._init_amx():
        missing.append("amx_tile (the kernel does not enable AMX for this process)")
    return f"this CPU lacks {', '.join(missing)}" if missing else None


def _pin(level: CpuLevel) -> str:
    """Make inductor pick ``level``'s vector ISA and arch flags; a line saying what it now picks."""
    from torch._inductor import config, cpu_vec_isa

    isa = next(isa for isa in cpu_vec_isa.supported_vec_isa_list if type(isa).__name__ == level.inductor_isa)
    if not isa:  # builds and loads ATen's vector headers with its flags (unless TORCHINDUCTOR_VEC_ISA_OK=1)
        raise RuntimeError(f"inductor's {level.inductor_isa} does not build or load here")
    if not level.bf16_instructions:
        isa._is_avx512_bf16_supported = False  # set by bool(isa) on a CPU with AVX512-BF16; this level has none
    # pick_vec_isa() chooses from this list (by ATEN_CPU_CAPABILITY or cpp.simdlen), looked up on every call.
    cpu_vec_isa.valid_vec_isa_list = lambda: [isa]
    march = level.env.get("TORCHINDUCTOR_CPP_MARCH")
    if march and hasattr(config.cpp, "march"):
        config.cpp.march = march
    picked = cpu_vec_isa.pick_vec_isa()
    if picked is not isa:
        raise RuntimeError(f"inductor picks {picked!r}, not the pinned {level.inductor_isa}")
    arch = f"-march={config.cpp.march}" if getattr(config.cpp, "march", None) else "-march=native (not capped)"
    libraries = ", ".join(f"{key}={value}" for key, value in level.env.items() if key != "TORCHINDUCTOR_CPP_MARCH")
    return f"cpu level {level.name}: inductor {picked} ({picked.build_arch_flags()} {arch}); {libraries}"


def pytest_configure(config: pytest.Config) -> None:
    name = os.environ.get(LEVEL_ENV)
    if not name:
        return
    level = BY_NAME.get(name)
    if level is None:
        raise pytest.UsageError(f"{LEVEL_ENV}={name!r} is none of {', '.join(BY_NAME)}")
    unset = [f"{key}={value}" for key, value in level.env.items() if os.environ.get(key) != value]
    if unset:  # read when torch starts, so the plugin cannot set them itself
        raise pytest.UsageError(f"cpu level {name} needs {' '.join(unset)} in the environment")
    lacking = host_lacks(level)
    if lacking:
        raise pytest.UsageError(f"cpu level {name}: {lacking}")
    config.stash[_PINNED] = _pin(level)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    # In the summary rather than the header, which -q (the way the suites are run) leaves out.
    if _PINNED in config.stash:
        terminalreporter.write_line(config.stash[_PINNED])


_PINNED = pytest.StashKey[str]()
