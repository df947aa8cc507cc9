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

stamp=.venv/.compile-ci-installed
want="$(sha256sum pyproject.toml | cut -c1-16) $TORCH_PIN $NUMPY_PIN"
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # torch and every dependency are installed once per machine into a venv under the cache, keyed by pyproject.toml
  # and the pins, and hard-linked into each checkout's .venv (seconds; a clean clone paid about 52 s of pip on the
  # 2-core host); only the checkout's own editable install is made here. COMPILE_CI_VENV_CACHE moves the cache.
  cache_root="${COMPILE_CI_VENV_CACHE:-${HOME:-/nonexistent}/.cache/compile-ci/venvs}"
  mkdir -p "$cache_root" 2>/dev/null && [ -w "$cache_root" ] || cache_root="$PWD/var/venv-cache"  # no home to write
  deps_cache="$cache_root/main-$(echo "$want" | sha256sum | cut -c1-16)"
  # Two set-ups at once (CI and a second job beside it) take turns: one builds the cache, the other links it after.
  exec 9>"$cache_root/.lock" && flock 9
  if [ ! -f "$deps_cache/.compile-ci-installed" ] || [ "$(cat "$deps_cache/.compile-ci-installed")" != "$want" ]; then
    echo "setup: pip install $TORCH_PIN and compile-ci's dependencies (a few minutes the first time on a machine)"
    rm -rf "$deps_cache" && mkdir -p "$(dirname "$deps_cache")" && python3 -m venv "$deps_cache"
    "$deps_cache/bin/python" -m pip install -q --disable-pip-version-check "$TORCH_PIN" "$NUMPY_PIN" 2>&1 | grep -v '^WARNING: Location' || true
    "$deps_cache/bin/python" -m pip install -q --disable-pip-version-check '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
    "$deps_cache/bin/python" -m pip uninstall -q -y compile-ci >/dev/null 2>&1 || true  # each checkout's own, editable
    "$deps_cache/bin/python" -W "error:Failed to initialize NumPy:UserWarning" \
      -c "import torch, celery, github; assert torch.__version__.startswith('2.13.0')"
    echo "$want" > "$deps_cache/.compile-ci-installed"
  fi
  echo "setup: .venv from $deps_cache (hard links) and compile-ci editable"
  rm -rf .venv
  cp -al "$deps_cache" .venv 2>/dev/null || cp -a "$deps_cache" .venv
  rm -f .venv/.compile-ci-installed
  flock -u 9 && exec 9>&-
  # Scripts name their interpreter: this venv's, not the cache's (sed writes a new file: the cache's stays).
  for script in .venv/bin/*; do
    if [ -f "$script" ] && [ ! -L "$script" ] && head -c 2 "$script" | grep -q '^#!'; then
      sed -i "1s|^#!$deps_cache/bin/|#!$PWD/.venv/bin/|" "$script"
    fi
  done
  sed -i "s|$deps_cache|$PWD/.venv|g" .venv/pyvenv.cfg .venv/bin/activate* 2>/dev/null || true
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | grep -v '^WARNING: Location' || true
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
