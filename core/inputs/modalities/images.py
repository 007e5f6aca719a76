"""Image corpora: the sample photographs of scikit-image and scikit-learn, seeded random crops of
them, or a folder / zip of the user's images.

An image corpus is a list of `Picture`s (name, RGB uint8 array, source image index). Crops of one
photograph share its source index: like two windows of one document, they are not different
contexts for the cross-image statistics.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...base.errors import InputError
from ...base.settings import current as current_settings
from .files import member_files

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
# scikit-image's sample images that are photographs or micrographs, available without a download
# (the synthetic ones, checkerboard, colorwheel, logo, phantom, are left out)
SKIMAGE_NATURAL = ("astronaut", "brick", "camera", "cat", "cell", "chelsea", "clock", "coffee", "coins", "grass",
                   "gravel", "hubble_deep_field", "immunohistochemistry", "microaneurysms", "moon", "page", "retina",
                   "rocket", "stereo_motorcycle", "text")
CROPS_PER_IMAGE = 24  # images-crops: seeded square crops of each photograph
CROP_MIN_FRACTION = 0.3  # smallest crop side, as a fraction of the image's shorter side


@dataclass(frozen=True)
class Picture:
    """One image. A user's file is kept as its bytes (header checked) and decoded when used, so only
    the images a budget takes are ever decoded, one batch at a time."""

    name: str
    data: np.ndarray | bytes  # (H, W, 3) uint8, or the file's bytes
    source: int  # index of the photograph it comes from (its "document")

    @property
    def pixels(self) -> np.ndarray:
        """(H, W, 3) uint8."""
        return self.data if isinstance(self.data, np.ndarray) else _decode(self.name, self.data)


def to_rgb(a: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 of a grey, RGBA, boolean or float image."""
    a = np.asarray(a)
    if a.dtype == bool:
        a = a.astype(np.uint8) * 255
    elif a.dtype != np.uint8:
        a = np.clip(a * (255.0 if a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    if a.ndim != 3 or a.shape[-1] not in (3, 4):
        raise ValueError(f"not an image array: shape {a.shape}")
    return np.ascontiguousarray(a[..., :3])


def sample_photographs() -> list[Picture]:
    """The 22 photographs shipped by scikit-image (20) and scikit-learn (china, flower)."""
    import skimage.data as D
    from sklearn.datasets import load_sample_images

    out = []
    for name in SKIMAGE_NATURAL:
        a = getattr(D, name)()
        a = a[0] if isinstance(a, tuple) else a  # stereo_motorcycle: (left, right, disparity)
        out.append(Picture(f"skimage:{name}", to_rgb(a), len(out)))
    sk = load_sample_images()
    for fname, a in zip(sk.filenames, sk.images):
        out.append(Picture(f"sklearn:{Path(fname).stem}", to_rgb(a), len(out)))
    return out


def random_crops(pictures: list[Picture], per_image: int = CROPS_PER_IMAGE, seed: int = 0) -> list[Picture]:
    """Seeded square crops (side between CROP_MIN_FRACTION and 1 of the shorter side) of each picture."""
    rng = np.random.default_rng([seed, 7])
    out = []
    for p in pictures:
        H, W, _ = p.pixels.shape
        short = min(H, W)
        for j in range(per_image):
            s = int(rng.integers(max(16, int(short * CROP_MIN_FRACTION)), short + 1))
            y, x = int(rng.integers(0, H - s + 1)), int(rng.integers(0, W - s + 1))
            out.append(Picture(f"{p.name} crop {j} ({x},{y},{s}px)", p.pixels[y:y + s, x:x + s], p.source))
    return out


def _too_large(name: str, size: str, max_pixels: int) -> InputError:
    return InputError(f"{name} is too large an image ({size}): at most {max_pixels:,} pixels per image "
                      f"(ANISO_MAX_IMAGE_PIXELS). Nothing was decoded; resize it and try again.")


def _open(name: str, raw: bytes, max_pixels: int | None):
    """The opened image (PIL reads only the header here), after checking its dimensions."""
    from PIL import Image, UnidentifiedImageError

    limit = current_settings().max_image_pixels if max_pixels is None else max_pixels
    try:
        with warnings.catch_warnings():  # the size is checked below, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(raw))  # lazy: the pixels are decoded by load()/convert()
    except Image.DecompressionBombError as e:  # PIL's own refusal (over 2 x its MAX_IMAGE_PIXELS), from the header
        import re

        m = re.search(r"\((\d+) pixels\)", str(e))
        raise _too_large(name, f"{int(m.group(1)):,} pixels" if m else "more pixels than PIL opens", limit) from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InputError(f"{name} is not a readable image ({type(e).__name__}).") from None
    w, h = im.size
    if w * h > limit:
        im.close()
        raise _too_large(name, f"{w:,} x {h:,} = {w * h:,} pixels", limit)
    return im


def check_image(name: str, raw: bytes, max_pixels: int | None = None) -> tuple[int, int]:
    """(width, height) from the header; InputError when it is not an image or over the pixel limit."""
    with _open(name, raw, max_pixels) as im:
        return im.size


def _decode(name: str, raw: bytes, max_pixels: int | None = None) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    with _open(name, raw, max_pixels) as im:
        try:
            with warnings.catch_warnings():  # the size is checked above, against our own limit
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                return to_rgb(np.asarray(im.convert("RGB")))
        except (UnidentifiedImageError, OSError, ValueError) as e:
            raise InputError(f"{name} is not a readable image ({type(e).__name__}).") from None


def read_image_files(path: Path, settings=None) -> list[Picture]:
    """Every image in a folder (recursively, sorted by path) or a zip archive: sizes and headers are
    checked now (core.base.settings' limits), the pixels decoded when an image is used."""
    st = settings or current_settings()
    items = member_files(path, IMAGE_SUFFIXES, "images", st.max_unpacked_bytes)
    for n, raw in items:
        check_image(n, raw, st.max_image_pixels)
    return [Picture(n, raw, i) for i, (n, raw) in enumerate(items)]


def pictures_fingerprint(pictures: list[Picture]) -> str:
    h = hashlib.sha256()
    for p in pictures:
        h.update(p.name.encode())
        h.update(str(p.pixels.shape).encode())
        h.update(p.pixels.tobytes())
        h.update(str(p.source).encode())
    return h.hexdigest()

