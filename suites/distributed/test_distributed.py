"""DDP (with and without DDPOptimizer) and FSDP2 under torch.compile on two ranks: each model's compiled training
steps against the eager distributed steps and the single-process steps, and the two ranks against each other
(graphs, graph breaks, recompiles).

Two ranks per model run as subprocesses of this test process (``launch.py``): NCCL on two GPUs for a cuda job, gloo
on the CPU otherwise. See ``steps.py`` for what a step is and ``verdicts.py`` for how it is judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from suites import targets
from suites.capture import add_foreign_code
from suites.distributed.corpus import CORPUS, MULTI_BUCKET
from suites.distributed.launch import RankReport, backend_for
from suites.distributed.runs import WRAPPERS, DistributedRuns
from suites.distributed.verdicts import (
    COUNTERS,
    compiled_nothing,
    cross_rank_mismatches,
    numeric_problems,
    rank_failures,
    shortened,
)
from suites.reruns import earlier_attempts

Recorder = Callable[[tuple[str, object]], None]
# What a bisection of a red here would say (suites/bisect_session.py): no run of it is spent.
NOT_BISECTABLE = ("its compiled steps run in the ranks' own processes, which torch's compiler bisector in the job's "
                  "process cannot steer")


def _record(reports: list[RankReport], wrapper: str, device: str, record: Recorder) -> None:
    # Each rank's counters as JUnit properties, which the artifacts plugin copies into the test's metrics.json.
    record(("backend", backend_for(device)))
    for report in reports:
        compiled = report.results[wrapper]["compiled"]
        for key in COUNTERS:
            record((f"rank{report.rank}_{key}", compiled["counters"][key]))
        # Wall time of the rank's steps: eager, then compiled with its compiling (the ranks start once per model).
        record((f"rank{report.rank}_eager_s", report.results[wrapper]["eager"]["seconds"]))
        record((f"rank{report.rank}_compiled_s", compiled["counters"]["seconds"]))
        for key in ("graph_break_reasons", "recompile_reasons"):
            record((f"rank{report.rank}_{key}", " | ".join(compiled[key])))


def check_training_step(runs: DistributedRuns, source: str, name: str, factory: Callable[[], Any],
                        inputs: tuple[Any, ...], wrapper: str, device: str, request: pytest.FixtureRequest) -> None:
    record_property = request.node.user_properties.append
    single = runs.single_process(source, name, factory, inputs)  # TF32 off on CUDA: suites/conftest.py
    if single is None:
        pytest.skip("no parameter of the model requires grad: DDP and FSDP2 have nothing to synchronise")
    reports = runs.reports(source, name, [wrapper], fresh=bool(earlier_attempts(request.node)))
    problems, skip = rank_failures(reports, wrapper)
    if skip:
        pytest.skip(skip)
    if problems:
        pytest.fail("\n  ".join(problems), pytrace=False)
    _record(reports, wrapper, device, record_property)
    # The job page shows rank 0's generated code as the test's own (the ranks compile the same graphs, or the
    # mismatch below says how they differ).
    add_foreign_code(reports[0].results[wrapper]["compiled"]["codes"])
    sections = []
    if eager_only := compiled_nothing(reports, wrapper):
        sections.append("\n  ".join(eager_only))
    if mismatches := cross_rank_mismatches(reports, wrapper):
        sections.append("\n  ".join(mismatches))
    if numerics := numeric_problems(reports, wrapper, *single):
        sections.append("\n  ".join([f"the compiled or eager {wrapper} step is off:", *shortened(numerics)]))
    if sections:
        pytest.fail("\n".join(sections), pytrace=False)


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("corpus_model", sorted(CORPUS))
def test_training_step_matches_across_ranks(corpus_model: str, wrapper: str, device: str,
                                            distributed_runs: DistributedRuns, request: pytest.FixtureRequest) -> None:
    model = CORPUS[corpus_model]
    check_training_step(distributed_runs, "corpus", corpus_model, model.factory, _seeded(model.make_inputs),
                        wrapper, device, request)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_declared_model(declared_model: targets.DeclaredModel | targets.TargetError, wrapper: str, device: str,
                        distributed_runs: DistributedRuns, request: pytest.FixtureRequest) -> None:
    if isinstance(declared_model, targets.TargetError):
        declared_model.fail()
    check_training_step(distributed_runs, "declared", declared_model.name, declared_model.factory,
                        declared_model.example_inputs, wrapper, device, request)


@pytest.mark.parametrize("corpus_model", MULTI_BUCKET)
def test_ddp_optimizer_splits_at_bucket_boundaries(corpus_model: str, distributed_runs: DistributedRuns) -> None:
    """Weights over more than one DDP bucket: DDPOptimizer hands inductor one graph per bucket, so each bucket's
    all-reduce can start as soon as its gradients exist; without it, the same forward is one graph."""
    reports = distributed_runs.reports("corpus", corpus_model, ["ddp", "ddp_optimizer"])
    for wrapper in ("ddp", "ddp_optimizer"):
        problems, skip = rank_failures(reports, wrapper)
        if skip:
            pytest.skip(skip)
        if problems:
            pytest.fail("\n  ".join(problems), pytrace=False)
    for report in reports:
        plain, split = (report.results[w]["compiled"]["counters"]["backend_graphs"] for w in ("ddp", "ddp_optimizer"))
        assert split > plain, (f"rank {report.rank}: DDPOptimizer handed inductor {split} graphs, plain DDP {plain}: "
                               "the graph was not split at the bucket boundaries")


def _seeded(make_inputs: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    torch.manual_seed(0)  # as the ranks do (rank.py): the same inputs in every process
    return make_inputs()
