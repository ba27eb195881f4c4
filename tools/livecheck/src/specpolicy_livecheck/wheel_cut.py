"""Cut members out of a wheel, keeping it a wheel pip installs: the offline bundles travel to the GPU host
in 64 MiB calls, and some wheels carry what no engine process loads (xgrammar's 65 MB static library for
C++ builds against it beside the bindings Python imports).

A cut is a glob over the wheel's member names (``fnmatch``, so ``*`` spans ``/``). The members it matches
leave the archive and their lines leave ``RECORD``; a glob that matches nothing is an error, so a release
whose wheel moved a file does not ship it uncut unnoticed. ``.dist-info`` members cannot be cut.

Usage: ``python3 -m specpolicy_livecheck.wheel_cut WHEEL GLOB [GLOB ...]`` (rewrites WHEEL in place and
prints what it cut).
"""

from __future__ import annotations

import fnmatch
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Cut", "cut", "main"]


@dataclass(frozen=True)
class Cut:
    """What one rewrite removed: members, their uncompressed and archived bytes."""

    members: int
    raw_bytes: int
    archived_bytes: int


def cut(wheel: Path, globs: tuple[str, ...]) -> Cut:
    """Rewrite ``wheel`` without the members any of ``globs`` matches; a ValueError names a glob that
    matches nothing or one that reaches into ``.dist-info``."""
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        dropped = {i.filename for i in infos if any(fnmatch.fnmatchcase(i.filename, g) for g in globs)}
        for g in globs:
            hits = [n for n in dropped if fnmatch.fnmatchcase(n, g)]
            if not hits:
                raise ValueError(f"{wheel.name}: cut {g!r} matches no member")
            meta = [n for n in hits if n.split("/", 1)[0].endswith(".dist-info")]
            if meta:
                raise ValueError(f"{wheel.name}: cut {g!r} reaches the metadata ({meta[0]})")
        records = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise ValueError(f"{wheel.name}: not a wheel (no single .dist-info/RECORD)")
        record = records[0]
        fd, tmp = tempfile.mkstemp(prefix=".cut-", suffix=".whl", dir=wheel.parent)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w") as out:
                for i in infos:
                    if i.filename in dropped:
                        continue
                    data = z.read(i)
                    if i is record:
                        lines = data.decode().splitlines(keepends=True)
                        data = "".join(ln for ln in lines if ln.split(",", 1)[0] not in dropped).encode()
                    out.writestr(i, data, compress_type=i.compress_type)
            os.replace(tmp, wheel)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        gone = [i for i in infos if i.filename in dropped]
        return Cut(len(gone), sum(i.file_size for i in gone), sum(i.compress_size for i in gone))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python3 -m specpolicy_livecheck.wheel_cut WHEEL GLOB [GLOB ...]", file=sys.stderr)
        return 2
    wheel = Path(args[0])
    try:
        res = cut(wheel, tuple(args[1:]))
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        print(f"wheel_cut: {exc}", file=sys.stderr)
        return 3
    print(f"{wheel.name}: cut {res.members} members, {res.raw_bytes} bytes ({res.archived_bytes} archived)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
