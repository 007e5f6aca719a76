"""Reader of CTranslate2's `model.bin` (binary format version 6): named tensors, nothing else.

Layout (little endian): u32 version, str spec name, u32 spec revision, u32 n variables, then per
variable: str name, u8 rank, u32 dims[rank], u8 dtype, u32 n bytes, data; then u32 n aliases and
(str alias, str target) pairs. A str is a u16 length (NUL included) and the bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

# CTranslate2 DataType enum -> numpy
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def _u(f: BinaryIO, fmt: str):
    size = struct.calcsize("<" + fmt)
    raw = f.read(size)
    if len(raw) != size:
        raise ValueError("truncated CTranslate2 model file")
    return struct.unpack("<" + fmt, raw)


def _str(f: BinaryIO) -> str:
    (n,) = _u(f, "H")
    return f.read(n)[:-1].decode("utf-8")


def read_ct2(path_or_parts: Path | str | list) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, {variable name: array}) of a CTranslate2 model; aliases resolved.

    `path_or_parts` may be a list of files that together are one model.bin (a split package).
    """
    parts = path_or_parts if isinstance(path_or_parts, (list, tuple)) else [path_or_parts]
    import io

    if len(parts) == 1:
        f: BinaryIO = open(parts[0], "rb")
    else:
        f = io.BytesIO(b"".join(Path(p).read_bytes() for p in parts))
    with f:
        (version,) = _u(f, "I")
        if version != 6:
            raise ValueError(f"unsupported CTranslate2 model version {version} (expected 6)")
        spec = _str(f)
        _u(f, "I")  # spec revision
        (n,) = _u(f, "I")
        out: dict[str, np.ndarray] = {}
        for _ in range(n):
            name = _str(f)
            (rank,) = _u(f, "B")
            dims = _u(f, "I" * rank) if rank else ()
            dtype, nbytes = _u(f, "B")[0], _u(f, "I")[0]
            if dtype not in _DTYPES:
                raise ValueError(f"{name}: unsupported CTranslate2 dtype {dtype}")
            raw = f.read(nbytes)
            if len(raw) != nbytes:
                raise ValueError(f"truncated CTranslate2 model file (variable {name!r})")
            arr = np.frombuffer(raw, dtype=_DTYPES[dtype])
            out[name] = arr.reshape(dims) if rank else arr.reshape(())
        (na,) = _u(f, "I")
        for _ in range(na):
            alias, target = _str(f), _str(f)
            out[alias] = out[target]
    return spec, out
