"""On-disk cache entries of compiled kernels, shared by the runtimes (cpu.py, cuda.py).

Stage 6 of the flow (the device runtimes keep what they compiled for the next process). Each
entry is the SHA-256 of its payload followed by the payload, written under a temporary name and
renamed, so a process never reads a half-written entry while another writes it; a truncated,
garbled or foreign file fails its checksum and reads as absent: the kernel is compiled again and
the entry rewritten (reported once per process, at warning level).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("torch_zyx")

_DIGEST_BYTES = 32


def _package_version() -> str:
    try:
        return importlib.metadata.version("torch_zyx")
    except importlib.metadata.PackageNotFoundError:  # (a source tree on sys.path)
        return "source"


# Part of every entry's key: what the runtimes add to a kernel's code may change with it.
PACKAGE_VERSION = _package_version()
_reported: set[str] = set()  # directories whose corrupt entries were reported


def write_entry(path: Path, payload: bytes) -> None:
    """``payload`` under its checksum at ``path``, atomically (write, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_entry(path: Path) -> bytes | None:
    """The payload stored at ``path``, or None when it is missing or fails its checksum."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, payload = data[:_DIGEST_BYTES], data[_DIGEST_BYTES:]
    if payload and hashlib.sha256(payload).digest() == digest:
        return payload
    directory = str(path.parent)
    if directory not in _reported:
        _reported.add(directory)
        log.warning("zyx: ignoring the corrupt kernel cache entry %s (compiled again; further ones in that "
                    "directory are not reported)", path)
    return None
