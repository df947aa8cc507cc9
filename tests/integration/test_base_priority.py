"""A base run's jobs wait behind every head job: they go to the Redis transport's lowest-priority list."""

from __future__ import annotations

import redis

from service.celery_app import CeleryQueue, create_celery
from service.config import Settings

SEP = "\x06\x16"  # kombu's Redis transport: one list per priority step, "<queue>\x06\x16<step>" (0 is the bare name)


def test_base_jobs_are_sent_behind_head_jobs(settings: Settings) -> None:
    app = create_celery(settings)
    queue = CeleryQueue(app)
    queue.run_job("head-correctness-cpu", "cpu")
    queue.run_job("base-correctness-cpu", "cpu", low=True)
    queue.run_job("lost-correctness-cpu", "cpu", again=True)
    client = redis.Redis.from_url(settings.redis_url)
    lengths = {step: client.llen(f"cpu{SEP}{step}") for step in (3, 6, 9)}
    assert lengths == {3: 1, 6: 1, 9: 1}
    assert b"base-correctness-cpu" in client.lindex(f"cpu{SEP}9", 0)  # type: ignore[operator]
    app.close()


def test_a_job_and_a_shard_of_another_torch_reach_that_versions_queue(settings: Settings) -> None:
    """The version a job id names picks the queue, for the two-GPU queue and for a shard of a job too."""
    app = create_celery(settings)
    queue = CeleryQueue(app)
    queue.run_job("r-distributed-cuda-torch2.14", "cuda2")
    queue.run_shard("r-correctness-cpu-torch2.14-a1s2", "cpu")
    queue.run_shard("r-correctness-cpu-a1s0", "cpu")  # the default version's: the plain device queue
    client = redis.Redis.from_url(settings.redis_url)
    assert b"r-distributed-cuda-torch2.14" in client.lindex(f"cuda2-torch2.14{SEP}6", 0)  # type: ignore[operator]
    assert b"r-correctness-cpu-torch2.14-a1s2" in client.lindex(f"cpu-torch2.14{SEP}6", 0)  # type: ignore[operator]
    assert b"r-correctness-cpu-a1s0" in client.lindex(f"cpu{SEP}6", 0)  # type: ignore[operator]
    app.close()


def test_a_started_jobs_shards_go_ahead_of_the_jobs_not_started_and_behind_a_lost_ones(settings: Settings) -> None:
    """The slot that fans a job out runs its first shard itself; the others are sent with `started`, so the next free
    slot takes them before a job message still waiting (a first push: which shards start first is decided by the
    queue, not by which fan-out ended first). A base run's shards still wait behind every head job."""
    app = create_celery(settings)
    queue = CeleryQueue(app)
    queue.run_job("waiting-fusion-cpu", "cpu")
    queue.run_shard("fanned-correctness-cpu-a1s1", "cpu", started=True)
    queue.run_shard("base-correctness-cpu-a1s1", "cpu", low=True, started=True)
    queue.run_job("lost-autograd-cpu", "cpu", first=True)
    client = redis.Redis.from_url(settings.redis_url)
    order = [client.lrange(name, 0, -1) for name in ("cpu", f"cpu{SEP}3", f"cpu{SEP}6", f"cpu{SEP}9")]
    names = ("lost", "fanned", "waiting", "base")
    found = [[next(n for n in names if n.encode() in m) for m in step] for step in order]
    assert found == [["lost"], ["fanned"], ["waiting"], ["base"]]  # the transport takes the lowest step first
    app.close()
