"""A job's whole artifact directory as a zip, streamed while it is written (no temporary file, bounded memory)."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from pathlib import Path


class _Sink:
    """A write-only, unseekable stream: zipfile then writes data descriptors and never seeks back."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def regular_files(directory: Path) -> Iterator[Path]:
    """Files under `directory`, never through a symbolic link: a runner's output may hold links to /etc."""
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = Path(root, name)
            if not path.is_symlink() and path.is_file():
                yield path


def zip_chunks(directory: Path, top: str) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in regular_files(directory):
            archive.write(path, f"{top}/{path.relative_to(directory).as_posix()}")
            yield sink.take()
    yield sink.take()
