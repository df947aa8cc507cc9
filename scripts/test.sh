#!/usr/bin/env bash
# Sets up, lints, and runs every test (unit, integration with real Redis, runner contract, end to end).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh || exit 1
set +e
.venv/bin/ruff check service runners suites tests bench || exit 1
# The second torch of the version-matrix tests (scripts/next-torch.sh: about 2-3 min on a fresh machine, mostly its
# download) installs beside the set-up and the tests, not before them (.ci/run starts it first thing; here it is
# started unless it runs); the two files that use it wait for it (tests/next_torch.py) and are handed out late
# (tests/schedule.py).
bash scripts/next-torch.sh --background
# Three pytest-xdist workers on the 2-core host (each file on one of them; files that use the Docker engine take
# turns, tests/conftest.py DOCKER_FILES): a third worker fills what two leave idle while their tests wait on jobs,
# workers and sleeps (23 min 41 s with two, 19 min 4 s with three, docs/development.md; a fourth gained nothing: a
# clean clone's `bash .ci/run` of one tree took 1,163 s with four, 1,164 s with three). COMPILE_CI_TEST_WORKERS=N
# sets the count; 0 runs everything in one process.
workers="${COMPILE_CI_TEST_WORKERS:-3}"
if [ "$workers" = 0 ]; then
  .venv/bin/python -m pytest "$@"
else
  .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
fi
rc=$?
for _ in $(seq 900); do  # the install's end, at most 15 min after the tests' (a hung one is then said to fail)
  [ -f var/next-torch.pending ] && kill -0 "$(cat var/next-torch.pending 2>/dev/null)" 2>/dev/null || break
  sleep 1
done
if [ "$(cat var/next-torch.rc 2>/dev/null)" != 0 ]; then
  echo "test.sh: scripts/next-torch.sh failed; var/next-torch.log ends:" >&2
  tail -n 20 var/next-torch.log >&2
  [ $rc -eq 0 ] && rc=1
fi
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests — that is a failure" >&2
  exit 1
fi
exit $rc
