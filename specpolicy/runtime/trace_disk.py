"""The trace's file on disk: whole lines appended, rotated at ``max_bytes``, holding exactly what is counted.

- Writes go through ``os.write`` on an append-mode descriptor, so a full disk or a read-only directory loses
  exactly the records whose bytes did not land (a partial last line is cut off again).
- It never writes into a file it did not create: an existing file at the path (or at a backup's path) is
  appended to only when its first line is a specpolicy trace header, and anything else (a mistyped
  ``profile.json``) is refused, logged once and left as it is, its records counted as ``write_error``.
- A file deleted under it (its directory removed) is noticed after each write (its link count is 0): the
  directory and the file are created again and the lines rewritten there, so nothing is counted as written
  that exists nowhere.
- Rotation renames ``FILE`` -> ``FILE.1`` -> ... ``FILE.N``; a backup's place taken by another file is
  refused, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .trace_file import HEAD_BYTES, Partial, is_header, not_a_trace, os_error

__all__ = ["TraceDisk"]


class TraceDisk:
    """The file half of ``TraceWriter``: its descriptor, size and rotation, and the count of lines
    that landed (``written``). Run by the writer thread under the writer's I/O lock."""

    path: Path
    header: dict[str, Any]
    max_bytes: int
    backups: int
    rotations: int
    written: int
    _fd: int | None
    _size: int
    #: close() gave up on a stuck write and counted it dropped: what lands after that is taken back
    _abandoned: bool
    _writer_drops: dict[str, int]

    #: the writer's drop accounting (``TraceWriter._drop``): counts ``n`` records under ``cause``
    _drop: Callable[..., None]

    def _write_lines(self, lines: list[bytes]) -> None:
        """Write whole lines, rotating at max_bytes; counts exactly what landed and what did not."""
        i = j = 0
        fresh = False  # just rotated: the next line goes in even if it alone is over max_bytes
        retried = False  # lines already rewritten once after the file was deleted
        try:
            if lines and self._fd is None:
                self._open_file()
            while i < len(lines):
                j, size = i, self._size
                while j < len(lines) and (size + len(lines[j]) <= self.max_bytes or (j == i and fresh)):
                    size += len(lines[j])
                    j += 1
                if j == i:
                    self._rotate()
                    fresh = True
                    continue
                self._write_chunk(lines[i:j])
                if self._abandoned:  # close() has counted the rest; the file is no longer ours
                    return
                if self._deleted():  # the lines went to a file that exists nowhere: write them again
                    self.written -= j - i
                    self._close_fd()
                    if retried:
                        raise OSError(errno.ENOENT, "the trace file is deleted as soon as it is created")
                    retried = True
                    self._open_file()
                    continue
                i, fresh = j, False
        except Partial as exc:
            self._drop(self._writer_drops, "write_error", len(exc.lines) + len(lines) - j, exc.strerror or "")
            self._close_fd()  # reopen on the next batch: the disk may have room again
        except OSError as exc:
            self._drop(self._writer_drops, "write_error", len(lines) - i, os_error(exc))
            self._close_fd()

    def _write_chunk(self, lines: list[bytes]) -> None:
        fd = self._fd
        assert fd is not None
        data = b"".join(lines)
        done = 0
        try:
            while done < len(data):
                n = os.write(fd, data[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "write returned 0")
                done += n
                if self._abandoned:  # close() gave up on this write and counted it dropped: take it back
                    self._take_back(fd)
                    return
        except OSError as exc:
            # count the lines that landed whole; cut off a partial one so the file stays line-aligned
            whole, acc = 0, 0
            for line in lines:
                if acc + len(line) > done:
                    break
                acc += len(line)
                whole += 1
            if acc < done:
                try:
                    os.ftruncate(fd, self._size + acc)
                except OSError:
                    pass
            self._size += acc
            if not self._abandoned:
                self.written += whole
            raise Partial(lines[whole:], exc) from None
        self._size += done
        if not self._abandoned:
            self.written += len(lines)

    def _take_back(self, fd: int) -> None:
        """Cut the file back to its size before the abandoned write, so it holds what the counts say."""
        with contextlib.suppress(OSError):
            os.ftruncate(fd, self._size)
        self._close_fd()

    def _open_file(self) -> None:
        """Open the trace file for appending: a new or empty one gets the header; an existing one only when
        it is a specpolicy trace (else OSError, counted as ``write_error``). A missing directory is created
        again (it was removed while running)."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, flags, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                head = (json.dumps(self.header, separators=(",", ":"), default=str) + "\n").encode()
                os.write(fd, head)
                size = len(head)
            elif not is_header(os.pread(fd, HEAD_BYTES, 0)):
                raise OSError(
                    errno.EEXIST, not_a_trace(self.path) or f"{self.path} is not a specpolicy trace"
                )
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._size = size

    def _deleted(self) -> bool:
        """Whether the open file has no name left (deleted, or its directory removed)."""
        fd = self._fd
        try:
            return fd is not None and os.fstat(fd).st_nlink == 0
        except OSError:
            return False

    def _paths(self) -> list[Path]:
        """The file and its backups' paths."""
        return [self.path] + [
            self.path.with_name(f"{self.path.name}.{i}") for i in range(1, self.backups + 1)
        ]

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _rotate(self) -> None:
        self._close_fd()
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for p in self._paths()[1:]:  # a backup's place taken by another file: refuse, never replace it
                problem = not_a_trace(p)
                if problem:
                    raise OSError(errno.EEXIST, problem)
            for i in range(self.backups - 1, 0, -1):
                src = self.path.with_name(f"{self.path.name}.{i}")
                if src.exists():
                    os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1
        self._open_file()
