"""Each repository's newest run of one trigger: its default branch's last push (where the daily canary starts) and
its last canary (what the canary page lists)."""

from __future__ import annotations

from sqlalchemy import func, select

from service.store.rows import Run
from service.store.store import Store


def newest_runs(store: Store, trigger: str) -> list[Run]:
    """The newest planned, not cancelled run of `trigger` per repository, by repository name."""
    usable = (Run.trigger == trigger, Run.state == "planned", Run.cancelled_reason.is_(None))
    newest = (select(Run.repo_full_name, func.max(Run.created_at).label("at")).where(*usable)
              .group_by(Run.repo_full_name).subquery())
    query = (select(Run).join(newest, (Run.repo_full_name == newest.c.repo_full_name) & (Run.created_at == newest.c.at))
             .where(*usable).order_by(Run.repo_full_name, Run.id))
    with store.session() as s:
        runs = list(s.scalars(query))
    # Two runs of one repository created in the same instant: keep one.
    return list({run.repo_full_name: run for run in reversed(runs)}.values())[::-1]
