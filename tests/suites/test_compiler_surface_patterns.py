"""An entry of one of torch's pattern passes changed in place (issue 38's fingerprint, issue 41's suspect pair).

A stack can change what inductor's pattern passes do without a registration, a table or a namespace: it wraps the
handler of an entry torch registered (the planted `conv_bn_wrong_scale` does so to freezing's conv+batchnorm
folding). In a fresh interpreter, as a job has one: torch's own lazy registrations change nothing; the wrapped
handler is a change named by its pass and pattern, with the wrapper's file and line, and it changes the key; it is
one that `restored()` cannot take out, so the suspect pair, still wrong without the changes it could take out, says
stock torch was not tried ("inseparable"), never "red on stock torch too"."""

from __future__ import annotations

from pathlib import Path

from .test_compiler_surface_places import run_package

WRAP = '''
from torch._inductor.fx_passes import freezing_patterns

freezing_patterns.lazy_init()


def folding(handler):
    def fold(match, *args, **kwargs):
        return handler(match, *args, **kwargs){suffix}
    return fold


for entries in freezing_patterns.binary_folding_pass.patterns.values():
    for entry in entries:
        entry.handler = folding(entry.handler)
'''
SCRIPT = '''
import json
from suites import compiler_surface as surface, bisect_suspects
from suites.bisect_probe import Replay, RIGHT, WRONG
surface.install()
from torch._inductor.fx_passes import freezing_patterns, post_grad, joint_graph
freezing_patterns.lazy_init()
post_grad.lazy_init()
joint_graph.lazy_init()
seen = {"torch's own lazy registrations": surface.fingerprint()}
import wrap
seen["changes"] = [[c.place, c.kind, c.where] for c in surface.changes()]
seen["key"] = surface.fingerprint()
with surface.restored() as kept:
    seen["kept"] = [c.place for c in kept]
for outcome in (WRONG, RIGHT):
    found, _run = bisect_suspects.suspect(None, lambda item: Replay(outcome, 0.1, 1, 1, ""))
    seen[outcome] = found.as_json()
print(json.dumps(seen))
'''
PLACE = "torch._inductor.fx_passes.freezing_patterns.binary_folding_pass.patterns[aten.mul.Tensor][0].handler"


def run(tmp_path: Path, suffix: str) -> dict:
    return run_package(tmp_path / f"v{len(suffix)}", {"wrap.py": WRAP.format(suffix=suffix)}, SCRIPT)


def test_a_handler_wrapped_in_place_is_a_change_that_cannot_be_taken_out(tmp_path: Path) -> None:
    seen = run(tmp_path, "")
    assert seen["torch's own lazy registrations"] == "", seen
    changes = {place: (kind, where) for place, kind, where in seen["changes"]}
    line = next(n for n, text in enumerate(WRAP.splitlines(), 1) if "def fold(" in text)
    assert changes.get(PLACE) == ("rebound", f"wrap.py:{line}"), sorted(changes.items())
    ops = {place.split(".patterns[", 1)[1].split("]", 1)[0] for place in changes}
    assert ops == {"aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor"}, changes
    assert all(place.endswith(".handler") for place in changes), changes  # each entry's handler, one place each
    assert seen["key"] and PLACE in seen["kept"], seen
    wrong, right = seen["wrong"], seen["right"]
    assert wrong["verdict"] == "inseparable" and wrong["changes"][0]["place"] in seen["kept"], wrong
    assert "stock torch was not tried" in wrong["said"] and "red on stock torch" not in wrong["said"], wrong
    assert right["verdict"] == "yours", right
    # Another wrapper (one edit inside it): another key; the same code again: the same key.
    assert run(tmp_path, " or None")["key"] != seen["key"]
    assert run(tmp_path, "")["key"] == seen["key"]
