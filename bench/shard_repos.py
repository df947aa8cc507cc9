"""The repositories bench/shards.py measures: the stand-in zoo (real architectures from compile-ci's corpus, one module
each) or a declared-targets sample (tests/suites/models_repo), with a module a compiler patch would live in."""

from __future__ import annotations

import ast
import dataclasses
import json
import tomllib
from pathlib import Path

from bench.base_compare import ROOT

# name -> (class in suites/correctness/breadth_models.py, its example inputs)
MODELS = {
    "resnet_block": ("ResNetBlock", "(torch.randn(4, 3, 8, 8),)"),
    "unet_block": ("UNetBlock", "(torch.randn(2, 2, 8, 8),)"),
    "transformer_kv_cache": ("TransformerWithKVCache",
                             "(torch.randn(2, 2, 8), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))"),
    "recurrent_cells": ("RecurrentCells", "(torch.randn(2, 3, 3),)"),
    "mixture_of_experts": ("MixtureOfExperts", "(torch.randn(5, 6) * 2,)"),
    "graph_convolution": ("GraphConvolution", "(torch.randn(5, 4), torch.tensor([[0, 2, 3, 4, 0, 1, 3, 2, 4], "
                                              "[1, 1, 1, 0, 2, 3, 2, 0, 3]]))"),
}
HEADER = "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
PATCH = "from torch._inductor import lowering  # a patch lives here ({})\n"  # the compiler surface: everything runs
CONFIG_NAMES = (".compile-ci.toml", "compile-ci.toml")


def model_modules(count: int) -> dict[str, str]:
    """zoo/<name>.py for the first `count` models: the class's source and an examples() that declares it."""
    source = (ROOT / "suites" / "correctness" / "breadth_models.py").read_text()
    classes = {node.name: ast.get_source_segment(source, node) for node in ast.parse(source).body
               if isinstance(node, ast.ClassDef)}
    files = {}
    for name, (cls, inputs) in list(MODELS.items())[:count]:
        files[f"zoo/{name}.py"] = (f'"""{cls}: one model of the zoo."""\n\n{HEADER}{classes[cls]}\n\n\n'
                                   f"def examples():\n    return [({name!r}, {cls}, {inputs})]\n")
    return files


@dataclasses.dataclass(frozen=True)
class Repository:
    files: dict[str, str]  # path -> text, committed one by one before the config
    config: str  # .compile-ci.toml
    model: str  # the module of one declared target: the first pull request changes it
    patches: str  # a module holding a compiler patch: the second pull request changes it


def stand_in_repository(count: int, suites: list[str], device: str) -> Repository:
    modules = model_modules(count)
    specs = ", ".join(f'"zoo.{Path(p).stem}:examples"' for p in modules)
    config = (f'[suites]\ndevices = ["{device}"]\nrun = {json.dumps(suites)}\nflaky_reruns = 0\n'
              f"[targets]\nmodels = [{specs}]\n")
    return Repository({"zoo/__init__.py": "", **modules}, config, next(iter(modules)), "zoo/patches.py")


def declared_repository(path: Path, suites: list[str], device: str, installed: bool) -> Repository:
    """A repository with [targets] (its config named .compile-ci.toml or compile-ci.toml), its [suites] replaced;
    `installed`: without its [install] requirements (the interpreter's own packages stand in)."""
    config_file = next((path / name for name in CONFIG_NAMES if (path / name).is_file()), None)
    if config_file is None:
        raise SystemExit(f"--targets {path}: no {' or '.join(CONFIG_NAMES)} there")
    config = tomllib.loads(config_file.read_text())
    config["suites"] = {**config.get("suites", {}), "devices": [device], "run": suites, "flaky_reruns": 0}
    if installed:
        config["install"] = {k: v for k, v in config.get("install", {}).items() if k != "requirements"}
    files = {f.relative_to(path).as_posix(): f.read_text() for f in sorted(path.rglob("*"))
             if f.is_file() and "__pycache__" not in f.parts and f != config_file}
    specs = [spec for kind in ("models", "fuse") for spec in config.get("targets", {}).get(kind, [])]
    if not specs:
        raise SystemExit(f"--targets {path}: its config declares no [targets] models or fuse")
    stem = specs[0].split(":", 1)[0].replace(".", "/")
    model = next((m for m in (f"{stem}.py", f"{stem}/__init__.py") if m in files), None)
    if model is None:
        raise SystemExit(f"--targets {path}: the module of {specs[0]!r} is not in it")
    return Repository(files, toml_text(config), model, str(Path(model).parent / "compile_ci_bench_patches.py"))


def toml_text(config: dict[str, object]) -> str:
    """A config's tables of strings, numbers, booleans and lists of them as TOML (JSON's literals are TOML's)."""
    lines = []
    for table, values in config.items():
        if not isinstance(values, dict) or any(isinstance(v, dict) for v in values.values()):
            raise SystemExit(f"--targets: only tables of plain values are supported, not [{table}] as it is")
        lines += [f"[{table}]", *(f"{key} = {json.dumps(value)}" for key, value in values.items())]
    return "\n".join(lines) + "\n"
