"""What inductor and dynamo did while one test ran: generated code, counter deltas, graph-break and recompile reasons.

Used by the artifacts plugin around each test's call. Torch's private state is reached only through
``harness._optional`` (a missing API drops a figure, never the test). What the test's own code can make long or
numerous (reasons quote the test's source, a test can compile a thousand graphs) is bounded here, before it is
written: the service reads these files from an untrusted job.
"""

from __future__ import annotations

import contextlib
import re
import unittest
from collections.abc import Callable, Iterator
from typing import Any

from suites import harness

MAX_REASONS = 20  # per list; the counters still count every graph break and recompile
MAX_REASON_CHARS = 400
# What the capture hooks (each test's call), in its order below; `import_hooked` imports them ahead of the call.
HOOKED = ("torch._inductor.graph", "torch._inductor.output_code", "torch._dynamo.output_graph", "torch._dynamo.guards",
          "torch._dynamo.utils", "torch._inductor.metrics")
_COMPILE_ID = re.compile(r"^\[?\d+/\d+\]?:\s*")  # "2/0: " differs between runs of the same test
_SPACES = re.compile(r"\s+")
_ACTIVE: list[CompileCapture] = []  # the captures whose test is running (the plugin's, and any a test nests)


def import_hooked() -> None:
    """Import what the capture hooks and counts, so that a test's call pays none of it (a torch lacking one: the
    capture does without it, as at its call)."""
    for module in HOOKED:
        harness._optional(module, "__name__")


def bounded(text: str) -> str:
    """One line, at most MAX_REASON_CHARS characters."""
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def describe_graph_break(reason: Any, root: str) -> str:
    """dynamo's GraphCompileReason as `<what> — <explanation> (<file>:<line>)`, the innermost frame of the
    repository's own code where there is one (paths relative to ``root``), else the innermost traced frame."""
    lines = [line.strip() for line in str(getattr(reason, "reason", "")).splitlines() if line.strip()]
    text = lines[0] if lines else "graph break"
    explanation = next((line for line in lines[1:] if line.startswith("Explanation:")), "")
    if explanation:
        text += " — " + explanation.removeprefix("Explanation:").strip()
    frames = list(getattr(reason, "user_stack", None) or [])
    own = [frame for frame in frames if root and str(frame.filename).startswith(root + "/")]
    frame = (own or frames or [None])[-1]
    if frame is not None:
        filename = str(frame.filename)
        where = filename[len(root) + 1:] if root and filename.startswith(root + "/") else filename
        text += f" ({where}:{frame.lineno})"
    return bounded(text)


def describe_recompile(reason: str) -> str:
    """A guard failure without its compile id (which frame number it was differs between runs) or user stack."""
    return bounded(_COMPILE_ID.sub("", str(reason).split("\nUser stack trace:", 1)[0]))


def _snapshot() -> dict[str, float]:
    # Best effort on any torch version: a missing private figure is left out.
    snap: dict[str, float] = {}
    counters = harness._optional("torch._dynamo.utils", "counters") or {}
    snap.update(
        frames=counters.get("frames", {}).get("total", 0),
        graphs=counters.get("stats", {}).get("unique_graphs", 0),
        graph_breaks=sum(counters.get("graph_break", {}).values()),
        fx_graph_cache_hits=counters.get("inductor", {}).get("fxgraph_cache_hit", 0),
        fx_graph_cache_misses=counters.get("inductor", {}).get("fxgraph_cache_miss", 0),
        autograd_cache_hits=counters.get("aot_autograd", {}).get("autograd_cache_hit", 0),
        autograd_cache_misses=counters.get("aot_autograd", {}).get("autograd_cache_miss", 0),
    )
    kernels = harness._optional("torch._inductor.metrics", "generated_kernel_count")
    if kernels is not None:
        snap["kernels_generated"] = kernels
    return snap


# dynamo's timing lists: a whole compile, and the backend's part of it (inductor, which the caches shorten).
_TIMED = ("_compile.compile_inner", "OutputGraph.call_user_compiler")


class _Timings:
    """Seconds dynamo recorded under each _TIMED key since ``start``. ``torch._dynamo.reset()`` drops its lists
    (a test that resets first and then compiles longer than the tests before it would otherwise count only the
    excess), so what was recorded is kept before each reset, and a list that is not the one marked is new."""

    def __init__(self) -> None:
        self.kept = dict.fromkeys(_TIMED, 0.0)
        self._marks: dict[str, tuple[object, int]] = {}

    @staticmethod
    def _lists() -> dict[str, list[float]]:
        times = harness._optional("torch._dynamo.utils", "compilation_time_metrics")
        return {key: times.get(key) or [] for key in _TIMED} if isinstance(times, dict) else {}

    def start(self) -> None:
        self.kept = dict.fromkeys(_TIMED, 0.0)
        self._marks = {key: (entries, len(entries)) for key, entries in self._lists().items()}

    def keep(self) -> None:
        """Add what was recorded since the last mark (before a reset clears it, and at the end)."""
        for key, entries in self._lists().items():
            marked, length = self._marks.get(key, (None, 0))
            self.kept[key] += sum(entries[length:] if entries is marked else entries)
            self._marks[key] = (entries, len(entries))

    def figures(self) -> dict[str, float]:
        if not self._lists():
            return {}
        compile_s, backend_s = (self.kept[key] for key in _TIMED)
        # Dynamo's own share (tracing, guards) is the same whether inductor's output came from a cache or not.
        return {"compile_time_s": round(compile_s, 4), "dynamo_time_s": round(max(0.0, compile_s - backend_s), 4)}


@contextlib.contextmanager
def _patched(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` replaced by ``make(previous)`` for the body (nothing when this torch lacks the owner)."""
    if owner is None or not hasattr(owner, name):
        yield
        return
    previous = getattr(owner, name)
    setattr(owner, name, make(previous))
    try:
        yield
    finally:
        setattr(owner, name, previous)


def add_foreign_code(codes: list[str]) -> None:
    """Count ``codes`` as generated by the running test although another process compiled them (a rank of the
    distributed suite), so the test's artifacts show them like its own; nothing when no capture is active."""
    if _ACTIVE:
        for code in codes:
            _ACTIVE[-1]._code(code)


class CompileCapture:
    """What inductor produced while a test ran: the generated code of each graph and compile metrics.

    Events (generated code, graph breaks, guard failures) are caught as they happen, so a test that resets dynamo
    or clears its counters loses none of them. Counters are diffed between two snapshots: a unittest test's
    ``setUp``/``tearDown`` (PyTorch's TestCase clears the counters in both) are stepped over by ``around``, and a
    counter found lower at the end than at the start was cleared mid-test and counts from that clear.
    """

    def __init__(self, root: str = "") -> None:
        self.root = root.rstrip("/")
        self.codes: list[str] = []
        self.code_bytes = 0
        self.graph_break_reasons: list[str] = []
        self.recompile_reasons: list[str] = []
        self.recompiles = 0
        self.metrics: dict[str, Any] = {}
        self._start: dict[str, float] = {}
        self._end: dict[str, float] | None = None
        self._timings = _Timings()

    def _code(self, code: str) -> None:
        self.codes.append(code)
        self.code_bytes += len(code.encode("utf-8", "replace"))

    def _graph_break(self, reason: Any) -> None:
        if getattr(reason, "graph_break", True) and len(self.graph_break_reasons) < MAX_REASONS:
            self.graph_break_reasons.append(describe_graph_break(reason, self.root))

    def _guard_failure(self, reason: str) -> None:
        self.recompiles += 1
        if len(self.recompile_reasons) < MAX_REASONS:
            self.recompile_reasons.append(describe_recompile(reason))

    def _hooks(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()

        def save_code(previous: Callable[[str], None] | None) -> Callable[[str], None]:
            def save(code: str) -> None:  # inductor's own callback: each graph's code, FX-graph-cache hits too
                self._code(code)
                if previous is not None:
                    previous(code)
            return save

        def on_lines(previous: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            def compile_lines(graph: Any, wrapper_code: Any) -> Any:  # a graph compiled now
                self._code(str(wrapper_code.value))
                return previous(graph, wrapper_code)
            return compile_lines

        def on_load(previous: Callable[[Any, Any], str]) -> Callable[[Any, Any], str]:
            def after_deserialization(graph: Any, constants: Any) -> str:  # a graph loaded from a cache
                path = previous(graph, constants)
                self._code(str(getattr(graph, "source_code", "")))
                return path
            return after_deserialization

        def on_break(previous: Callable[[Any], None]) -> Callable[[Any], None]:
            def post_init(reason: Any) -> None:
                previous(reason)
                self._graph_break(reason)
            return post_init

        def on_reset(previous: Callable[[], None]) -> Callable[[], None]:
            def reset_frame_count() -> None:  # torch._dynamo.reset() is about to drop the timing lists
                if self._end is None:
                    self._timings.keep()
                previous()
            return reset_frame_count

        def on_guard_failure(previous: Callable[..., str]) -> Callable[..., str]:
            def reason(*args: Any, **kwargs: Any) -> str:
                text = previous(*args, **kwargs)
                # skip_logging: dynamo only asked, without recording a failure (nor a recompile)
                if not (kwargs.get("skip_logging") or (len(args) > 5 and args[5])):
                    self._guard_failure(text)
                return text
            return reason

        # Where inductor makes or loads a graph's code: a test that patches `save_output_code` itself (inductor's
        # own run_and_get_code does) hides nothing from us. A torch without them: that callback, chained.
        lowering = harness._optional(HOOKED[0], "GraphLowering")
        compiled = harness._optional(HOOKED[1], "CompiledFxGraph")
        if hasattr(lowering, "_compile_to_module_lines") and hasattr(compiled, "after_deserialization"):
            stack.enter_context(_patched(lowering, "_compile_to_module_lines", on_lines))
            stack.enter_context(_patched(compiled, "after_deserialization", on_load))
        else:
            stack.enter_context(_patched(lowering, "save_output_code", save_code))
        stack.enter_context(_patched(harness._optional(HOOKED[2], "GraphCompileReason"),
                                     "__post_init__", on_break))
        stack.enter_context(_patched(harness._optional("torch._dynamo", "guards"),
                                     "get_guard_fail_reason", on_guard_failure))
        stack.enter_context(_patched(harness._optional("torch", "_dynamo"), "reset_frame_count", on_reset))
        return stack

    def restart(self) -> None:
        """Counters count from here (after a unittest ``setUp`` that cleared them)."""
        self._start = _snapshot()
        self._timings.start()

    def finish(self) -> None:
        """Counters stop here (before a unittest ``tearDown`` clears them); later calls change nothing."""
        if self._end is None:
            self._timings.keep()
            self._end = _snapshot()

    @contextlib.contextmanager
    def active(self, instance: object = None) -> Iterator[CompileCapture]:
        """Hook inductor's and dynamo's own callbacks for the body; no debug mode is turned on, so what the test
        exercises, caches included, is unchanged. ``instance``: the test's unittest.TestCase, if it is one."""
        with self._hooks(), self.around(instance):
            self.restart()
            _ACTIVE.append(self)
            try:
                yield self
            finally:
                _ACTIVE.remove(self)
                self.finish()
                end = self._end or {}
                self.metrics = {k: round(v - self._start.get(k, 0) if v >= self._start.get(k, 0) else v, 4)
                                for k, v in end.items()}
                self.metrics.update(self._timings.figures(), recompiles=self.recompiles)

    @contextlib.contextmanager
    def around(self, instance: object) -> Iterator[None]:
        """Snapshot after a unittest test's ``setUp`` and before its ``tearDown``, which may clear the counters."""
        if not isinstance(instance, unittest.TestCase):
            yield
            return
        set_up, tear_down = instance.setUp, instance.tearDown
        own = {name: vars(instance)[name] for name in ("setUp", "tearDown") if name in vars(instance)}

        def setUp() -> None:  # noqa: N802 (unittest's name)
            set_up()
            self.restart()

        def tearDown() -> None:  # noqa: N802
            self.finish()
            tear_down()

        instance.setUp, instance.tearDown = setUp, tearDown  # type: ignore[method-assign]
        try:
            yield
        finally:
            for name in ("setUp", "tearDown"):
                if name in own:
                    setattr(instance, name, own[name])
                else:
                    delattr(instance, name)
