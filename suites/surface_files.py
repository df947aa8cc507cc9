"""What a snapshot of objects cannot compare: whether torch's files are the runner's own, and native code.

- **Torch's files.** The snapshot takes torch as it was imported; it cannot tell a torch whose files differ from the
  runner's. So: torch must come from the interpreter's own site-packages (not the checkout, its dependencies or
  anything put on the path), every module of the space must come from torch's own directory, and each of their
  files must have the content pip installed (the sha256 in torch's RECORD), checked once per module.
- **Native code.** A shared object the repository loads (its own C++ extension, `torch.ops.load_library`,
  `torch.utils.cpp_extension.load`, a dependency's extension module) can change any op's dispatch where no Python
  object shows it. The process's mappings (`/proc/self/maps`) list every shared object loaded, however; those
  outside torch, the interpreter's own directories, the system's libraries and inductor's and triton's caches are
  the repository's. They are looked for again whenever an extension module was imported or ctypes opened a library.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.machinery
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterable

from suites import surface_watch

MAPS = "/proc/self/maps"
_SYSTEM_DIRS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/", "/usr/libexec/", "/usr/local/cuda",
                "/usr/local/nvidia/")
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES) or (".so",)


def under(path: str, roots: Iterable[str]) -> bool:
    return any(path.startswith(root) for root in roots)


def interpreter_dirs() -> tuple[str, ...]:
    """The interpreter's own directories, and those its site directories' path files add (a runner's venv over a
    GPU host's CUDA torch reaches that torch, CUDA's libraries and triton so)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {*site.getsitepackages(), sys.base_prefix, sys.prefix}
    roots |= path_file_dirs({paths.get("purelib", ""), paths.get("platlib", ""), *site.getsitepackages()})
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def path_file_dirs(site_dirs: Iterable[str]) -> set[str]:
    """The directories the `.pth` files of these site directories put on the path (their import lines aside)."""
    found: set[str] = set()
    for directory in site_dirs:
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".pth")) if directory else []
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                    lines = handle.read(65536).splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    path = os.path.join(directory, line)
                    if os.path.isdir(path):
                        found.add(path)
    return found


def torch_location_problem(torch_dir: str, checkout: str) -> str:
    """Why torch is not the runner's own ('' when it is)."""
    here = os.path.realpath(torch_dir) + os.sep
    if checkout and here.startswith(os.path.realpath(checkout) + os.sep):
        return f"torch is imported from the checkout ({torch_dir})"
    paths = sysconfig.get_paths()
    roots = {paths["purelib"], paths["platlib"], site.getusersitepackages(), *site.getsitepackages()}
    roots |= path_file_dirs({paths["purelib"], paths["platlib"], *site.getsitepackages()})
    if not any(here.startswith(os.path.realpath(root) + os.sep) for root in roots if root):
        return f"torch is not the runner's own: imported from {torch_dir}"
    return ""


class TorchFiles:
    """The content pip installed for each of torch's files, and the modules checked against it."""

    def __init__(self, torch_dir: str) -> None:
        self.torch_dir = os.path.realpath(torch_dir) + os.sep
        self.site = os.path.dirname(os.path.realpath(torch_dir)) + os.sep
        self.recorded = self._record()
        self.problems: dict[str, str] = {}  # module name -> what differs
        self.digests: dict[str, str] = {}  # module name -> digest of its differing file (sources of the change)

    def _record(self) -> dict[str, str]:
        try:
            import importlib.metadata

            text = importlib.metadata.distribution("torch").read_text("RECORD") or ""
        except Exception:  # noqa: BLE001 - no metadata: nothing to check the files against
            return {}
        recorded = {}
        for line in text.splitlines():
            path, _, rest = line.partition(",")
            algorithm, _, digest = rest.partition(",")[0].partition("=")
            if algorithm == "sha256" and path.endswith(".py"):
                recorded[path] = digest
        return recorded

    def check(self, name: str, module: types.ModuleType) -> None:
        path = module.__dict__.get("__file__")
        if not isinstance(path, str) or not os.path.isabs(path):
            return  # built into torch (torch._C's submodules, torch.ops): no file of its own
        real = os.path.realpath(path)
        if not real.startswith(self.torch_dir):
            self.problems[name] = f"imported from {path}, outside torch"
        elif real.endswith(".py") and self.recorded:
            with open(real, "rb") as handle:
                data = handle.read()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            expected = self.recorded.get(real[len(self.site):])
            if expected is not None and digest != expected:
                self.problems[name] = f"{real[len(self.site):]} differs from the file pip installed"
                self.digests[name] = hashlib.sha256(data).hexdigest()[:16]


class NativeCode:
    """Shared objects loaded into this process from outside the runner's own directories."""

    def __init__(self, torch_dir: str, cache_dirs: Iterable[str]) -> None:
        roots = {os.path.realpath(torch_dir) + os.sep, *interpreter_dirs()}
        self.cache_dirs = [d for d in cache_dirs if d]
        self.stock = tuple(roots) + _SYSTEM_DIRS
        self.found: dict[str, str] = {}  # path -> its digest
        self.judged: set[str] = set()
        self._look = True  # the first check reads the mappings: what the interpreter loaded before install()
        self._caches: tuple[str, ...] | None = None

    def caches(self) -> tuple[str, ...]:
        """Inductor's and triton's cache directories: what inductor compiles is loaded from there (asked of inductor
        once it is loaded, then kept)."""
        if self._caches is not None:
            return self._caches
        dirs = list(self.cache_dirs)
        # triton's own cache: its driver's launcher stubs (cuda_utils) are built and loaded from there.
        dirs.append(os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache"))
        location = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
        try:
            dirs += [location.cache_dir(), location.triton_cache_dir(0)] if location is not None else []
        except Exception:  # noqa: BLE001, S110 - an older torch: the variables and the default stay
            pass
        found = tuple(os.path.realpath(d) + os.sep for d in dirs if d)
        self._caches = found if location is not None else None
        return found

    def note(self, added: list[tuple[str, object]]) -> None:
        """New entries of sys.modules: an extension module among them is native code loaded (look again)."""
        files = [str(_file_of(module)) for _name, module in added]
        stock = self.stock + self.caches()  # inductor's kernels load from its cache at every compile
        self._look |= any(f.endswith(_EXTENSIONS) and not under(os.path.realpath(f), stock) for f in files)

    def check(self) -> dict[str, str]:
        if not self._look and not surface_watch.libraries_opened():
            return self.found
        self._look = False
        try:
            with open(MAPS, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return self.found
        stock = self.stock + self.caches()
        for line in lines:
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if not path.startswith("/") or path in self.judged:
                continue
            self.judged.add(path)  # each mapping's path judged once
            deleted = path.endswith(" (deleted)")  # loaded, then removed: still loaded
            real = path[:-len(" (deleted)")] if deleted else path
            if ".so" in os.path.basename(real) and not under(os.path.realpath(real), stock):
                self.found[real] = "deleted" if deleted else _digest(real)
        return self.found


def _file_of(module: object) -> object:
    try:  # the instance's own dict: a lazy module's __getattr__ is not asked anything
        return object.__getattribute__(module, "__dict__").get("__file__", "")
    except (AttributeError, TypeError):
        return ""


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()[:16]
    except OSError:
        return "unreadable"
