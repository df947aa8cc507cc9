#!/usr/bin/env bash
# The main job on embedded defaults: sets up, then runs two sample pull requests end to end (Redis, gunicorn,
# Celery workers, the DockerRunner where dockerd answers, else LocalRunner, real torch.compile) against the
# built-in GitHub emulator, prints the check runs with their job pages, and stops everything it started.
# No GitHub account needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec .venv/bin/compile-ci sandbox "$@"
