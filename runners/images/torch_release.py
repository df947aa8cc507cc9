"""Runner images on another torch than the pinned one (`compile-ci images build cpu --torch 2.14.x`): the version
resolved on the host's package index, and the recipe of an image tagged `torch<major.minor>`."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

from runners.images import ImageBuildError, ImageRecipe

RUNNER_IMAGES = ("cpu", "cuda")
_EXACT = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:(?:a|b|rc)[0-9]+)?")
_SERIES = re.compile(r"([0-9]+\.[0-9]+)\.x")


def torch_recipe(recipe: ImageRecipe, version: str) -> ImageRecipe:
    """A runner recipe on another torch (`2.14.1`, `2.15.0rc1`): tagged `torch<major.minor>`, its wheels cached apart,
    the version in its `org.compile-ci.torch-version` label (which keys its compile caches)."""
    series = ".".join(version.split(".")[:2])
    name_part, _, _tag = recipe.tag.rpartition(":")
    requirements = (f"torch=={version}", *(r for r in recipe.requirements if not r.startswith("torch==")))
    return replace(recipe, name=f"{recipe.name}-torch{series}", tag=f"{name_part}:torch{series}",
                   requirements=requirements, build_args=(("TORCH_VERSION", version),))


def resolve_torch(spec: str, available: list[str] | None = None) -> str:
    """`2.14.1` as it is; `2.14.x`: the newest 2.14 release the host's package index has (no local `+cpu` labels,
    no pre-releases: a release candidate is named exactly)."""
    if _EXACT.fullmatch(spec):
        return spec
    series = _SERIES.fullmatch(spec)
    if series is None:
        raise ImageBuildError(f"--torch {spec!r}: expected a version (2.14.1, 2.15.0rc1) or a series (2.14.x)")
    if available is None:
        listed = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch"], capture_output=True,
                                text=True).stdout
        found = re.search(r"Available versions: (.*)", listed)
        available = [v.strip() for v in found.group(1).split(",")] if found else []
    releases = [v for v in available if re.fullmatch(rf"{re.escape(series.group(1))}\.[0-9]+", v)]
    if not releases:
        raise ImageBuildError(f"--torch {spec}: the package index has no torch {series.group(1)} release")
    return max(releases, key=lambda v: int(v.rsplit(".", 1)[1]))
