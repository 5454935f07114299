"""A content-addressed on-disk cache shared by processes (pytest-xdist workers).

Entries are written to a temporary file and renamed into place (atomic on POSIX),
with a SHA-256 of the content beside them; an entry whose digest does not match
is treated as missing and rebuilt, never trusted."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..config import config
from ..errors import FusionCompilerError


def cache_dir() -> Path:
    d = Path(config.cache_dir).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FusionCompilerError(f"the kernel cache directory {d} cannot be created ({e.strerror}); "
                                  "set FUSION_CACHE_DIR to a writable directory") from e
    return d


def content_hash(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:32]


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_entry(path: Path, data: bytes) -> None:
    """Write an entry and then its digest: a reader that finds both finds them whole."""
    atomic_write(path, data)
    atomic_write(path.with_name(path.name + ".sha256"), hashlib.sha256(data).hexdigest().encode())


def valid_entry(path: Path) -> bool:
    digest = path.with_name(path.name + ".sha256")
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest.read_text().strip()
    except OSError:
        return False
