"""Run by tests/suites/test_compiler_surface_property.py in a fresh interpreter: `surface_sampler.py SEED COUNT`.

Changes COUNT places of torch's compiler packages picked at random (one kind at a time, each undone before the
next) and prints one JSON line: what each did to the fingerprint, the changes, the sweep's aim and restored()."""

from __future__ import annotations

import importlib
import json
import random
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from suites import compiler_surface as surface
from suites import surface_registrations
from suites.ops import aim

PACKAGES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch._decomp", "torch._prims", "torch._refs",
            "torch.fx", "torch._higher_order_ops", "torch._subclasses", "torch.export")
IMPORTS = (*PACKAGES, "torch._inductor.compile_fx", "torch._inductor.lowering", "torch._inductor.codegen.cpp",
           "torch._inductor.scheduler", "torch._functorch.aot_autograd", "torch._subclasses.fake_tensor",
           "torch._dynamo.variables", "torch.fx.passes.shape_prop", "torch._inductor.fx_passes.post_grad",
           "torch._inductor.fx_passes.joint_graph", "torch._inductor.fx_passes.freezing_patterns")
KINDS = ("module function", "method", "staticmethod", "classmethod", "property", "class attribute", "code swap",
         "decorator", "class replaced", "module replaced", "defaults", "kwdefaults", "closure cell", "pattern entry")
REPOSITORY_CODE = {"module function", "method", "staticmethod", "classmethod", "property", "code swap", "decorator",
                   "class replaced", "closure cell", "pattern entry"}
CANNOT_BE_UNDONE = {"pattern entry"}  # restored() names it among what it could not take out
PLAIN = (bool, int, str, float)


class Candidate:
    def __init__(self, package: str, place: str, apply: Callable[[], None], undo: Callable[[], None],
                 holds_torch: Callable[[], bool]) -> None:
        self.package, self.place, self.apply, self.undo, self.holds_torch = package, place, apply, undo, holds_torch


def package_of(name: str) -> str | None:
    return next((p for p in PACKAGES if name == p or name.startswith(p + ".")), None)


def other(value: Any) -> Any:
    return (not value) if type(value) is bool else value + ("x" if type(value) is str else 1)


def swap(owner: Any, name: str, value: Any, module: bool, made: Callable[[], Any] | None = None
         ) -> tuple[Callable[[], None], Callable[[], None], Callable[[], bool]]:
    """Set `owner.name` to `value` (or to what `made()` makes when applied) and back."""
    original = vars(owner)[name]

    def put(v: Any) -> None:
        if module:
            owner.__dict__[name] = v
        else:
            type.__setattr__(owner, name, v)
    make = made or (lambda: value)
    return (lambda: put(make())), (lambda: put(original)), (lambda: vars(owner)[name] is original)


def torchs(held: Any, cls: type, torch_dir: str) -> bool:
    """Whether a class member is torch's compiler: data, or a function whose code is torch's or was made for this
    class (a NamedTuple's methods). Python's own functions a class of torch's merely holds are not (the surface's
    scope, docs/security.md)."""
    fn = held.__func__ if type(held) in (staticmethod, classmethod) else held.fget if type(held) is property else held
    if type(fn) is not types.FunctionType:
        return True
    return fn.__code__.co_filename.startswith(torch_dir) or fn.__qualname__.startswith(cls.__qualname__ + ".")


def candidates(repo: types.ModuleType, writes: Any) -> dict[str, list[Candidate]]:
    found: dict[str, list[Candidate]] = {kind: [] for kind in KINDS}
    snapshot = surface._state.snapshot
    torch_dir = snapshot.stock_dir

    def add(kind: str, package: str, place: str, triple: tuple[Any, Any, Any]) -> None:
        found[kind].append(Candidate(package, place, *triple))

    def facets(package: str, place: str, fn: types.FunctionType) -> None:
        code = fn.__code__
        add("code swap", package, place, (lambda: setattr(fn, "__code__", code.replace(co_filename=repo.__file__)),
                                          lambda: setattr(fn, "__code__", code), lambda: fn.__code__ is code))
        if fn.__defaults__:
            defaults = fn.__defaults__
            add("defaults", package, place, (lambda: setattr(fn, "__defaults__", tuple(list(defaults))),
                                             lambda: setattr(fn, "__defaults__", defaults),
                                             lambda: fn.__defaults__ is defaults))
        for key, value in (fn.__kwdefaults__ or {}).items():
            if type(value) in PLAIN:
                held = fn.__kwdefaults__  # changed in place; restored() may put another dict there meanwhile
                add("kwdefaults", package, place, (lambda d=held, k=key, v=value: d.__setitem__(k, other(v)),
                                                   lambda d=held, k=key, v=value: d.__setitem__(k, v),
                                                   lambda f=fn, k=key, v=value: f.__kwdefaults__[k] == v))

    for name, module in list(snapshot.modules.items()):
        package = package_of(name)
        if package is None or "config" in name or not isinstance(module, types.ModuleType):
            continue
        if "__path__" not in vars(module):
            add("module replaced", package, name, (lambda n=name: sys.modules.__setitem__(n, repo.stand_in(n)),
                                                   lambda n=name, m=module: sys.modules.__setitem__(n, m),
                                                   lambda n=name, m=module: sys.modules[n] is m))
        for attribute, value in list(vars(module).items()):
            if attribute.startswith("__"):
                continue
            place = f"{name}.{attribute}"
            if type(value) is types.FunctionType and value.__module__ == name and \
                    value.__code__.co_filename.startswith(torch_dir):
                add("module function", package, place, swap(module, attribute, repo.plain(value), True))
                add("decorator", package, place, swap(module, attribute, repo.wrap(value), True))
                facets(package, place, value)
            elif issubclass(type(value), type) and vars(value).get("__module__") == name and \
                    value.__name__ == attribute:
                add("class replaced", package, place, swap(module, attribute, None, True,
                                                                lambda c=value: repo.subclass(c)))
                for member, held in list(vars(value).items()):
                    spot = f"{name}.{value.__qualname__}.{member}"
                    kind = type(held)
                    if member.startswith("__") or not torchs(held, value, torch_dir):
                        continue  # e.g. an Enum's _generate_next_value_: Python's own function, every Enum's
                    if kind is types.FunctionType:
                        add("method", package, spot, swap(value, member, repo.plain(held), False))
                        facets(package, spot, held)
                    elif kind in (staticmethod, classmethod) and type(held.__func__) is types.FunctionType:
                        made = kind(repo.plain(held.__func__))
                        add(kind.__name__, package, spot, swap(value, member, made, False))
                    elif kind is property and type(held.fget) is types.FunctionType:
                        made = property(repo.plain(held.fget), held.fset, held.fdel)
                        add("property", package, spot, swap(value, member, made, False))
                    elif kind in PLAIN and not writes.written(member):
                        add("class attribute", package, spot, swap(value, member, other(held), False))
    for place, cell in zip(snapshot.cells.places, snapshot.cells.owners, strict=True):
        package = package_of(place.rsplit(".<closure", 1)[0].rsplit(".", 1)[0])
        held = cell.cell_contents
        if package is not None and type(held) is types.FunctionType:
            add("closure cell", package, place, (lambda c=cell, h=held: setattr(c, "cell_contents", repo.wrap(h)),
                                                 lambda c=cell, h=held: setattr(c, "cell_contents", h),
                                                 lambda c=cell, h=held: c.cell_contents is h))
    from torch._inductor.pattern_matcher import PatternMatcherPass

    taken: set[tuple[int, str]] = set()  # one entry object can be listed under several ops (every overload of one)
    for pass_place, patterns in surface_registrations._pattern_passes(PatternMatcherPass):
        for key, entries in list(patterns.patterns.items()):
            target = key[-1] if isinstance(key, tuple) and key else key
            for index, entry in enumerate(entries):
                for attribute in ("handler", "extra_check"):
                    held = getattr(entry, attribute, None)
                    if type(held) is types.FunctionType and (id(entry), attribute) not in taken:
                        taken.add((id(entry), attribute))
                        add("pattern entry", "torch._inductor", f"{pass_place}.patterns[{target}][{index}].{attribute}",
                            (lambda e=entry, a=attribute, h=held: setattr(e, a, repo.wrap(h)),
                             lambda e=entry, a=attribute, h=held: setattr(e, a, h),
                             lambda e=entry, a=attribute, h=held: getattr(e, a) is h))
    return found


def check(kind: str, candidate: Candidate, baseline: aim.Baseline) -> dict[str, Any]:
    problems = []
    started = time.perf_counter()
    candidate.apply()
    try:
        key = surface.fingerprint()
        changes = surface.changes()
        places = [c.place for c in changes]
        if not key:
            problems.append("the key did not change")
        if kind in ("code swap", "defaults", "kwdefaults"):
            facet = {"code swap": ".__code__", "defaults": ".__defaults__", "kwdefaults": ".__kwdefaults__"}[kind]
            if not any(p.endswith(facet) for p in places):
                problems.append(f"no {facet} among the changes: {places[:4]}")
        elif candidate.place not in places:
            problems.append(f"not among the changes: {places[:4]}")
        if kind in REPOSITORY_CODE and not any(c.where.startswith("repository_patches.py:") for c in changes):
            problems.append(f"the repository's file is not named: {[c.where for c in changes][:4]}")
        aimed = aim.decide(baseline, {})
        if not (aimed.everything and aimed.changed_everything):
            problems.append(f"the sweep is not aimed at every op: {aimed.reasons[:3]}")
        with surface.restored() as kept:
            if kind in CANNOT_BE_UNDONE:
                if candidate.place not in [c.place for c in kept]:
                    problems.append(f"restored() did not name it among what it cannot undo: {kept[:3]}")
            elif surface.fingerprint() or not candidate.holds_torch():
                problems.append("restored() did not put torch's own object back")
        if candidate.holds_torch() or surface.fingerprint() != key:
            problems.append("restored() did not put the repository's change back")
    finally:
        candidate.undo()
    if surface.fingerprint():
        problems.append(f"undone, yet a key: {[c.place for c in surface.changes()][:4]}")
    return {"kind": kind, "package": candidate.package, "place": candidate.place, "fingerprint": key,
            "problems": problems, "seconds": round(time.perf_counter() - started, 3)}


def main() -> None:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    started = time.perf_counter()
    surface.install()  # before the compiler packages and the repository's module, as in a job
    baseline = aim.Baseline.take()
    for name in IMPORTS:
        module = importlib.import_module(name)
        if hasattr(module, "lazy_init") and "fx_passes" in name:
            module.lazy_init()  # torch's own pattern registrations, after the snapshot as in a job: no change
    repo = importlib.import_module("repository_patches")
    stock = surface.fingerprint()
    found = candidates(repo, surface._state.writes)
    print(f"installed and imported in {time.perf_counter() - started:.1f} s; {sum(map(len, found.values()))} "
          "places to pick from", file=sys.stderr)
    rng = random.Random(seed)
    samples = []
    for index in range(count):
        kind = KINDS[index % len(KINDS)]
        by_package: dict[str, list[Candidate]] = {}
        for candidate in found[kind]:
            by_package.setdefault(candidate.package, []).append(candidate)
        if not by_package:
            samples.append({"kind": kind, "package": "", "place": "", "fingerprint": "",
                            "problems": ["no place of this kind"]})
            continue
        for _attempt in range(20):  # a class that cannot be subclassed (an enum with members): another one
            pool = by_package[rng.choice(sorted(by_package))]
            candidate = pool.pop(rng.randrange(len(pool)))
            if not pool:
                by_package = {k: v for k, v in by_package.items() if v}
            found[kind].remove(candidate)
            try:
                samples.append(check(kind, candidate, baseline))
                break
            except TypeError:
                continue
    print(json.dumps({"seed": seed, "stock": stock, "after": surface.fingerprint(), "samples": samples}))


if __name__ == "__main__":
    main()
