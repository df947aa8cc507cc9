"""The compiler's imports made once in a warm interpreter (suites/warm_process.py started with `compiler`), for the
jobs whose fresh process makes them before any code of their repository runs.

A built-in suite's fresh process (runners/first_code.py says which jobs those are) imports dynamo and inductor's
graph and decompositions in suites/coverage.py's `pytest_configure` (suites/harness.py), after torch, pytest and the
installed plugins: about 3 s of CPU on the 2-core host and most of a GPU shard's 4-7.5 s start (docs/operating.md).
This module makes them in the warm interpreter and records what a fork could otherwise get wrong:
- every variable they read by name, with the value they saw, and the modules that iterated the environment;
- every place in the module state (module globals, and the dicts, lists, sets and object attributes they reach)
  holding a path inside the warm interpreter's own directory: its HOME, TMPDIR and caches stand in for the job's,
  and whatever the imports derived from them (inductor's precompiled headers' directory, dynamo's package cache) must
  be the job's;
- the directories they created there.

A forked job takes the imports only when nothing they depended on differs (`unsure`): each variable read by name has
the job's value, but the path variables, which the job must set and whose places are then rewritten to its paths
(`retake`); a module that iterated the environment is one of `ITERATING` and the variables it takes are the job's;
the installed pytest plugins are the warm interpreter's (an install step that added one runs it before the configure
hooks). Otherwise the job's process starts afresh (suites/warm_process.py). The plugins themselves are not imported
ahead: pytest imports them through its assertion rewriter, which a module imported earlier misses.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# What suites/coverage.py's pytest_configure imports (suites/harness.py): record_lowered_ops, record_decompositions
# and dynamo's counters.
IMPORTS = ("torch._dynamo.utils", "torch._inductor.graph", "torch._inductor.decomposition")
# The job's own directories: the warm interpreter has directories of its own in their place.
PATHS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HOME", "TMPDIR")
# Modules that iterate the environment at import, and the only variables they take from it (a name prefix).
ITERATING = {"networkx.utils.backends": ("NETWORKX_",)}
SCAN_DEPTH = 5
SCAN_ITEMS = 20_000
OWN = ("suites", "__main__", "__mp_main__")
_ABC = ("_collections_abc", "collections.abc")  # the mapping views' module (it names itself collections.abc)
KEY, MEMBER = "<key>", "<member>"  # a place's key: a dict's key, a set's member (replaced, not assigned)


@dataclass
class Place:
    owner: Any  # a dict or list that holds the value
    key: Any
    where: str


@dataclass
class Ahead:
    read: dict[str, str | None] = field(default_factory=dict)  # name -> the value the imports saw (None: unset)
    iterated: set[str] = field(default_factory=set)  # modules that iterated the environment
    places: list[Place] = field(default_factory=list)
    made: list[str] = field(default_factory=list)  # directories created in the warm interpreter's own directory
    plugins: list[str] = field(default_factory=list)
    private: str = ""  # the warm interpreter's own directory
    mine: dict[str, str] = field(default_factory=dict)  # its path variables
    environ: dict[str, str] = field(default_factory=dict)  # its environment when the imports began


class _Reads(os._Environ):  # type: ignore[misc,type-arg]
    """os.environ that remembers each variable read by name (with its value) and who iterated it (the values an
    iteration reads are not reads by name)."""

    ahead: Ahead

    def __getitem__(self, key: str) -> str:
        caller = sys._getframe(1)
        iterating = caller.f_code.co_name == "__iter__" and caller.f_globals.get("__name__") in _ABC
        try:
            value = super().__getitem__(key)
        except KeyError:
            if not iterating:
                self.ahead.read.setdefault(key, None)
            raise
        if not iterating:
            self.ahead.read.setdefault(key, value)
        return value

    def __iter__(self) -> Any:
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "") in ("os", __name__, *_ABC):
            frame = frame.f_back  # type: ignore[assignment]
        self.ahead.iterated.add(frame.f_globals.get("__name__", "?") if frame is not None else "?")
        return super().__iter__()


@contextlib.contextmanager
def recorded(ahead: Ahead) -> Iterator[None]:
    """os.environ read through a recorder (the same variables) while the block runs: into `ahead`."""
    real = os.environ
    recording = _Reads(real._data, real.encodekey, real.decodekey, real.encodevalue,  # type: ignore[attr-defined]
                       real.decodevalue)  # type: ignore[attr-defined]
    recording.ahead = ahead
    os.environ = recording  # noqa: B003 - the same variables, read through a recorder
    try:
        yield
    finally:
        os.environ = real  # noqa: B003


def plugins() -> list[str]:
    return sorted(f"{ep.name}={ep.value}" for ep in importlib.metadata.entry_points(group="pytest11"))


def import_ahead(private: str) -> tuple[Ahead, str]:
    """Make the imports with the environment recorded; (what they depended on, why no job can take them or '')."""
    ahead = Ahead(private=os.path.abspath(private), plugins=plugins(), environ=dict(os.environ))
    ahead.mine = {name: os.path.abspath(os.environ[name]) for name in PATHS if os.environ.get(name)}
    existing = _directories(ahead.private)
    try:
        with recorded(ahead), _cuda_answered():
            for name in IMPORTS:
                __import__(name)
    except Exception as exc:  # noqa: BLE001 - a job then imports them itself, as a fresh one does
        return ahead, f"the compiler's imports failed here: {type(exc).__name__}: {exc}"[:300]
    ahead.made = sorted(_directories(ahead.private) - existing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ahead.places, fixed = scan(ahead.private)
    if fixed:
        return ahead, f"the imports kept the warm interpreter's directory where a job cannot replace it: {fixed[0]}"
    return ahead, ""


@contextlib.contextmanager
def _cuda_answered() -> Iterator[None]:
    """`torch.cuda.is_available()` answered, while the imports run, by a fresh interpreter with this environment:
    asked here, the CUDA runtime would initialise the driver in the warm interpreter, which then cannot be forked
    (inductor's benchmarking module asks at import); the answer is the one a fresh job with the same environment and
    GPUs gets (the interpreter is kept per CUDA_VISIBLE_DEVICES)."""
    import torch

    if not torch.cuda._is_compiled() or torch.cuda.is_initialized():
        yield
        return
    asked = subprocess.run([sys.executable, "-c", "import torch; print(int(torch.cuda.is_available()))"],
                           capture_output=True, text=True, timeout=300, check=False)
    answer = asked.stdout.strip().endswith("1")
    stock = torch.cuda.is_available
    torch.cuda.is_available = lambda: answer
    try:
        yield
    finally:
        torch.cuda.is_available = stock


def _directories(root: str) -> set[str]:
    found: set[str] = set()
    for top, dirs, _files in os.walk(root):
        found.update(os.path.relpath(os.path.join(top, d), root) for d in dirs)
    return found


def scan(private: str) -> tuple[list[Place], list[str]]:
    """Every place the module state holds a string or path inside `private` (module globals, and the dicts, lists,
    sets and objects they reach, SCAN_DEPTH deep); and where one sits that cannot be replaced (in a tuple)."""
    places: list[Place] = []
    fixed: list[str] = []
    seen: set[int] = set()

    def walk(value: Any, owner: Any, key: Any, where: str, depth: int) -> None:
        kind = type(value)  # by its type only: an object's own __class__ or attribute hooks never run
        if issubclass(kind, str) or (issubclass(kind, os.PathLike) and not issubclass(kind, type)):
            try:
                text = os.fspath(value)
            except Exception:  # noqa: BLE001 - a path-like object that cannot say its path
                return
            if issubclass(type(text), str) and private in text:
                (places.append(Place(owner, key, where)) if owner is not None else fixed.append(where))
            return
        if issubclass(kind, (bytes, int, float, complex, type(None))) or depth > SCAN_DEPTH or id(value) in seen:
            return
        seen.add(id(value))
        if issubclass(kind, dict):
            for k, item in list(value.items())[:SCAN_ITEMS]:
                walk(k, value, (KEY, k), f"{where} (a key)", depth + 1)
                walk(item, value, k, f"{where}[{k!r:.60}]", depth + 1)
        elif issubclass(kind, (list, set)):
            for index, item in enumerate(list(value)[:SCAN_ITEMS]):
                walk(item, value, index if issubclass(kind, list) else (MEMBER, item), f"{where}[{index}]", depth + 1)
        elif issubclass(kind, (tuple, frozenset)):
            for index, item in enumerate(list(value)[:SCAN_ITEMS]):
                walk(item, None, None, f"{where}[{index}]", depth + 1)
        elif not issubclass(kind, (type, types.ModuleType)) and not callable(value):
            try:  # not through the object's own attribute hooks (a deprecated alias warns, a lazy one imports)
                attributes = object.__getattribute__(value, "__dict__")
            except Exception:  # noqa: BLE001 - no instance dictionary
                return
            if type(attributes) is dict:
                walk(attributes, None, None, f"{where}.__dict__", depth)

    for name, module in list(sys.modules.items()):
        attributes = getattr(module, "__dict__", None)
        if name.partition(".")[0] in OWN or not isinstance(attributes, dict):
            continue
        for key, value in list(attributes.items()):
            walk(value, attributes, key, f"{name}.{key}", 0)
    return places, fixed


def unsure(ahead: Ahead, env: dict[str, str] | os._Environ[str]) -> str:
    """Why a job with this environment (its own, as its process starts) must not take the imports ('' when it
    may)."""
    for name, seen in sorted(ahead.read.items()):
        if name in ahead.mine:
            if not env.get(name):
                return f"the compiler's imports read {name}, which this job does not set"
        elif env.get(name) != seen:
            return f"the compiler's imports read {name}, which this job sets otherwise"
    if (ahead.places or ahead.made) and not all(env.get(name) for name in ahead.mine):
        return "the compiler's imports kept paths of the warm interpreter's own, and this job lacks one of " + \
            ", ".join(sorted(ahead.mine))
    for module in sorted(ahead.iterated):
        prefixes = ITERATING.get(module)
        if prefixes is None:
            return f"{module} read the whole environment while the compiler's modules were imported"
        if {k: v for k, v in env.items() if k.startswith(prefixes)} != \
                {k: v for k, v in ahead.environ.items() if k.startswith(prefixes)}:
            return f"{module} read variables this job sets otherwise ({', '.join(prefixes)}...)"
    if plugins() != ahead.plugins:
        return "the installed pytest plugins differ from the warm interpreter's"
    return ""


def _mapped(ahead: Ahead, text: str, env: dict[str, str] | os._Environ[str]) -> str:
    """`text` with each path of the warm interpreter's own made the job's (longest first): its path variables' values
    the job's, the rest of its directory the job's working directory."""
    table = {mine: os.path.abspath(env[name]) for name, mine in ahead.mine.items() if env.get(name)}
    table.setdefault(ahead.private, os.getcwd())
    pattern = "|".join(re.escape(mine) for mine in sorted(table, key=len, reverse=True))
    return re.sub(f"({pattern})(?=$|[/:;,\\s'\"])", lambda m: table[m.group(1)], text)


def retake(ahead: Ahead, env: dict[str, str] | os._Environ[str]) -> None:
    """The job's own paths wherever the warm interpreter's are kept (its environment, the places `scan` found), and
    the directories the imports made in its own."""
    for name, value in list(env.items()):  # what the imports set (cache_dir() sets TORCHINDUCTOR_CACHE_DIR)
        if ahead.private in value:
            env[name] = _mapped(ahead, value, env)
    # A dict's values before its keys (a value's place names its key).
    for place in sorted(ahead.places, key=lambda p: _special(p.key)):
        key = place.key
        try:
            if _special(key) and key[0] == KEY and key[1] in place.owner:
                place.owner[_replaced(ahead, key[1], env)] = place.owner.pop(key[1])
            elif _special(key) and key[1] in place.owner:
                place.owner.discard(key[1])
                place.owner.add(_replaced(ahead, key[1], env))
            elif not _special(key):
                place.owner[key] = _replaced(ahead, place.owner[key], env)
        except (KeyError, IndexError, TypeError):
            continue  # gone or changed since the scan: nothing of the warm interpreter's left there
    for made in ahead.made:
        os.makedirs(_mapped(ahead, os.path.join(ahead.private, made), env), exist_ok=True)


def _special(key: Any) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and key[0] in (KEY, MEMBER)


def _replaced(ahead: Ahead, value: Any, env: dict[str, str] | os._Environ[str]) -> Any:
    if isinstance(value, str):
        return _mapped(ahead, value, env) if ahead.private in value else value
    text = os.fspath(value)
    return type(value)(_mapped(ahead, text, env)) if isinstance(text, str) and ahead.private in text else value
