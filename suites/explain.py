"""What a red declared-model test leaves behind so that it explains itself: how its tolerance was derived, a script
that runs torch's own minifier on the model (`minify.py`, or where the minifier cannot reproduce the suite's step,
the reason instead), and for a crash in inductor's generated code the module that crashed (`crashed_graph.py`,
runnable on its own) with the failing line. Every suite's declared-model test judges through here.

Files go beside the test's other artifacts (`$COMPILE_CI_OUTPUT_DIR/tests/<sanitised node id>/`); without that
variable nothing is written and the failure says so.
"""

from __future__ import annotations

import contextlib
import os
import pprint
import shutil
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from torch import nn

from .batch_statistics import NO_NOISE, Noise, measure_noise
from .judging import RULE, differences_from_reference, fail_on_differences, preliminary
from .module_runs import ModuleRun, fp64_step
from .naming import sanitise_nodeid
from .rounding_noise import module_nearby
from .targets import DeclaredModel

OUTPUT_ENV = "COMPILE_CI_OUTPUT_DIR"
SUITES_RULE = f"tolerance: {RULE} (the fp64 reference is an fp64 copy of the model run on the upcast inputs)"
_MINIFY = Path(__file__).with_name("minify_template.py").read_text()
# Inductor writes a graph's code under its cache directory as <2 chars>/c<hash>.py and imports it from there.
_GENERATED_MARKERS = ("torchinductor", "inductor")


class Declared(Protocol):
    """A declared model (targets.DeclaredModel: built by calling its factory) or a declared ``fuse`` function
    (fusion's DeclaredFusion: compiled as it is): the entry ``name`` of the ``[targets]`` callable ``spec``."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> str: ...


@dataclass(frozen=True)
class Subject:
    """The declared target a test runs, and the test: what its explanation files are about and named after.

    How the suite ran the step, so that minify.py runs the same one: ``eval`` (the model put in eval mode),
    ``config`` (the inductor settings the suite compiles under), ``channels_last`` (4-D inputs converted).
    ``no_minifier``: why torch's minifier cannot reproduce this suite's step; the failure then says so and no
    minify.py is written."""

    nodeid: str
    model: Declared
    device: str
    eval: bool = False
    config: tuple[tuple[str, Any], ...] = ()
    channels_last: bool = False
    no_minifier: str = ""


def artifact_dir(nodeid: str) -> Path | None:
    output = os.environ.get(OUTPUT_ENV)
    return Path(output) / "tests" / sanitise_nodeid(nodeid) if output else None


def _write(nodeid: str, name: str, text: str) -> str:
    directory = artifact_dir(nodeid)
    if directory is None:
        return f"(not kept: {OUTPUT_ENV} is unset)"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    return f"{name} beside this test's artifacts"


def forget(nodeid: str) -> None:
    """Remove what an earlier attempt of this test left (an in-job rerun that passes must not keep it)."""
    directory = artifact_dir(nodeid)
    for name in ("minify.py", "crashed_graph.py"):
        if directory is not None:
            (directory / name).unlink(missing_ok=True)


def minify_script(subject: Subject, *, backward: bool, crash: bool) -> str:
    """A standalone script: rebuild the declared model (or take the declared function) from a clone, run the
    compiled step as the suite ran it under torch's repro settings and run the minifier launcher torch writes.
    Accuracy: after AOT, then after dynamo, level 4 (after AOT, inductor's decompositions are already in the graph
    both sides run, so a bug there shows only after dynamo). Crash: after AOT, level 2 (the graph that raised)."""
    model = subject.model
    settings = {
        "nodeid": subject.nodeid, "spec": model.spec, "name": model.name, "device": subject.device,
        "backward": backward, "call": "module" if isinstance(model, DeclaredModel) else "function",
        "eval": subject.eval, "channels_last": subject.channels_last, "inductor_config": dict(subject.config),
        "attempts": [("aot", 2)] if crash else [("aot", 4), ("dynamo", 4)], "what": "crash" if crash else "accuracy",
    }
    return _MINIFY.replace("SETTINGS = {}", f"SETTINGS = {pprint.pformat(settings, sort_dicts=False)}", 1)


def _minify_note(subject: Subject, *, backward: bool, crash: bool) -> str:
    if subject.no_minifier:
        return f"minimised repro: no minify.py: {subject.no_minifier}"
    script = minify_script(subject, backward=backward, crash=crash)
    where = _write(subject.nodeid, "minify.py", script)
    how = "TORCHDYNAMO_REPRO_AFTER=aot, TORCHDYNAMO_REPRO_LEVEL=2" if crash else (
        "TORCHDYNAMO_REPRO_AFTER=aot then dynamo, TORCHDYNAMO_REPRO_LEVEL=4")
    return (
        f"minimised repro: {where}: `python minify.py [CLONE]` rebuilds {subject.model.name!r} from the clone and "
        f"runs torch's minifier ({how}) down to the smallest failing graph"
    )


def _differences(compiled: ModuleRun, eager: ModuleRun, fp64: ModuleRun, backward: bool, noise: Noise,
                 rerun: Callable[[], ModuleRun] | None = None,
                 nearby: Callable[[int], tuple[ModuleRun, ModuleRun]] | None = None) -> list[str]:
    problems = differences_from_reference(
        compiled.outputs, eager.outputs, fp64.outputs, noise=noise, rerun=rerun and (lambda: rerun().outputs),
        nearby=nearby and (lambda seed: tuple(run.outputs for run in nearby(seed))))
    if backward:
        problems += differences_from_reference(
            compiled.grads, eager.grads, fp64.grads, what="grad", noise=noise, rerun=rerun and (lambda: rerun().grads),
            nearby=nearby and (lambda seed: tuple(run.grads for run in nearby(seed))))
    return problems


def judge_step(
    compiled: ModuleRun, eager: ModuleRun, fp64: ModuleRun, *, pristine: nn.Module, inputs: tuple[Any, ...],
    backward: bool, subject: Subject | None = None,
) -> None:
    """Judge a step's outputs (and gradients) against the fp64 reference and fail explained. Only when the rule fails
    without noise is each element's rounding noise measured, from ``pristine`` (the model before the step): the fp64
    step run again with every rounding drawn (rounding_noise.py), for a model that normalises with batch statistics
    with those layers' float32 error drawn (batch_statistics.py), and eager's own error on nudged inputs; the step is
    then judged again."""
    with preliminary():  # a difference here only says the noise is worth measuring
        problems, noise = _differences(compiled, eager, fp64, backward, NO_NOISE), NO_NOISE
    if problems:
        noise = measure_noise(pristine, inputs, fp64, backward=backward)
        problems = _differences(compiled, eager, fp64, backward, noise, fp64_step(pristine, inputs, backward=backward),
                                module_nearby(pristine, inputs, backward=backward))
    _fail_explained(problems, f"tolerance: {noise.derivation}; {RULE}" if noise else SUITES_RULE, subject, backward)


def judge_outputs(
    compiled: Any, eager: Any, fp64: Any, *, subject: Subject | None, what: str = "output",
    grads: tuple[Any, Any, Any] | None = None, rerun: Callable[[], Any] | None = None,
    grads_rerun: Callable[[], Any] | None = None,
) -> None:
    """Judge a step by the suites' rule and fail explained: outputs (paths start with ``what``) and, given
    ``(compiled, eager, fp64)`` gradients, those; ``rerun`` (``grads_rerun``) computes ``fp64`` (its gradients) again,
    for the rounding noise. No
    batch-statistics allowance: for the suites that judge an inference-mode forward (freezing, layout) or a declared
    function (fusion)."""
    problems = differences_from_reference(compiled, eager, fp64, what=what, rerun=rerun)
    if grads is not None:
        problems += differences_from_reference(*grads, what="grad", rerun=grads_rerun)
    _fail_explained(problems, SUITES_RULE, subject, grads is not None)


def _fail_explained(problems: list[str], tolerance: str, subject: Subject | None, backward: bool) -> None:
    if not problems:
        return
    notes = [tolerance]
    if subject is not None:
        notes.append(_minify_note(subject, backward=backward, crash=False))
    fail_on_differences(problems, tuple(notes))


def _generated_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost traceback frame in a module inductor generated (its cache path and its `call` wrapper)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = Path(frame.filename)
        if path.suffix == ".py" and path.name.startswith("c") and any(m in str(path) for m in _GENERATED_MARKERS):
            return frame
    return None


@contextlib.contextmanager
def crash_in_generated_code(subject: Subject | None, *, backward: bool) -> Iterator[None]:
    """Around a compiled run: an exception raised inside inductor's generated code fails the test naming the
    kernel's line, keeping the generated module (standalone: it runs itself on random inputs) and minify.py."""
    try:
        yield
    except Exception as exc:
        frame = _generated_frame(exc)
        if frame is None or subject is None:
            raise
        lines = _crash_lines(exc, frame, subject, backward)
    else:
        return
    pytest.fail("\n".join(lines), pytrace=False)  # outside the except: the crash is told once, not as a chain


def _crash_lines(exc: Exception, frame: traceback.FrameSummary, subject: Subject, backward: bool) -> list[str]:
    kept = "(not kept)"
    directory = artifact_dir(subject.nodeid)
    if directory is not None and os.path.isfile(frame.filename):
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(frame.filename, directory / "crashed_graph.py")
        kept = "crashed_graph.py beside this test's artifacts"
    return [
        f"crash in inductor's generated code: {type(exc).__name__}: {exc}",
        f"  at line {frame.lineno} of the generated module, in {frame.name}: {(frame.line or '').strip()}",
        f"the generated module: {kept} (also among this test's output_code_*.py); `python crashed_graph.py` "
        f"runs it on random inputs of the recorded shapes, needing only torch",
        _minify_note(subject, backward=backward, crash=True),
    ]
