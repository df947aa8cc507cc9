"""Worker entrypoint: `celery -A service.worker worker -Q cpu,github` (settings from COMPILE_CI_*)."""

from service.config import Settings
from service.jobs.tasks import create_worker_celery

celery = create_worker_celery(Settings.from_env())
