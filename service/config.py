"""Settings: one frozen dataclass built once from COMPILE_CI_* environment variables."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from runners.cpu_shares import parse_cpus
from runners.gpus import parse_gpus
from runners.toolchain import CHOICES as LINKERS
from service.secret import Secret
from service.torch_versions import DEFAULT_VERSIONS, TorchVersion, parse_versions

PREFIX = "COMPILE_CI_"
DEVICES = ("cpu", "cuda")
RUNNERS = ("auto", "docker", "local")
__all__ = ["ConfigError", "Secret", "Settings"]


class ConfigError(ValueError):
    """Every configuration problem found, reported together."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid compile-ci configuration:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class Settings:
    webhook_secret: Secret = field(repr=False)
    github_app_id: int
    github_private_key: Secret = field(repr=False)
    github_api_url: str = "https://api.github.com"
    # PyGithub waits between requests (0.25 s) and writes (1 s) by default to stay under GitHub's
    # secondary rate limits; tests and the sandbox turn that off.
    github_throttle: bool = True
    redis_url: str = "redis://127.0.0.1:6379/0"
    data_dir: Path = Path("var")
    database_url: str = ""
    artifacts_dir: Path = Path("var/artifacts")
    # Compile caches by cache key, this host's; shared_cache_dir: trusted ones where all hosts read (shared_cache.py).
    cache_dir: Path = Path("var/cache")
    shared_cache_dir: Path | None = None
    public_url: str = "http://127.0.0.1:8000"
    # Where workers fetch repositories from; "{full_name}" is substituted. Empty means the
    # clone_url GitHub sends, authenticated with the installation token.
    clone_url_template: str = ""
    # Devices this deployment has runners for; jobs for others complete as skipped.
    devices: tuple[str, ...] = DEVICES
    # auto: the DockerRunner wherever a Docker engine answers, else LocalRunner (trusted hosts only).
    runner: str = "auto"
    runner_python: str = ""
    # The GPUs this worker's cuda jobs may use ("0", "1,2", GPU UUIDs); empty: all. One cuda worker per GPU on a
    # host with several, so two jobs never share one.
    gpus: tuple[str, ...] = ()
    # Jobs that skip the imports every process pays. LocalRunner (default): each forked from a warm interpreter of the
    # host (runners/warm_start.py). DockerRunner (default): a pull-request job takes a container started, and through
    # its imports, before it came (runners/docker_prestart.py; about 0.5 GB per slot while one waits).
    warm_start: bool = True
    prestart: bool = True
    # Jobs at once, each on its own part of these CPUs (empty: the worker's own; runners/cpu_shares.py).
    job_slots: int = 1
    cpus: tuple[int, ...] = ()
    runner_image_cpu: str = "compile-ci/runner-cpu:latest"
    runner_image_cuda: str = "compile-ci/runner-cuda:latest"
    # The torch versions this deployment has runners for, its default first; an advisory one (a release candidate)
    # never turns a pull request red and is what the daily canary runs (service/torch_versions.py).
    torch_versions: tuple[TorchVersion, ...] = (TorchVersion(DEFAULT_VERSIONS),)
    # The version this worker's runner holds (its image, or COMPILE_CI_RUNNER_PYTHON): its job queues are that
    # version's. Empty: the default.
    worker_torch: str = ""
    canary_hour: int = 3  # UTC hour of the daily canary on the advisory version
    max_job_minutes: int = 60
    # A suite job runs as up to this many shards, one per live worker slot of its device and at most one per
    # `shard_min_seconds` of its recorded test time (service/jobs/shard_plan.py); 1: never sharded.
    max_shards: int = 4
    shard_min_seconds: int = 30
    shard_start_seconds: int = 8  # one shard's start, as a push's run plans its counts (service/jobs/run_plan.py)
    # Names this deployment's job containers (a label), so a worker sweeps only its own deployment's leftovers on
    # an engine that others share. Default: derived from the database URL (hashed: it may hold a password).
    deployment: str = "default"
    # Where the worker downloads a repository's [install] requirements from (binary wheels only). Empty: the
    # worker's own pip configuration. A pull request cannot add indexes.
    pip_index_url: str = ""
    pip_extra_index_urls: tuple[str, ...] = ()
    # Each repository's trusted compile cache (per runner build) is trimmed to this, least recently used first.
    cache_cap_mb: int = 4096
    # A job's output directory (generated code, junit, metrics) is capped at this while it runs (a tmpfs in Docker).
    output_mb: int = 1024
    # After its tests ran, a job bisects its compiled-vs-eager failures for at most this long (0: never).
    bisect_seconds: int = 120
    delivery_ttl_seconds: int = 7 * 24 * 3600
    # Live progress of a running job is PATCHed at most this often (GitHub's secondary rate limits).
    progress_interval_seconds: int = 10
    # The reaper (Celery beat) looks this often for jobs whose worker died (lapsed lease) or whose message was lost,
    # so a job is restarted within seconds; and for jobs alive past their time limit plus the grace.
    reaper_interval_seconds: int = 10
    reaper_grace_seconds: int = 300
    # A head that cannot be fetched (force-pushed away, the git host down) is tried this often, waiting
    # plan_retry_seconds, then twice that, ... (at most 300 s) in between; then its check runs fail saying so.
    plan_tries: int = 8
    plan_retry_seconds: int = 5
    # Sign-in with GitHub for the browser (the App's OAuth client); github.com hosts the OAuth pages.
    github_client_id: str = ""
    github_client_secret: Secret = field(default=Secret(""), repr=False)
    github_web_url: str = "https://github.com"
    session_secret: Secret = field(default=Secret(""), repr=False)
    # Observability: text or JSON log lines; the directory gunicorn's workers share their metrics in (multiprocess
    # mode; empty: each process counts alone); a worker's own metrics port (0: none).
    log_format: str = "text"
    metrics_dir: Path | None = None
    metrics_port: int = 0

    @property
    def visibility_timeout_seconds(self) -> int:
        # Redis redelivers an unacked message after this long; it must outlast the longest job
        # or a running job would be started a second time on another worker.
        return self.max_job_minutes * 60 + 15 * 60

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        return _build(env)


def _get(env: Mapping[str, str], name: str, default: str = "") -> str:
    return env.get(PREFIX + name, default).strip()


def _read_private_key(env: Mapping[str, str], problems: list[str]) -> str:
    inline = env.get(PREFIX + "GITHUB_PRIVATE_KEY", "")
    path = _get(env, "GITHUB_PRIVATE_KEY_FILE")
    if inline and path:
        problems.append("set only one of COMPILE_CI_GITHUB_PRIVATE_KEY and COMPILE_CI_GITHUB_PRIVATE_KEY_FILE")
    if path:
        try:
            inline = Path(path).read_text()
        except OSError as exc:
            problems.append(f"COMPILE_CI_GITHUB_PRIVATE_KEY_FILE: cannot read {path}: {exc.strerror}")
            return ""
    if not inline:
        problems.append("COMPILE_CI_GITHUB_PRIVATE_KEY (or _FILE) is required: the GitHub App's private key")
    elif "PRIVATE KEY-----" not in inline:
        problems.append("COMPILE_CI_GITHUB_PRIVATE_KEY is not a PEM private key")
    return inline.replace("\\n", "\n")


def _int(env: Mapping[str, str], name: str, default: int, problems: list[str], minimum: int = 1) -> int:
    raw = _get(env, name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        problems.append(f"{PREFIX}{name} must be an integer, got {raw!r}")
        return default
    if value < minimum:
        problems.append(f"{PREFIX}{name} must be at least {minimum}, got {value}")
    return value


def _url(env: Mapping[str, str], name: str, default: str, schemes: tuple[str, ...], problems: list[str]) -> str:
    value = _get(env, name, default).rstrip("/")
    if urlparse(value).scheme not in schemes:
        problems.append(f"{PREFIX}{name} must be a {'/'.join(schemes)} URL, got {value!r}")
    return value


def _index_urls(env: Mapping[str, str], name: str, problems: list[str]) -> tuple[str, ...]:
    urls = tuple(u.strip().rstrip("/") for u in _get(env, name).split(",") if u.strip())
    for url in urls:
        # file: serves an index kept on the worker's disk (an air-gapped mirror, the sandbox's).
        if urlparse(url).scheme not in ("http", "https", "file"):
            problems.append(f"{PREFIX}{name} must be http, https or file URLs, got {url!r}")
    return urls


def _bool(env: Mapping[str, str], name: str, default: bool, problems: list[str]) -> bool:
    raw = _get(env, name).lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    problems.append(f"{PREFIX}{name} must be true or false, got {raw!r}")
    return default


def _build(env: Mapping[str, str]) -> Settings:
    problems: list[str] = []
    secret = env.get(PREFIX + "WEBHOOK_SECRET", "")
    if not secret:
        problems.append("COMPILE_CI_WEBHOOK_SECRET is required: the secret set on the GitHub App's webhook")
    app_id = _int(env, "GITHUB_APP_ID", 0, problems)
    if not _get(env, "GITHUB_APP_ID"):
        problems.append("COMPILE_CI_GITHUB_APP_ID is required: the GitHub App's numeric id")
    private_key = _read_private_key(env, problems)
    data_dir = Path(_get(env, "DATA_DIR", "var")).absolute()
    database_url = _get(env, "DATABASE_URL") or f"sqlite:///{data_dir / 'compile-ci.sqlite3'}"
    if "://" not in database_url:
        problems.append(f"COMPILE_CI_DATABASE_URL must be an SQLAlchemy URL, got {database_url!r}")
    devices = tuple(d.strip() for d in _get(env, "DEVICES", ",".join(DEVICES)).split(",") if d.strip())
    unknown = [d for d in devices if d not in DEVICES]
    if unknown or not devices:
        problems.append(f"COMPILE_CI_DEVICES must list devices among {', '.join(DEVICES)}, got {devices}")
    runner = _get(env, "RUNNER", "auto").lower()
    if runner not in RUNNERS:
        problems.append(f"COMPILE_CI_RUNNER must be one of {', '.join(RUNNERS)}, got {runner!r}")
    linker = _get(env, "LINKER", "lld").lower()
    if linker not in LINKERS:
        problems.append(f"COMPILE_CI_LINKER must be one of {', '.join(LINKERS)}, got {linker!r}")
    try:
        gpus = parse_gpus(_get(env, "GPUS"))
    except ValueError as exc:
        gpus = ()
        problems.append(f"COMPILE_CI_GPUS must list GPU indexes or UUIDs, comma-separated: {exc}")
    try:
        cpus = parse_cpus(_get(env, "CPUS")) if _get(env, "CPUS") else ()
    except ValueError as exc:
        cpus = ()
        problems.append(f"COMPILE_CI_CPUS must be a CPU list like 0-7,16-23: {exc}")
    versions, version_problems = parse_versions(_get(env, "TORCH_VERSIONS", DEFAULT_VERSIONS))
    problems += [f"COMPILE_CI_TORCH_VERSIONS: {p}" for p in version_problems]
    worker_torch = _get(env, "WORKER_TORCH")
    if worker_torch and worker_torch not in [v.name for v in versions]:
        problems.append(f"COMPILE_CI_WORKER_TORCH must be one of COMPILE_CI_TORCH_VERSIONS "
                        f"({', '.join(v.name for v in versions)}), got {worker_torch!r}")
    canary_hour = _int(env, "CANARY_HOUR", 3, problems, minimum=0)
    if canary_hour > 23:
        problems.append(f"COMPILE_CI_CANARY_HOUR must be an hour from 0 to 23 (UTC), got {canary_hour}")
    template = _get(env, "CLONE_URL_TEMPLATE")
    if template and "{full_name}" not in template:
        problems.append("COMPILE_CI_CLONE_URL_TEMPLATE must contain {full_name}")
    client_id, client_secret = _get(env, "GITHUB_CLIENT_ID"), _get(env, "GITHUB_CLIENT_SECRET")
    session_secret = _get(env, "SESSION_SECRET")
    if client_id and not (client_secret and session_secret):
        problems.append("COMPILE_CI_GITHUB_CLIENT_ID needs COMPILE_CI_GITHUB_CLIENT_SECRET and "
                        "COMPILE_CI_SESSION_SECRET (sign-in with GitHub for private repositories)")
    log_format = _get(env, "LOG_FORMAT", "text").lower()
    if log_format not in ("text", "json"):
        problems.append(f"COMPILE_CI_LOG_FORMAT must be text or json, got {log_format!r}")
    settings = Settings(
        webhook_secret=Secret(secret),
        github_app_id=app_id,
        github_private_key=Secret(private_key),
        github_api_url=_url(env, "GITHUB_API_URL", "https://api.github.com", ("http", "https"), problems),
        github_throttle=_bool(env, "GITHUB_THROTTLE", True, problems),
        redis_url=_url(env, "REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss", "unix"), problems),
        data_dir=data_dir,
        database_url=database_url,
        artifacts_dir=Path(_get(env, "ARTIFACTS_DIR") or data_dir / "artifacts").absolute(),
        cache_dir=Path(_get(env, "CACHE_DIR") or data_dir / "cache").absolute(),
        shared_cache_dir=Path(_get(env, "SHARED_CACHE_DIR")).absolute() if _get(env, "SHARED_CACHE_DIR") else None,
        public_url=_url(env, "PUBLIC_URL", "http://127.0.0.1:8000", ("http", "https"), problems),
        clone_url_template=template,
        devices=devices,
        runner=runner,
        runner_python=_get(env, "RUNNER_PYTHON"),
        gpus=gpus,
        warm_start=_bool(env, "WARM_START", True, problems),
        prestart=_bool(env, "PRESTART", True, problems),
        job_slots=_int(env, "JOB_SLOTS", 1, problems),
        cpus=cpus,
        runner_image_cpu=_get(env, "RUNNER_IMAGE_CPU", "compile-ci/runner-cpu:latest"),
        runner_image_cuda=_get(env, "RUNNER_IMAGE_CUDA", "compile-ci/runner-cuda:latest"),
        torch_versions=versions or (TorchVersion(DEFAULT_VERSIONS),),
        worker_torch=worker_torch,
        canary_hour=canary_hour,
        max_job_minutes=_int(env, "MAX_JOB_MINUTES", 60, problems),
        max_shards=_int(env, "MAX_SHARDS", 4, problems),
        shard_min_seconds=_int(env, "SHARD_MIN_SECONDS", 30, problems, minimum=0),
        shard_start_seconds=_int(env, "SHARD_START_SECONDS", 8, problems, minimum=0),
        deployment=_get(env, "DEPLOYMENT") or hashlib.sha256(database_url.encode()).hexdigest()[:12],
        pip_index_url=next(iter(_index_urls(env, "PIP_INDEX_URL", problems)), ""),
        pip_extra_index_urls=_index_urls(env, "PIP_EXTRA_INDEX_URLS", problems),
        cache_cap_mb=_int(env, "CACHE_CAP_MB", 4096, problems),
        output_mb=_int(env, "OUTPUT_MB", 1024, problems, minimum=16),
        bisect_seconds=_int(env, "BISECT_SECONDS", 120, problems, minimum=0),
        delivery_ttl_seconds=_int(env, "DELIVERY_TTL_SECONDS", 7 * 24 * 3600, problems),
        progress_interval_seconds=_int(env, "PROGRESS_INTERVAL_SECONDS", 10, problems),
        reaper_interval_seconds=_int(env, "REAPER_INTERVAL_SECONDS", 10, problems),
        reaper_grace_seconds=_int(env, "REAPER_GRACE_SECONDS", 300, problems, minimum=0),
        plan_tries=_int(env, "PLAN_TRIES", 8, problems),
        plan_retry_seconds=_int(env, "PLAN_RETRY_SECONDS", 5, problems),
        github_client_id=client_id,
        github_client_secret=Secret(client_secret),
        github_web_url=_url(env, "GITHUB_WEB_URL", "https://github.com", ("http", "https"), problems),
        session_secret=Secret(session_secret),
        log_format=log_format,
        metrics_dir=Path(_get(env, "METRICS_DIR")).absolute() if _get(env, "METRICS_DIR") else None,
        metrics_port=_int(env, "METRICS_PORT", 0, problems, minimum=0),
    )
    if problems:
        raise ConfigError(problems)
    return settings
