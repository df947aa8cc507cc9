"""The store (rows and queries in SQL) and the claims (Redis): the only modules that talk to a database."""

from service.store import attempts as _attempts  # noqa: F401 - its table is made with the others
from service.store import deliveries as _deliveries  # noqa: F401 - its table is made with the others
from service.store import reuse as _reuse  # noqa: F401 - its table is made with the others
from service.store.rows import (
    APPROVAL_CHECK,
    APPROVAL_SUITE,
    Artifact,
    InstalledRepo,
    Job,
    NewRun,
    Run,
    Shard,
    TestRecord,
    TestResult,
    job_id_for,
    job_id_of_external,
    run_id_for,
    shard_id_for,
    utcnow,
)
from service.store.schema import UNAVAILABLE, unavailable_reason
from service.store.store import Conflict, Store

__all__ = ["APPROVAL_CHECK", "APPROVAL_SUITE", "Artifact", "Conflict", "InstalledRepo", "Job", "NewRun", "Run", "Shard",
           "Store", "TestRecord", "TestResult", "UNAVAILABLE", "job_id_for", "job_id_of_external", "run_id_for",
           "shard_id_for", "unavailable_reason", "utcnow"]
