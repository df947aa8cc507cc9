"""The schema: tables created once, additive columns added to older databases, SQLite's pragmas, and what counts
as the database being unavailable (down, read-only, full) rather than a bug."""

from __future__ import annotations

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    InternalError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.store.rows import Base

# The database is down, read-only, full or locked (SQLite: OperationalError; PostgreSQL read-only: InternalError):
# the same request can succeed later. Callers answer "try again" instead of failing for good.
UNAVAILABLE = (OperationalError, InternalError, PoolTimeout, DisconnectionError)


def create_schema(engine: Engine) -> None:
    try:
        Base.metadata.create_all(engine)
    except (IntegrityError, ProgrammingError):
        # Another process (web, a worker) created the tables between our check and our CREATE (PostgreSQL
        # reports the race as a duplicate in its catalogue, an IntegrityError).
        Base.metadata.create_all(engine)
    _add_missing_columns(engine)


def unavailable_reason(exc: BaseException) -> str:
    """The driver's first line (e.g. "database or disk is full"), without the SQL or its parameters."""
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    return f"{type(original).__name__}: {lines[0] if lines else ''}"[:300]


def _add_missing_columns(engine: Engine) -> None:
    """Additive schema changes (a new counter, say) reach a database an older version created: each missing column
    is added with its server default. Nothing is ever dropped or changed here."""
    existing = inspect(engine)
    for table in Base.metadata.sorted_tables:
        have = {column["name"] for column in existing.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            ddl = f"ALTER TABLE {table.name} ADD COLUMN {column.name} {column.type.compile(engine.dialect)}"
            if column.server_default is not None:
                arg = str(column.server_default.arg)  # type: ignore[attr-defined]
                ddl += f" DEFAULT {arg if arg.isdigit() else _sql_string(arg)}"
            try:
                with engine.begin() as connection:
                    connection.execute(text(ddl))
            except (OperationalError, ProgrammingError):
                pass  # another process added it first


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    # WAL lets the web process read while a worker writes; busy_timeout makes concurrent writers
    # (several gunicorn workers, several Celery workers) wait instead of failing.
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
