"""The files of an image or speech corpus: a folder (recursively), a zip archive, or one file."""
from __future__ import annotations

import zipfile
from pathlib import Path

from ..errors import InputError


def _wanted(name: str, suffixes: tuple[str, ...]) -> bool:
    p = Path(name)
    return p.suffix.lower() in suffixes and not p.name.startswith(".")


def member_files(path: Path, suffixes: tuple[str, ...], what: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of every file with one of `suffixes`, sorted by name; hidden files are skipped.

    Names are relative to the folder or archive. `what` names the kind of file in the error raised
    when there is none ("images", "audio files")."""
    items: list[tuple[str, bytes]] = []
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file() and _wanted(p.name, suffixes):
                items.append((str(p.relative_to(path)), p.read_bytes()))
    elif path.suffix.lower() == ".zip":
        try:
            with zipfile.ZipFile(path) as z:
                for info in sorted(z.infolist(), key=lambda i: i.filename):
                    if not info.is_dir() and _wanted(info.filename, suffixes):
                        items.append((info.filename, z.read(info)))
        except zipfile.BadZipFile:
            raise InputError(f"{path.name} is not a valid zip archive.") from None
    elif path.is_file() and path.suffix.lower() in suffixes:
        items.append((path.name, path.read_bytes()))
    if not items:
        raise InputError(f"{path.name} holds no {what} ({', '.join(suffixes)}).")
    return items
