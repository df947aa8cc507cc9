#!/usr/bin/env bash
# Sets up, lints, and runs every test (unit, integration with real Redis, runner contract, end to end).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh || exit 1
bash scripts/next-torch.sh || exit 1
set +e
.venv/bin/ruff check service runners suites tests bench || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests — that is a failure" >&2
  exit 1
fi
exit $rc
