"""How a worker deals its CPUs to the jobs it runs at once (runners/cpu_shares.py): the spelling of a cpuset, whole
cores together on an SMT host, leases that never overlap while no more jobs run than slots, and the settings that
name them. Named cases beside a seeded random sample of hosts, slot counts and lease orders."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runners.cpu_shares import CpuShares, core_order, deal, job_env, parse_cpus, spell
from service.config import ConfigError, Settings
from tests.unit.test_config import MINIMAL

SEED = 20261129


def test_a_cpuset_list_is_read_and_spelled_back() -> None:
    assert parse_cpus("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert spell((11, 10, 8, 3, 2, 1, 0)) == "0-3,8,10-11"
    assert spell((5,)) == "5"
    for bad in ("", "a", "3-1", "0,0", "1-2,2", "-1", "0-99999"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def fake_topology(tmp_path: Path, cores: int, threads: int) -> tuple[Path, list[int]]:
    """A host numbered as Linux numbers an SMT machine: CPU c and c + cores are the two threads of core c."""
    for thread in range(threads):
        for core in range(cores):
            topology = tmp_path / f"cpu{thread * cores + core}" / "topology"
            topology.mkdir(parents=True)
            (topology / "physical_package_id").write_text("0\n")
            (topology / "core_id").write_text(f"{core}\n")
    return tmp_path, list(range(cores * threads))


def test_siblings_stay_together_so_each_slot_gets_whole_cores(tmp_path: Path) -> None:
    sysfs, cpus = fake_topology(tmp_path, cores=8, threads=2)
    shares = CpuShares(4, cpus, sysfs)
    assert shares.parts == [(0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15)]
    # Without a readable topology: neighbours by number.
    assert CpuShares(4, cpus, tmp_path / "none").parts == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                                           (12, 13, 14, 15)]


def test_leases_are_disjoint_up_to_the_slots_then_shared_by_the_fewest() -> None:
    shares = CpuShares(3, list(range(7)), Path("/nonexistent"))
    assert [len(p) for p in shares.parts] == [3, 2, 2]
    with shares.lease() as a, shares.lease() as b, shares.lease() as c:
        assert {*a} | {*b} | {*c} == set(range(7)) and not ({*a} & {*b} or {*b} & {*c} or {*a} & {*c})
        with shares.lease() as d:  # a fourth job on three slots shares one part, never a fourth set
            assert d in (a, b, c)
    with shares.lease() as again:  # released: the first part again
        assert again == a
    assert shares.describe(a) == "CPUs 0-2 (3 of the worker's 7, one of 3 slots)"


def test_one_slot_is_every_cpu_and_more_slots_than_cpus_give_one_each() -> None:
    assert deal([0, 1], 1) == [(0, 1)]
    assert deal([0, 1], 4) == [(0,), (1,)]


def test_a_job_is_told_its_cpus_and_threads_capped_by_its_cpu_limit() -> None:
    assert job_env((4, 5, 6, 7)) == {"COMPILE_CI_JOB_CPUS": "4-7", "COMPILE_CI_JOB_THREADS": "4",
                                     "TORCHINDUCTOR_COMPILE_THREADS": "4"}
    assert job_env((4, 5, 6, 7), cpu_limit=2.0)["COMPILE_CI_JOB_THREADS"] == "2"
    assert job_env((4,), cpu_limit=0.5)["COMPILE_CI_JOB_THREADS"] == "1"


def test_any_host_slots_and_lease_order_keep_running_jobs_apart() -> None:
    """Random hosts (1-64 CPUs), 1-16 slots and random starts and ends of jobs: the parts cover the CPUs once and
    differ in size by at most one; a job that starts while a part is free gets a free one (so while no more jobs
    run than slots, no two share a CPU), and one that starts when none is gets one the fewest jobs hold."""
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    for case in range(300):
        count = rng.randint(1, 64)
        cpus = sorted(rng.sample(range(128), count))
        slots = rng.randint(1, 16)
        shares = CpuShares(slots, cpus, Path("/nonexistent"))
        sizes = [len(p) for p in shares.parts]
        assert sorted(c for p in shares.parts for c in p) == cpus, (case, cpus, slots)
        assert max(sizes) - min(sizes) <= 1 and len(shares.parts) == min(slots, count), (case, sizes)
        held: list[tuple[object, tuple[int, ...]]] = []
        for _ in range(40):
            if held and rng.random() < 0.45:
                lease, _part = held.pop(rng.randrange(len(held)))
                lease.__exit__(None, None, None)  # type: ignore[attr-defined]
                continue
            lease = shares.lease()
            busy = [part for _, part in held]
            part = lease.__enter__()
            held.append((lease, part))
            if len(busy) < len(shares.parts):  # a free part exists: the new job gets one no running job holds
                assert part not in busy, (case, busy, part)
            else:  # every part is busy: it shares one of those the fewest jobs hold
                assert busy.count(part) == min(busy.count(p) for p in shares.parts), (case, busy, part)
        for lease, _part in held:
            lease.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_core_order_reads_the_topology(tmp_path: Path) -> None:
    sysfs, cpus = fake_topology(tmp_path, cores=2, threads=2)
    assert core_order(cpus, sysfs) == [0, 2, 1, 3]


def test_settings_name_the_slots_and_the_cpus_and_reject_nonsense() -> None:
    base = dict(MINIMAL)
    settings = Settings.from_env({**base, "COMPILE_CI_JOB_SLOTS": "4", "COMPILE_CI_CPUS": "0-7,16-23"})
    assert settings.job_slots == 4 and settings.cpus == (*range(8), *range(16, 24))
    assert Settings.from_env(base).job_slots == 1 and Settings.from_env(base).cpus == ()
    for key, value, said in (("COMPILE_CI_JOB_SLOTS", "0", "at least 1"), ("COMPILE_CI_CPUS", "0-3,2", "twice"),
                             ("COMPILE_CI_CPUS", "all", "not a CPU")):
        with pytest.raises(ConfigError) as caught:
            Settings.from_env({**base, key: value})
        assert key in str(caught.value) and said in str(caught.value)
