"""The in-job half of the install phase, run inside the job (no network) as `python -c <this file's text>`.

argv: CHECKOUT SITE PACKAGE -- COMMAND...
SITE is the dependency environment the worker prepared (read-only; "" when there is none). With PACKAGE "1"
and a pyproject.toml or setup.py in the checkout, the checkout is copied where the job may write and installed
as `pip install -e .` would (no deps, no index, no build isolation); then COMMAND runs with the checkout's
paths pointing at the copy, so the repository's tests import what a laptop's editable install gives them.
It is not imported by the service: it runs with nothing but the image's interpreter and pip.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

INSTALL_EXIT = 97  # not one of pytest's exit codes: the worker reads it as "Install failed"
COPY_NAME = "compile-ci-src"


def _fail(stage, output):
    out = os.environ.get("COMPILE_CI_OUTPUT_DIR", "")
    lines = [line for line in output.splitlines() if line.strip()]
    if out:
        with open(os.path.join(out, "install.json"), "w") as handle:
            json.dump({"ok": False, "stage": stage, "lines": lines[-40:]}, handle)
    sys.exit(INSTALL_EXIT)


def _boot_dir(tmp, site_dirs):
    """A sitecustomize that processes the .pth files of our site dirs (an editable install is one) in every
    Python process the job starts, compile workers included."""
    boot = os.path.join(tmp, "compile-ci-boot")
    os.makedirs(boot, exist_ok=True)
    with open(os.path.join(boot, "sitecustomize.py"), "w") as handle:
        handle.write("import site\n" + "".join(f"site.addsitedir({d!r})\n" for d in site_dirs))
    return boot


def plan(argv):
    """The step's work (the repository's install, the boot directory), then (COMMAND with its paths, its
    environment, the site directories the boot directory's sitecustomize adds); the process's directory is where
    COMMAND runs. A warm interpreter's fork (suites/warm_install.py) calls this instead of `main` and runs COMMAND
    in its own process, as the exec would."""
    checkout, site, package = argv[0], argv[1], argv[2]
    command = argv[argv.index("--") + 1:]
    env = dict(os.environ)
    tmp = tempfile.gettempdir()
    site_dirs = [site] if site else []
    path = [site] if site else []
    has_project = any(os.path.exists(os.path.join(checkout, f)) for f in ("pyproject.toml", "setup.py"))
    if package == "1" and has_project:
        copy = os.path.join(tmp, COPY_NAME)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        prefix = os.path.join(tmp, "compile-ci-prefix")
        pip_env = {**env, "PYTHONPATH": os.pathsep.join(path + [env.get("PYTHONPATH", "")]).strip(os.pathsep),
                   "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        # A section of the log viewer, as the suites' plugin prints the next ones (suites/log_sections.py).
        print("::group::Install the repository (pip install -e . --no-deps --no-index)", flush=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
             "--prefix", prefix, "-e", copy],
            env=pip_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
        )
        print(proc.stdout, end="", flush=True)
        if proc.returncode != 0:
            _fail("package", proc.stdout)
        print("::endgroup::", flush=True)
        site_dirs.append(sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix}))
        command = [arg.replace(checkout, copy) if arg.startswith(checkout) else arg for arg in command]
        env["COMPILE_CI_CHECKOUT"] = copy
        # From the clone's root, as on a laptop: pytest then names the repository's frames relative to it.
        os.chdir(copy)
    path.insert(0, _boot_dir(tmp, site_dirs))
    env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return command, env, site_dirs


def main(argv):
    command, env, _site_dirs = plan(argv)
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
