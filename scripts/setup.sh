#!/usr/bin/env bash
# Installs what compile-ci needs on a Debian machine: apt packages, a virtualenv, pinned torch, the project.
# Idempotent and quiet when everything is already there. Sourced by sandbox.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

APT_PACKAGES=(redis-server git python3-venv docker.io debootstrap chromium lld postgresql nginx procps)
TORCH_PIN="torch==2.13.0"   # never unpinned: an unpinned torch pulls GBs of CUDA wheels
NUMPY_PIN="numpy>=1.26"     # without it every `import torch` warns "Failed to initialize NumPy"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.compile-ci-installed
want="$(sha256sum pyproject.toml | cut -c1-16) $TORCH_PIN $NUMPY_PIN"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: pip install $TORCH_PIN and compile-ci (a few minutes the first time)"
  .venv/bin/python -m pip install -q --disable-pip-version-check "$TORCH_PIN" "$NUMPY_PIN" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -W "error:Failed to initialize NumPy:UserWarning" \
    -c "import torch, service, celery, github; assert torch.__version__.startswith('2.13.0')"
  echo "$want" > "$stamp"
fi

# A Docker engine for the DockerRunner (no systemd here: start dockerd ourselves when none answers), then the
# CPU runner image the tests and the sandbox use, built on a local Debian base (no registry needed) and
# rebuilt only when its Dockerfile, the suites or its requirements changed.
if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd"
  as_root sh -c 'nohup dockerd >/var/log/compile-ci-dockerd.log 2>&1 &'
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not start (see /var/log/compile-ci-dockerd.log)" >&2; exit 1; }
fi
if [ "${COMPILE_CI_SKIP_IMAGES:-0}" != 1 ]; then
  as_root .venv/bin/compile-ci images build cpu --local-base --if-changed | sed 's/^/setup: /'
fi
