"""A red test names its culprit (issue 41): after a job's tests ran, each compiled-vs-eager failure is bisected in
the same process with torch's compiler bisector, asking the test's own judgement at every step, and the
repository's compiler changes are taken out once (the suspect pair). A flaky test, a bisection out of time and a test
the bisector cannot steer say so and name no culprit.

The default run's proofs: a repository's own tests (tests/suites/bisect_repo: its own lowering patch, a test's own
mistake, a flaky test, a test that keeps its compiled function), a planted decomposition bug in the correctness
suite and a planted post-grad rewrite in the passes suite. The other suites' plants: test_bisection_planted.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from suites import bisect_session, bisect_torch
from suites.naming import sanitise_nodeid

from .bisect_run import PLANTED, Bisected, bisect_repo, bisect_suite, line_of
from .suite_run import REPO

pytestmark = pytest.mark.skipif(bool(bisect_torch.unavailable()), reason=bisect_torch.unavailable() or "-")
STACK = REPO / "tests" / "suites" / "bisect_repo"
TESTS = "tests/test_stack.py::"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Bisected:
    return bisect_repo(STACK, tmp_path_factory.mktemp("stack"), 300)


def test_the_repositorys_own_lowering_is_named_with_the_application_and_the_line(stack: Bisected) -> None:
    found = stack.result(f"{TESTS}test_reciprocal_of_negative_zero")
    assert found is not None, stack.describe()
    assert (found["status"], found["backend"], found["subsystem"]) == ("found", "inductor", "lowerings"), found
    assert "aten.reciprocal.default" in found["names"], found
    assert found["suspect"]["verdict"] == "yours" and found["suspect"]["count"] == 1, found
    where = f"stack/patches.py:{line_of(STACK / 'stack' / 'patches.py', 'def reciprocal_fast')}"
    assert (found["place"], found["where"]) == ("torch._inductor.lowering.lowerings[aten.reciprocal.default]", where)
    assert found["replay"] == f"TORCH_BISECT_BACKEND=inductor TORCH_BISECT_SUBSYSTEM=lowerings " \
                              f"TORCH_BISECT_MAX={found['number']}"
    log = stack.log(f"{TESTS}test_reciprocal_of_negative_zero")
    # The answer was checked: wrong at its point, right just before it (here: the lowering never applied).
    assert f"check: inductor, lowerings applied #0..#{found['number']}: wrong" in log, log
    assert "right" in log.split(f"applied #0..#{found['number']}: wrong", 1)[1].splitlines()[1], log


def test_a_tests_own_mistake_is_wrong_from_eager_and_red_on_stock_torch(stack: Bisected) -> None:
    found = stack.result(f"{TESTS}test_reads_a_global_changed_after_compiling")
    assert found is not None and (found["status"], found["backend"]) == ("found", "eager"), stack.describe()
    assert found["suspect"]["verdict"] == "upstream" and found["place"] == "", found


@pytest.mark.parametrize(("test", "status", "said"), [
    ("test_wrong_only_the_first_time", "flaky", "run again, its judgement found nothing wrong"),
    ("test_wrong_for_its_first_four_runs", "flaky", "torch's bisector pointed at eager, but run again there the test "
                                                     "was right"),
    ("test_keeps_its_compiled_function", "unbisectable", "asked for the eager backend, it still compiled"),
])
def test_no_culprit_is_guessed(stack: Bisected, test: str, status: str, said: str) -> None:
    found = stack.result(f"{TESTS}{test}")
    assert found is not None and found["status"] == status and said in found["reason"], stack.describe()
    assert found["backend"] == found["subsystem"] == "" and found["number"] is None, found
    if status == "flaky":  # one run of a flaky test proves nothing about the repository's change either
        assert found["suspect"] is None and found["place"] == "", found


def test_a_failure_that_is_no_compiled_judgement_is_not_bisected(stack: Bisected) -> None:
    assert stack.result(f"{TESTS}test_not_a_compiled_judgement") is None
    assert stack.run.outcome("test_not_a_compiled_judgement") == "failed"


def test_the_tests_own_artifacts_and_results_are_the_first_runs(stack: Bisected) -> None:
    # Written before the bisection and never by its runs: the junit outcomes, metrics.json and repro.py.
    assert {name: stack.run.outcome(name) for name in stack.run.cases} == dict.fromkeys(stack.run.cases, "failed")
    assert len(stack.run.cases) == 7
    for nodeid in (f"{TESTS}test_reciprocal_of_negative_zero", f"{TESTS}test_wrong_only_the_first_time"):
        metrics = stack.run.metrics(nodeid)
        assert metrics["outcome"] == "failed" and metrics["reruns"] == [], metrics
        codes = list(stack.run.test_dir(nodeid).glob("output_code_*.py"))
        assert metrics["output_code_files"] == len(codes) == 1, metrics
        assert (stack.run.test_dir(nodeid) / "repro.py").exists()
    progress = json.loads((stack.out / "progress.json").read_text())
    assert progress["current"] == "" and progress["done"] == progress["total"], progress


def test_a_planted_decomposition_is_named_in_the_correctness_suite(tmp_path: Path) -> None:
    # Inductor's softmax decomposition without the max shift: wrong from AOT autograd's decompositions already.
    test = "correctness/test_correctness_numerics.py::test_fragile_layer[softmax-large]"
    bisected = bisect_suite("correctness", "test_fragile_layer and softmax-large", tmp_path,
                            "softmax_without_max_shift")
    found = bisected.result(test)
    assert found is not None and found["status"] == "found", bisected.describe()
    assert (found["backend"], found["subsystem"]) == ("aot_eager_decomp_partition", "decomposition"), found
    assert "aten._softmax.default" in found["names"], found
    line = line_of(PLANTED / "softmax_without_max_shift.py", "def softmax(")
    assert found["place"] == "torch._inductor.decomposition.decompositions[aten._softmax.default]", found
    # The plant is outside the job's checkout here (none is set), so its path is whole.
    assert found["where"].endswith(f"tests/suites/planted/softmax_without_max_shift.py:{line}"), found


def test_a_planted_post_grad_rewrite_is_inductors_and_the_repositorys_in_the_passes_suite(tmp_path: Path) -> None:
    # Every cosine turned into a sine after inductor's post-grad passes, by a function put in their place: no
    # subsystem of the bisector's isolates it, the suspect pair does (among the plant's cache settings).
    test = "passes/test_passes.py::test_without_custom_pass_cos_stays_cos"
    bisected = bisect_suite("passes", "cos_stays_cos", tmp_path, "cos_to_sin_compiler")
    found = bisected.result(test)
    assert found is not None and (found["status"], found["backend"], found["subsystem"]) == ("found", "inductor", ""), \
        bisected.describe()
    assert found["suspect"]["verdict"] == "yours", found
    line = line_of(PLANTED / "cos_to_sin_compiler.py", "def post_grad_passes_then_cos_to_sin")
    assert any(change["place"] == "torch._inductor.compile_fx.post_grad_passes"
               and change["where"].endswith(f"tests/suites/planted/cos_to_sin_compiler.py:{line}")
               for change in found["suspect"]["changes"]), found


JUDGED_WITHOUT_COMPILING = '''
import time
from suites.judging import assert_close_to_reference
import pytest
import torch

RUNS = [0]
# Once at import, passing and failing: the test's own run then takes its sleep and milliseconds, not torch's first
# calls nor the first failure message's (together 9 s on a busy host, which counted against the budget's start check:
# six runs of 9 s do not fit in 30 s).
assert_close_to_reference(torch.ones(3), torch.ones(3), torch.ones(3, dtype=torch.float64))
try:
    assert_close_to_reference(torch.ones(3), torch.zeros(3), torch.zeros(3, dtype=torch.float64))
except pytest.fail.Exception:
    pass

def test_it():
    RUNS[0] += 1
    time.sleep({first} if RUNS[0] == 1 else {again})
    assert_close_to_reference(torch.ones(3), torch.zeros(3), torch.zeros(3, dtype=torch.float64))
'''


def _job(tmp_path: Path, source: str, seconds: str) -> tuple[dict[str, object], float, int]:
    """A one-test job (test_one.py::test_it) that bisects for ``seconds``: its bisect.json, its time, its exit code."""
    (tmp_path / "test_one.py").write_text(source)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}, "PYTHONPATH": str(REPO),
           "COMPILE_CI_OUTPUT_DIR": str(tmp_path / "out"), "COMPILE_CI_BISECT_SECONDS": seconds}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "suites.pytest_entry", "-q", "-p", "no:cacheprovider", "-p",
                           "suites.plugin", "test_one.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    result = tmp_path / "out" / "tests" / sanitise_nodeid("test_one.py::test_it") / "bisect.json"
    return json.loads(result.read_text()), time.monotonic() - started, done.returncode


def test_a_bisection_out_of_time_mid_run_says_so_and_names_nothing(tmp_path: Path) -> None:
    # Its first run again would take 300 s: the budget's alarm stops it at 12 s, a budget its failing run's time
    # lets it start with (six runs of it must fit). That run takes milliseconds: the capture's imports are its
    # setup's, not its call's (the call took 2.7 s quiet and 15.9 s under load before, and a 60 s budget was
    # refused with a second job beside it).
    found, took, _code = _job(tmp_path, JUDGED_WITHOUT_COMPILING.format(first=0, again=300), "12")
    assert found["status"] == "budget" and "ran out after 0 run(s)" in str(found["reason"]), found
    assert found["backend"] == "" and found["place"] == "" and took < 200, (found, took)


def test_a_test_too_slow_for_what_is_left_is_not_started(tmp_path: Path) -> None:
    found, _took, _code = _job(tmp_path, JUDGED_WITHOUT_COMPILING.format(first=1, again=0), "2")
    assert found["status"] == "budget" and str(found["reason"]).startswith("not bisected: 2 s of the job's 2 s"), found


BREAKS_THE_BISECTOR = '''
import torch
from torch._inductor.compiler_bisector import CompilerBisector

RUNS = [0]

def broken(cls, fn):
    raise ValueError("the bisector broke")

def test_it():
    RUNS[0] += 1
    if RUNS[0] > 1:
        CompilerBisector.do_bisect = classmethod(broken)
    x = torch.randn(4)
    # A Python function, not torch.sin itself: every torch release compiles its frame.
    torch.testing.assert_close(torch.compile(lambda t: t.sin())(x) + 1, torch.sin(x))
'''


def test_a_bisection_that_breaks_is_said_and_the_jobs_outcome_stays_the_tests(tmp_path: Path) -> None:
    # A budget no loaded host's first run exhausts (a GPU host's lane, torch 2.11, said "budget" with 120 s): the
    # bisector breaks at its first step whatever the budget.
    found, _took, code = _job(tmp_path, BREAKS_THE_BISECTOR, "600")
    assert found["status"] == "inconclusive" and found["reason"] == \
        "the bisection itself failed: ValueError: the bisector broke", found
    assert code == 1  # pytest's "tests failed", not an internal error


@pytest.mark.parametrize(("environ", "seconds"), [
    ({}, 0.0), ({"COMPILE_CI_BISECT_SECONDS": ""}, 0.0), ({"COMPILE_CI_BISECT_SECONDS": "120"}, 120.0),
    ({"COMPILE_CI_BISECT_SECONDS": "0"}, 0.0),
])
def test_the_budget_is_the_services_setting(environ: dict[str, str], seconds: float) -> None:
    assert bisect_session.budget_from(environ) == seconds


def test_the_budget_ends_before_the_runners_limit() -> None:
    left = bisect_session.budget_from({"COMPILE_CI_BISECT_SECONDS": "120",
                                       "COMPILE_CI_DEADLINE": str(time.time() + 60)})
    assert 60 - bisect_session.DEADLINE_MARGIN_S - 5 < left <= 60 - bisect_session.DEADLINE_MARGIN_S
    assert bisect_session.budget_from({"COMPILE_CI_BISECT_SECONDS": "120",
                                       "COMPILE_CI_DEADLINE": str(time.time() - 10)}) < 0  # none: nothing bisected


@pytest.mark.parametrize("environ", [{"COMPILE_CI_BISECT_SECONDS": "two minutes"},
                                     {"COMPILE_CI_BISECT_SECONDS": "120", "COMPILE_CI_DEADLINE": "soon"}])
def test_a_bad_budget_is_a_usage_error(environ: dict[str, str]) -> None:
    with pytest.raises(pytest.UsageError, match="COMPILE_CI_"):
        bisect_session.budget_from(environ)


def test_repro_bisect_replays_the_bisection_on_a_developers_machine(stack: Bisected, tmp_path: Path) -> None:
    # The job's repro.py, copied out as `compile-ci repro` fetches it, run with --bisect against the clone.
    nodeid = f"{TESTS}test_reciprocal_of_negative_zero"
    script = tmp_path / "repro.py"
    script.write_text((stack.run.test_dir(nodeid) / "repro.py").read_text())
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), str(STACK), "--bisect"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    where = f"stack/patches.py:{line_of(STACK / 'stack' / 'patches.py', 'def reciprocal_fast')}"
    assert f"{nodeid}: wrong from inductor · lowerings #" in output, output[-4000:]
    assert f"red only with your change to torch._inductor.lowering.lowerings[aten.reciprocal.default] ({where})" \
        in output, output[-4000:]
    assert "run 1, as the test ran: wrong" in output and "check: inductor, lowerings never applied" in output


def test_compile_ci_repro_passes_bisect_on_and_refuses_an_older_repro(tmp_path: Path) -> None:
    from service.repro import ReproError, _command

    script = tmp_path / "repro.py"
    script.write_text('OPTIONS = ("--output-code", "--bisect")\n')
    command, _env = _command(script, tmp_path, None, False, bisect=True)
    assert command[-2:] == [str(tmp_path), "--bisect"]
    script.write_text('OUTPUT_CODE = "--output-code" in sys.argv[1:]\n')  # a job's repro.py from before
    with pytest.raises(ReproError, match="written before compile-ci could bisect"):
        _command(script, tmp_path, None, False, bisect=True)


def test_a_planted_aot_autograd_bug_is_wrong_from_aot_eager(tmp_path: Path) -> None:
    # AOT autograd drops the copy of a mutated input back into the caller's tensor: wrong from the first backend
    # that runs AOT autograd, with the plant's three replacements among the repository's changes.
    test = "autograd/test_autograd_mutation.py::test_input_mutation_reaches_caller[inference-aot_eager]"
    bisected = bisect_suite("autograd", "test_input_mutation_reaches_caller and inference and aot_eager", tmp_path,
                            "lost_input_mutation")
    found = bisected.result(test)
    assert found is not None and (found["status"], found["backend"]) == ("found", "aot_eager"), bisected.describe()
    places = {change["place"] for change in found["suspect"]["changes"]}
    assert found["suspect"]["verdict"] == "yours" and \
        "torch._functorch._aot_autograd.graph_capture_wrappers.apply_in_graph_mutations" in places, found


BAD_PASS = '''
import torch


def add_to_sub(graph):
    """Post-grad: every addition becomes a subtraction (a rewrite with the sign wrong)."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.add.Tensor:
            node.target = torch.ops.aten.sub.Tensor
'''


def test_a_declared_pass_is_named_on_its_hook_with_its_line(tmp_path: Path) -> None:
    # The passes suite installs the repository's declared pass inside the test, so it is no change to torch's
    # compiler outside it: the hook torch's bisector names is the pass's, and the test names the pass.
    repo = tmp_path / "repo"
    (repo / "badpass").mkdir(parents=True)
    (repo / "badpass" / "__init__.py").write_text("")
    (repo / "badpass" / "passes.py").write_text(BAD_PASS)
    env = {"COMPILE_CI_TARGETS": json.dumps({"post_grad_passes": ["badpass.passes:add_to_sub"]}),
           "COMPILE_CI_CHECKOUT": str(repo)}
    bisected = bisect_suite("passes", "test_declared_pass and conv_block", tmp_path / "work", None, extra_env=env)
    assert len(bisected.results()) == 1, bisected.describe()
    (found,) = bisected.results()
    assert (found["status"], found["backend"], found["subsystem"]) == ("found", "inductor", "post_grad_passes"), \
        bisected.describe()
    assert "post_grad_custom_post_pass" in found["names"], found
    line = line_of(repo / "badpass" / "passes.py", "def add_to_sub")
    assert (found["place"], found["where"]) == ("torch._inductor.config.post_grad_custom_post_pass",
                                                f"badpass/passes.py:{line}"), found


def test_a_torch_without_the_bisector_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.compiler_bisector as module

    monkeypatch.delattr(module, "CompilerBisector")
    assert bisect_torch.unavailable() == f"torch {torch.__version__} has no {bisect_torch.MODULE}.CompilerBisector"
    assert bisect_torch.subsystems("inductor") and bisect_torch.bisector() is None


def test_a_module_that_cannot_be_steered_says_why_and_spends_no_run(stack: Bisected) -> None:
    found = stack.result("tests/test_ranks.py::test_compiled_elsewhere")
    assert found is not None and found["status"] == "unbisectable", stack.describe()
    assert found["reason"] == "its compiled steps run in other processes" and found["runs"] == 0, found


def test_a_custom_pass_hook_names_the_declared_pass_of_its_kind(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A model's test that installs the repository's pass exercises the model: the one declared post-grad pass is named
    # (tests/integration/test_bisection_flow.py replays it through the service); a pass test's own target is kept;
    # two passes of the hook's kind and a target that is neither: the test's target, as before.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "passes.py").write_text("def one(graph):\n    pass\n\n\ndef two(graph):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COMPILE_CI_CHECKOUT", str(tmp_path))
    hook = "post_grad_custom_post_pass"
    monkeypatch.setenv("COMPILE_CI_TARGETS", json.dumps({"post_grad_passes": ["mine.passes:one"]}))
    assert bisect_session._pass_where(hook, "mine/models.py:3") == "mine/passes.py:1"
    assert bisect_session._pass_where("joint_custom_post_pass", "mine/models.py:3") == "mine/models.py:3"
    monkeypatch.setenv("COMPILE_CI_TARGETS", json.dumps({"post_grad_passes": ["mine.passes:one", "mine.passes:two"]}))
    assert bisect_session._pass_where(hook, "mine/passes.py:5") == "mine/passes.py:5"
    assert bisect_session._pass_where(hook, "mine/models.py:3") == "mine/models.py:3"
