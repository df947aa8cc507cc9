#!/usr/bin/env bash
# The whole service on a GPU host without Docker: Redis, the web app, a github worker, a cpu worker, one cuda worker
# per GPU (LocalRunner: what a trusted GPU host runs) and the GitHub emulator, through `compile-ci sandbox --devices
# cpu,cuda --declared`: the sandbox's two pull requests on cpu and cuda, and the declared-targets sample through all
# six suites on cuda.
#
#   bash scripts/gpu-sandbox.sh prepare DIR [PYTHON_VERSION]   # on a machine with the package indexes (default 3.12)
#   bash scripts/gpu-sandbox.sh run DIR [sandbox options]      # on the GPU host, offline: DIR is all it needs
#   bash scripts/gpu-sandbox.sh exec DIR COMMAND...             # the same preparation, then COMMAND with DIR/venv's
#                                                               # python first on PATH (e.g. python bench/suites.py)
#
# prepare: the service's Python dependencies as wheels for the GPU host's Python (pip, with this machine's pip
# settings) and Debian's redis-server with the libraries it links that a CUDA host image may lack (apt, with this
# machine's apt settings), into DIR. run: unpacks Redis into DIR/redis, makes DIR/venv whose interpreter also sees
# the site-packages of PYTHON (default python3: the one that holds CUDA torch), installs the wheels into it offline,
# and starts the sandbox with COMPILE_CI_RUNNER=local. Options after DIR go to `compile-ci sandbox` (default:
# --devices cpu,cuda --declared --cuda-workers <number of GPUs>).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
action="${1:?usage: gpu-sandbox.sh prepare|run DIR ...}"
dir="$(mkdir -p "${2:?usage: gpu-sandbox.sh prepare|run DIR ...}" && cd "$2" && pwd)"
shift 2

deps() {  # the service's requirements, from pyproject.toml, plus what the suites need beside torch
  python3 - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] + ["pytest>=8"]))
PY
}

if [ "$action" = prepare ]; then
  version="${1:-3.12}"
  mkdir -p "$dir/wheels" "$dir/debs"
  deps > "$dir/requirements.txt"
  platforms=()
  for tag in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64 \
             manylinux_2_27_x86_64 manylinux1_x86_64 linux_x86_64; do platforms+=(--platform "$tag"); done
  python3 -m pip download --quiet --only-binary=:all: --python-version "$version" --implementation cp \
    "${platforms[@]}" -d "$dir/wheels" -r "$dir/requirements.txt"
  (cd "$dir/debs" && apt-get download redis-tools libjemalloc2 liblzf1 >/dev/null)
  # The GitHub fixtures the emulator and the sandbox's deliveries read (../shared beside the checkout, or
  # COMPILE_CI_SHARED_DIR): the GPU host may have no such folder.
  shared="${COMPILE_CI_SHARED_DIR:-../shared}"
  mkdir -p "$dir/shared/fixtures" && cp -r "$shared/fixtures/github" "$dir/shared/fixtures/"
  du -sh "$dir/wheels" "$dir/debs"
  exit 0
fi

case "$action" in run|exec) ;; *) echo "gpu-sandbox.sh: unknown action $action (prepare, run or exec)" >&2; exit 2;; esac
python="${PYTHON:-python3}"
# Redis: Debian's build, unpacked beside its libraries and started through a wrapper that finds them.
if [ ! -x "$dir/redis/usr/bin/redis-server" ]; then
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/redis"; done
  mkdir -p "$dir/redis/bin"
  # redis-check-rdb is the server when called by that name (Debian's redis-server package is only this link).
  ln -sf redis-check-rdb "$dir/redis/usr/bin/redis-server"
  cat > "$dir/redis/bin/redis-server" <<SH
#!/bin/sh
LD_LIBRARY_PATH="$dir/redis/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/redis/usr/bin/redis-server" "\$@"
SH
  chmod +x "$dir/redis/bin/redis-server"
fi
"$dir/redis/bin/redis-server" --version
# A venv of our own that sees the torch interpreter's packages (a .pth file: that interpreter may itself be a venv,
# whose packages --system-site-packages would not show); pip installs only what is missing, offline.
if [ ! -x "$dir/venv/bin/python" ]; then
  "$python" -m venv --without-pip "$dir/venv"
  site="$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$python" -c 'import site, sysconfig; print("\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])))' > "$site/torch-host.pth"
fi
"$dir/venv/bin/python" -m pip install --quiet --no-index --find-links "$dir/wheels" -r "$dir/requirements.txt"
# This checkout as if `pip install -e .`: the workers import `service`, and LocalRunner's jobs `suites.plugin`.
site="$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$PWD" > "$site/compile-ci-checkout.pth"
"$dir/venv/bin/python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count(), "GPU(s)")'
gpus="$("$dir/venv/bin/python" -c 'import torch; print(max(1, torch.cuda.device_count()))')"
export PATH="$dir/venv/bin:$dir/redis/bin:$PATH" COMPILE_CI_RUNNER=local
if [ -d "$dir/shared/fixtures/github" ]; then
  export COMPILE_CI_SHARED_DIR="$dir/shared" COMPILE_CI_GITHUB_SPEC="$dir/shared/fixtures/github/openapi-ci-subset.json"
fi
[ "$action" = exec ] && exec "$@"
[ "$#" -gt 0 ] || set -- --devices cpu,cuda --declared --cuda-workers "$gpus"
exec "$dir/venv/bin/python" -m service.cli sandbox "$@"
