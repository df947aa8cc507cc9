"""The sandbox's package index: one pure-python wheel the sample repository depends on, in a PEP 503 directory that
pip reads through a file: URL (COMPILE_CI_PIP_INDEX_URL), so the sandbox's install phase needs no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

NAME, VERSION = "zoo-extras", "1.0"
DEPENDENCY = f"{NAME}=={VERSION}"
_MODULE = '''"""Helpers the sample model zoo depends on."""

import torch


def example_batch(rows: int, features: int) -> torch.Tensor:
    """A fixed-seed batch, so eager and compiled runs see the same inputs."""
    return torch.randn(rows, features, generator=torch.Generator().manual_seed(0))
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_sample_index(root: Path) -> str:
    """Writes `root/packages/<wheel>` and `root/simple/zoo-extras/index.html`; returns the index's URL."""
    dist = f"zoo_extras-{VERSION}.dist-info"
    files = {
        "zoo_extras/__init__.py": _MODULE.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: compile-ci-sandbox\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{dist}/RECORD,,"]) + "\n"
    wheel = root / "packages" / f"zoo_extras-{VERSION}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist}/RECORD", record)
    page = root / "simple" / NAME / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page.write_text(f'<html><body><a href="../../packages/{wheel.name}#sha256={sha}">{wheel.name}</a></body></html>\n')
    return (root / "simple").as_uri()
