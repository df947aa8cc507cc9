"""Load the targets a repository declares in .compile-ci.toml [targets], passed in as COMPILE_CI_TARGETS."""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest
import torch
from torch import nn

CHECKOUT_ENV = "COMPILE_CI_CHECKOUT"
TARGETS_ENV = "COMPILE_CI_TARGETS"
NO_MODELS_REASON = "no models declared in .compile-ci.toml [targets]"
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_.:@+-]+")


@dataclass(frozen=True)
class DeclaredModel:
    """One ``(name, factory, example_inputs)`` entry from a declared ``models`` callable."""

    name: str
    spec: str
    factory: Callable[[], nn.Module]
    example_inputs: tuple[Any, ...]

    @property
    def test_id(self) -> str:
        return readable_id(self.name)


@dataclass(frozen=True)
class DeclaredCallable:
    """A declared ``module:callable`` target such as a post-grad pass."""

    spec: str
    fn: Callable[..., Any]

    @property
    def test_id(self) -> str:
        return readable_id(self.spec)


@dataclass(frozen=True)
class TargetError:
    """A declared target that could not be loaded: the test that would have used it fails with ``message``."""

    spec: str
    message: str
    id_hint: str = ""
    subject: str = ""  # what the message is about; defaults to the spec

    @property
    def test_id(self) -> str:
        return readable_id(self.id_hint or self.spec)

    def fail(self) -> NoReturn:
        subject = self.subject or f"declared target {self.spec!r} in .compile-ci.toml [targets]"
        pytest.fail(f"{subject}: {self.message}", pytrace=False)


def readable_id(text: str) -> str:
    """A stable pytest id: check-run annotations and artifact directory names are derived from it."""
    return _UNSAFE_ID_CHARS.sub("_", text).strip("_") or "unnamed"


def add_checkout_to_sys_path(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Put the checkout under test (and its ``src/``) first on sys.path so its packages win over stale installs."""
    checkout = environ.get(CHECKOUT_ENV, "").strip()
    if not checkout:
        return []
    root = os.path.abspath(checkout)
    added = [path for path in (root, os.path.join(root, "src")) if os.path.isdir(path) and path not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()
    return added


def _is_import_machinery(filename: str) -> bool:
    return (
        filename.startswith("<frozen")
        or filename == __file__
        or os.path.dirname(filename) == os.path.dirname(importlib.__file__)
    )


def _describe(exc: BaseException) -> str:
    # The innermost frame outside the import machinery is where the repository's own code went wrong.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_import_machinery(f.filename)]
    where = f" (raised at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def resolve_spec(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:attribute"`` and return the callable; raise ValueError with a readable reason."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError('expected "package.module:callable"')
    try:
        target: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        hint = f"; {CHECKOUT_ENV}={os.environ.get(CHECKOUT_ENV, '(unset)')}" if isinstance(exc, ImportError) else ""
        raise ValueError(f"cannot import module {module_name!r}: {_describe(exc)}{hint}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{attribute!r} is a {type(target).__name__}, not a callable")
    return target


def declared_specs(kind: str, raw: str) -> list[str] | TargetError:
    """The specs listed under ``kind`` in the JSON value of COMPILE_CI_TARGETS (absent or empty -> none)."""
    if not raw.strip():
        return []
    try:
        targets = json.loads(raw)
    except json.JSONDecodeError as exc:
        return TargetError(TARGETS_ENV, f"not valid JSON: {exc}", id_hint="targets", subject=TARGETS_ENV)
    specs = targets.get(kind, []) if isinstance(targets, dict) else None
    if not isinstance(specs, list) or not all(isinstance(spec, str) for spec in specs):
        message = f'must be a list of "module:callable" strings, got {specs!r}'
        return TargetError(kind, message, subject=f".compile-ci.toml [targets] {kind}")
    return specs


def _models_from_spec(spec: str) -> list[DeclaredModel | TargetError]:
    try:
        examples = resolve_spec(spec)
    except ValueError as exc:
        return [TargetError(spec, str(exc))]
    try:
        torch.manual_seed(0)  # example inputs drawn with torch.randn are then the same on every run
        entries = list(examples())
    except (Exception, SystemExit) as exc:
        return [TargetError(spec, f"calling it failed: {_describe(exc)}")]
    models: list[DeclaredModel | TargetError] = []
    for index, entry in enumerate(entries):
        shape_ok = isinstance(entry, tuple | list) and len(entry) == 3
        name, factory, inputs = entry if shape_ok else (None, None, None)
        if not (isinstance(name, str) and callable(factory) and isinstance(inputs, tuple | list)):
            problem = f"entry {index} must be (name: str, factory: () -> nn.Module, example_inputs: tuple)"
            models.append(TargetError(spec, f"{problem}, got {entry!r:.200}", id_hint=f"{spec}[{index}]"))
            continue
        models.append(DeclaredModel(name, spec, keeping_float32_precision(factory), tuple(inputs)))
    return models


def keeping_float32_precision(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """``factory`` with the TF32 flags it finds left as they were when it returns: the suites judge CUDA kernels in
    plain float32 (``judging.full_precision_on_cuda``), and a factory that opts its model into TF32 (a common line
    in training code) would otherwise put TF32's noise back into the judgement."""

    @functools.wraps(factory)
    def build() -> nn.Module:
        cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
        saved = cudnn.allow_tf32, matmul.allow_tf32
        try:
            return factory()
        finally:
            if cudnn.allow_tf32 != saved[0]:
                cudnn.allow_tf32 = saved[0]  # a factory could assign it, so we can: torch has not frozen the flags
            matmul.allow_tf32 = saved[1]

    return build


@functools.cache
def _declared_models(raw: str) -> tuple[DeclaredModel | TargetError, ...]:
    specs = declared_specs("models", raw)
    if isinstance(specs, TargetError):
        return (specs,)
    loaded: list[DeclaredModel | TargetError] = []
    seen: dict[str, str] = {}
    for spec in specs:
        for entry in _models_from_spec(spec):
            if isinstance(entry, DeclaredModel) and entry.test_id in seen:
                message = f"model name {entry.name!r} is also declared by {seen[entry.test_id]!r}; names must be unique"
                entry = TargetError(spec, message, id_hint=f"{entry.name}@{spec}")
            elif isinstance(entry, DeclaredModel):
                seen[entry.test_id] = spec
            loaded.append(entry)
    return tuple(loaded)


def declared_models(environ: Mapping[str, str] = os.environ) -> list[DeclaredModel | TargetError]:
    """Every model the repository declares, or an error entry per spec that could not be loaded."""
    return list(_declared_models(environ.get(TARGETS_ENV, "")))


def declared_callables(kind: str, environ: Mapping[str, str] = os.environ) -> list[DeclaredCallable | TargetError]:
    """Every ``module:callable`` under ``kind`` (e.g. ``post_grad_passes``), or an error entry per bad spec."""
    specs = declared_specs(kind, environ.get(TARGETS_ENV, ""))
    if isinstance(specs, TargetError):
        return [specs]
    loaded: list[DeclaredCallable | TargetError] = []
    for spec in specs:
        try:
            loaded.append(DeclaredCallable(spec, resolve_spec(spec)))
        except ValueError as exc:
            loaded.append(TargetError(spec, str(exc)))
    return loaded
