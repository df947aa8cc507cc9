#!/usr/bin/env bash
# Installs what compile-ci needs on a Debian machine: apt packages, a virtualenv, pinned torch, the project.
# Idempotent and quiet when everything is already there. Sourced by sandbox.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

APT_PACKAGES=(redis-server git python3-venv docker.io debootstrap chromium lld)
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

# A second torch for the version-matrix test (tests/integration/test_torch_matrix.py): the worker of the deployment's
# second version runs its jobs with this venv's interpreter (LocalRunner). What the package index has of 2.14.1 is the
# CUDA build with its nvidia-* wheels: 3 min and 5.4 GB to install, so it is built once per machine under the cache
# and hard-linked into the checkout (seconds); the .pth makes this checkout's suites importable in it.
NEXT_TORCH_PIN="torch==2.14.1"
next_cache="${COMPILE_CI_VENV_CACHE:-$HOME/.cache/compile-ci/venvs}/torch-2.14.1"
next_want="$NEXT_TORCH_PIN $NUMPY_PIN pytest>=8 expecttest>=0.2"
if [ ! -f "$next_cache/.compile-ci-installed" ] || [ "$(cat "$next_cache/.compile-ci-installed")" != "$next_want" ]; then
  echo "setup: a venv with $NEXT_TORCH_PIN for the torch-matrix test (about 3 min and 5.4 GB, once per machine)"
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
