"""A place of torch's compiler that differs from the snapshot (`Difference`), how to set it back or again, and the
repository's change it is (`Change`, what compiler_surface.changes() returns)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()  # a place that does not exist (not added yet, or removed)
KINDS = ("added", "rebound", "removed", "module replaced", "torch files differ", "native code")


@dataclass(frozen=True)
class Change:
    place: str  # dotted: torch._inductor.lowering.make_pointwise, torch._inductor.lowering.lowerings[aten.sin.default]
    kind: str  # one of KINDS
    where: str  # file:line of the new code outside torch (relative to the checkout inside it); '' when unknown
    sources: frozenset[str]  # content digests of the files outside torch its code comes from


@dataclass(frozen=True, eq=False)
class Difference:
    """One place whose object is not the snapshot's. `slot` says how to set it (`put`)."""

    place: str  # dotted: torch._inductor.lowering.make_pointwise, ...CppOverrides.exp, ...fn.__code__
    old: Any  # the snapshot's object (MISSING: the place did not exist)
    new: Any  # the object there now (MISSING: removed)
    slot: str  # "module", "class", "facet" (of a function), "cell", "sys.modules", "table", "attr" (config)
    owner: Any  # the module, class, function, cell or table holding the place
    name: Any  # attribute, facet, module name or table key

    @property
    def kind(self) -> str:
        if self.slot == "sys.modules":
            return "module replaced"
        return "added" if self.old is MISSING else "removed" if self.new is MISSING else "rebound"

    def put(self, value: Any) -> None:
        """Set this place to `value` (MISSING: delete it)."""
        if self.slot == "module":
            namespace = self.owner.__dict__  # not setattr: a module's class may intercept it (torch's config)
            namespace.pop(self.name, None) if value is MISSING else namespace.__setitem__(self.name, value)
        elif self.slot == "class":
            if value is not MISSING:
                type.__setattr__(self.owner, self.name, value)
            elif self.name in vars(self.owner):
                type.__delattr__(self.owner, self.name)
        elif self.slot == "facet":
            if value is MISSING:  # only __wrapped__ can be missing
                self.owner.__dict__.pop(self.name, None)
            else:
                setattr(self.owner, self.name, value)
        elif self.slot == "cell":
            if value is MISSING:
                del self.owner.cell_contents
            else:
                self.owner.cell_contents = value
        elif self.slot == "attr":  # a config module's setting: through its own setattr
            setattr(self.owner, self.name, None if value is MISSING else value)
        elif self.slot == "table":
            if isinstance(self.owner, set):
                self.owner.discard(self.name) if value is MISSING else self.owner.add(self.name)
            else:
                self.owner.pop(self.name, None) if value is MISSING else self.owner.__setitem__(self.name, value)
        elif value is MISSING:
            sys.modules.pop(self.name, None)
        else:
            sys.modules[self.name] = value
