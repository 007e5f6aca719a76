"""The files of an image or speech corpus: a folder (recursively), a zip archive, or one file.

Sizes are checked before anything is read or decompressed: a folder's file sizes, or a zip's
declared sizes (Python's zipfile never returns more than a member's declared size, so the declared
total bounds what decompression can produce).
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from ...base.errors import InputError


def _wanted(name: str, suffixes: tuple[str, ...]) -> bool:
    p = Path(name)
    return p.suffix.lower() in suffixes and not p.name.startswith(".")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


def check_unpacked(total: int, name: str, max_bytes: int | None, setting: str = "ANISO_MAX_UNPACKED_MB") -> None:
    """InputError when `total` bytes (uncompressed) exceed `max_bytes` (None: no limit); `setting` names the
    variable that sets `max_bytes`."""
    if max_bytes is not None and total > max_bytes:
        what = "for one upload" if setting == "ANISO_MAX_UPLOAD_MB" else "for the files of one corpus"
        shown = _mib(total) if _mib(total) != _mib(max_bytes) else f"{total / 2**20:,.2f} MiB"  # never "1 MiB > 1 MiB"
        raise InputError(f"{name} unpacks to {shown}, more than the limit of {_mib(max_bytes)} {what} "
                         f"({setting}): nothing was decompressed.")


def zip_members(z: zipfile.ZipFile, suffixes: tuple[str, ...], name: str, max_bytes: int | None) -> list:
    """The wanted members of an open archive, sorted by name, after checking their declared sizes."""
    infos = sorted((i for i in z.infolist() if not i.is_dir() and _wanted(i.filename, suffixes)),
                   key=lambda i: i.filename)
    check_unpacked(sum(i.file_size for i in infos), name, max_bytes)
    return infos


def member_files(path: Path, suffixes: tuple[str, ...], what: str,
                 max_bytes: int | None = None) -> list[tuple[str, bytes]]:
    """(name, bytes) of every file with one of `suffixes`, sorted by name; hidden files are skipped.

    Names are relative to the folder or archive. `what` names the kind of file in the error raised
    when there is none ("images", "audio files"). More than `max_bytes` in all is refused before
    anything is read."""
    items: list[tuple[str, bytes]] = []
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if p.is_file() and _wanted(p.name, suffixes)]
        check_unpacked(sum(p.stat().st_size for p in files), path.name, max_bytes)
        items = [(str(p.relative_to(path)), p.read_bytes()) for p in files]
    elif path.suffix.lower() == ".zip":
        try:
            with zipfile.ZipFile(path) as z:
                items = [(i.filename, z.read(i)) for i in zip_members(z, suffixes, path.name, max_bytes)]
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as e:  # damaged, unknown method, encrypted
            why = str(e).splitlines()[0] if str(e) else "damaged"
            raise InputError(f"{path.name} is not a valid zip archive ({why}).") from None
    elif path.is_file() and path.suffix.lower() in suffixes:
        check_unpacked(path.stat().st_size, path.name, max_bytes)
        items.append((path.name, path.read_bytes()))
    if not items:
        raise InputError(f"{path.name} holds no {what} ({', '.join(suffixes)}).")
    return items
