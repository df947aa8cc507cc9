"""A job's whole artifact directory as a zip, streamed while it is written (no temporary file, bounded memory)."""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

from runners.untrusted_files import CHUNK, open_file


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


def regular_files(directory: Path) -> Iterator[str]:
    """Paths (relative) of the files under `directory`, never through a symbolic link: an older attempt's output
    may hold links to /etc or FIFOs (each is opened again, without following links, when it is zipped)."""
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            yield Path(root, name).relative_to(directory).as_posix()


def zip_chunks(directory: Path, top: str) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for relative in regular_files(directory):
            try:
                source = open_file(directory, relative)
            except OSError:
                continue  # a link, a FIFO or a device: not a file to hand out
            with source, archive.open(f"{top}/{relative}", "w", force_zip64=True) as target:
                shutil.copyfileobj(source, target, CHUNK)
            yield sink.take()
    yield sink.take()
