#!/usr/bin/env bash
# The second torch of the version-matrix test (tests/integration/test_torch_matrix.py), for scripts/test.sh only:
# that test's worker of the deployment's second version runs its jobs with this venv's interpreter (LocalRunner).
# What the package index has of 2.14.1 is the CUDA build with its nvidia-* wheels: 3 min and 5.5 GB to install, so it
# is built once per machine under the cache and hard-linked into the checkout (seconds); the .pth makes this
# checkout's suites importable in it. Idempotent.
#
# `--background`: start it detached and return at once (.ci/run does so first thing, scripts/test.sh again before the
# tests; a run already going is left alone). var/next-torch.pending holds its shell's pid while it runs, then
# var/next-torch.rc its exit status and var/next-torch.log its output; tests/next_torch.py waits on them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = --background ]; then
  mkdir -p var
  if [ -f var/next-torch.pending ] && kill -0 "$(cat var/next-torch.pending 2>/dev/null)" 2>/dev/null; then
    exit 0  # already installing
  fi
  rm -f var/next-torch.rc
  setsid bash -c 'echo $$ > var/next-torch.pending; bash scripts/next-torch.sh > var/next-torch.log 2>&1
echo $? > var/next-torch.rc; rm -f var/next-torch.pending' < /dev/null > /dev/null 2>&1 &
  for _ in $(seq 100); do [ -f var/next-torch.pending ] || [ -f var/next-torch.rc ] && break; sleep 0.05; done
  exit 0
fi

NEXT_TORCH_PIN="torch==2.14.1"
NUMPY_PIN="numpy>=1.26"
next_cache="${COMPILE_CI_VENV_CACHE:-$HOME/.cache/compile-ci/venvs}/torch-2.14.1"
next_want="$NEXT_TORCH_PIN $NUMPY_PIN pytest>=8 expecttest>=0.2"
if [ ! -f "$next_cache/.compile-ci-installed" ] || [ "$(cat "$next_cache/.compile-ci-installed")" != "$next_want" ]; then
  echo "next-torch: a venv with $NEXT_TORCH_PIN for the torch-matrix test (about 3 min and 5.5 GB, once per machine)"
  rm -rf "$next_cache" && mkdir -p "$(dirname "$next_cache")" && python3 -m venv "$next_cache"
  "$next_cache/bin/python" -m pip install -q --disable-pip-version-check "$NEXT_TORCH_PIN" "$NUMPY_PIN" "pytest>=8" \
    "expecttest>=0.2" 2>&1 | grep -v -e '^WARNING: Location' -e 'requires setuptools' || true
  "$next_cache/bin/python" -W "error:Failed to initialize NumPy:UserWarning" \
    -c "import torch; assert torch.__version__.startswith('2.14.1')"
  echo "$next_want" > "$next_cache/.compile-ci-installed"
fi
if ! cmp -s "$next_cache/.compile-ci-installed" .venv-torch2.14/.compile-ci-installed 2>/dev/null; then
  rm -rf .venv-torch2.14
  cp -al "$next_cache" .venv-torch2.14 2>/dev/null || cp -a "$next_cache" .venv-torch2.14
fi
next_site="$(.venv-torch2.14/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -f "$next_site/compile-ci.pth" && echo "$PWD" > "$next_site/compile-ci.pth"
