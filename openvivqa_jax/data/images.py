"""The one image decoder of the project: builders, the training input pipeline and predict all use it.

:func:`decode_image` turns an image file (path or encoded bytes) into the RGB pixels that every path
sees, so a photo cannot train sideways and predict upright. The rules, in order:

1. **Refusals before decoding.** An empty (0-byte) file, a file PIL cannot identify, an image whose
   header announces more than ``max_pixels`` pixels (a decompression bomb: a 14000x13000 PNG is a few
   kilobytes on disk and 546 MB decoded) or whose shorter side is below ``min_side`` pixels is refused
   with one :class:`ImageDecodeError` line naming the file and the question. The size comes from the
   header (PIL opens lazily), so a bomb is never decoded.
2. **Full decode.** ``Image.load()`` reads every pixel, so a truncated or corrupt file fails here (one
   line), not later in training. This does not depend on PIL's process-wide ``ImageFile.LOAD_TRUNCATED_IMAGES``
   (which other libraries set to True, TFDS's notebook display among them, and which makes PIL return a
   truncated image padded with grey): the flag is held False while any :func:`decode_image` call loads
   pixels (:func:`_truncated_images_refused`, reference-counted across threads, restored afterwards), and
   JPEG and PNG files are checked for their end themselves (an EOI marker after the last start-of-scan; an
   ``IEND`` chunk after the last ``IDAT``).
3. **EXIF orientation** (tag 0x0112, values 2-8) is applied with ``PIL.ImageOps.exif_transpose``: a JPEG
   stored rotated with Orientation 6 is returned upright.
4. **16-bit and 32-bit grayscale** (modes ``I;16*``, ``I``, ``F``) are scaled to 8 bits *by their range*:
   ``round(255 * (v - min) / (max - min))``; a constant image maps by the type's full range
   (``v / 65535``). Clipping (what ``convert("L")`` does) turns a 16-bit photo white.
5. **Transparency** (``RGBA``, ``LA``, ``La``, ``RGBa``, ``PA``, and ``P``/``L``/``RGB`` with a
   ``transparency`` entry) is composited onto white: ``out = alpha * rgb + (1 - alpha) * 255``.
   Black text on a fully transparent background stays readable (a plain ``convert("RGB")`` drops the
   alpha and shows whatever colour the transparent pixels happen to hold, often black on black).
6. **Everything else** (``CMYK``, ``P``, ``L``, ``1``, ``YCbCr``, ``LAB``, ``HSV``, ``I;16`` after step 4)
   goes to ``RGB`` with PIL's converters; a plain RGB image is returned unchanged, pixel for pixel.

:func:`encode_for_storage` gives the bytes a builder stores: the file's own bytes when they already
decode to the canonical pixels (an RGB JPEG/PNG without an EXIF rotation), else a lossless PNG of the
canonical pixels. Decoding the stored bytes with :func:`decode_image` therefore gives exactly the
pixels that predict gets from the original file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import threading
import warnings
from typing import Any

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from openvivqa_jax.errors import UserError

__all__ = [
    "ImageDecodeError",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MIN_SIDE",
    "DecodedImage",
    "decode_image",
    "to_rgb",
    "encode_for_storage",
]

#: Largest image accepted (width x height pixels), judged from the header before decoding: about a
#: 50-megapixel photo. PIL's own guard warns at 89 MP and raises a traceback at 179 MP.
DEFAULT_MAX_PIXELS = 50_000_000
#: Smallest shorter side accepted (pixels). Below this an image holds no readable scene text and
#: not one 8x8 cell of the CNN/ViT grid at full resolution.
DEFAULT_MIN_SIDE = 8

_ORIENTATION_TAG = 0x0112


class ImageDecodeError(UserError, ValueError):
    """An image that cannot be used; the message is one line naming the file, the question and why."""


@dataclasses.dataclass
class DecodedImage:
    """The result of :func:`decode_image`.

    Attributes:
      pil: the canonical RGB ``PIL.Image.Image`` (mode ``"RGB"``, 8 bits per channel).
      canonical_source: True when the source bytes are a plain 8-bit RGB JPEG or PNG without an EXIF
        rotation, i.e. they decode to these pixels as they are (:func:`encode_for_storage` keeps them).
      format: the source format named by PIL (``"JPEG"``, ``"PNG"``, ...).
    """

    pil: Image.Image
    canonical_source: bool
    format: str | None

    @property
    def array(self) -> np.ndarray:
        """The pixels, uint8 ``(height, width, 3)``."""
        return np.asarray(self.pil, np.uint8)


_flag_lock = threading.Lock()
_flag_users = 0
_flag_saved = False


@contextlib.contextmanager
def _truncated_images_refused():
    """Holds ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` False while pixels are loaded, then restores the caller's
    value once no decode of this module is in flight (a count, so threads decoding at once never restore it
    under each other)."""
    global _flag_users, _flag_saved
    with _flag_lock:
        if _flag_users == 0:
            _flag_saved = ImageFile.LOAD_TRUNCATED_IMAGES
        _flag_users += 1
        ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        with _flag_lock:
            _flag_users -= 1
            if _flag_users == 0:
                ImageFile.LOAD_TRUNCATED_IMAGES = _flag_saved


def incomplete_reason(raw: bytes, fmt: str | None) -> str | None:
    """Why an encoded JPEG or PNG is cut short, or None (complete, or another format).

    JPEG: an EOI marker (``FF D9``) must follow the last start-of-scan (``FF DA``; entropy-coded data cannot
    hold ``FF D9``, as a data byte ``FF`` is stuffed as ``FF 00``). PNG: an ``IEND`` chunk must follow the last
    ``IDAT`` chunk.
    """
    if fmt in ("JPEG", "MPO"):
        sos = raw.rfind(b"\xff\xda")
        if sos >= 0 and raw.find(b"\xff\xd9", sos + 2) < 0:
            return "truncated JPEG: no end-of-image marker after the last scan"
    elif fmt == "PNG":
        if raw.rfind(b"IEND") < raw.rfind(b"IDAT"):
            return "truncated PNG: no IEND chunk after the image data"
    return None


def _where(name: str, question: str | None) -> str:
    return f"image {name}" + (f" (question {question!r})" if question else "")


def _scale_by_range(im: Image.Image) -> Image.Image:
    """16/32-bit grayscale -> ``L`` by the pixel range (rule 4 of the module doc)."""
    arr = np.asarray(im).astype(np.float64)
    lo, hi = float(arr.min()), float(arr.max())
    if hi > lo:
        out = (arr - lo) * (255.0 / (hi - lo))
    else:  # a constant image: by the 16-bit range
        out = np.clip(arr, 0, 65535) * (255.0 / 65535.0)
    return Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8), mode="L")


def _composite_on_white(im: Image.Image) -> Image.Image:
    """An image with alpha -> RGB over a white background (rule 5 of the module doc)."""
    rgba = np.asarray(im.convert("RGBA"), np.float64)
    alpha = rgba[..., 3:4] / 255.0
    out = rgba[..., :3] * alpha + 255.0 * (1.0 - alpha)
    return Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8), mode="RGB")


def to_rgb(im: Image.Image) -> Image.Image:
    """Converts a decoded PIL image to canonical RGB: EXIF orientation, 16-bit by range, transparency
    onto white, CMYK/palette/grayscale to RGB (rules 3-6 of the module doc).

    Args:
      im: a loaded PIL image of any mode.

    Returns:
      A mode ``"RGB"`` image (the same object's pixels, copied, when ``im`` is plain RGB and upright).
    """
    exif_orientation = im.getexif().get(_ORIENTATION_TAG, 1)
    if exif_orientation not in (None, 1):
        im = ImageOps.exif_transpose(im)
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        im = _scale_by_range(im)
    has_alpha = im.mode in ("RGBA", "LA", "La", "RGBa", "PA") or (
        im.mode in ("P", "L", "RGB") and "transparency" in im.info)
    if has_alpha:
        return _composite_on_white(im)
    if im.mode != "RGB":
        return im.convert("RGB")
    return im.copy()


def decode_image(source: str | os.PathLike | bytes, *, name: str | None = None, question: str | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int = DEFAULT_MIN_SIDE) -> DecodedImage:
    """Decodes an image file or encoded bytes into canonical RGB pixels (module doc).

    Args:
      source: a file path, or the encoded bytes (JPEG, PNG, BMP, GIF, TIFF, WebP, ...).
      name: how errors name the image (default: the path, or ``"<bytes>"``).
      question: the question (id or text) the image belongs to, named in errors.
      max_pixels: the largest ``width * height`` accepted, checked from the header.
      min_side: the smallest shorter side accepted, pixels.

    Returns:
      A :class:`DecodedImage`; ``.pil`` is RGB ``(height, width, 3)`` after the EXIF rotation.

    Raises:
      ImageDecodeError: (one line, naming ``name`` and ``question``) missing or unreadable file, 0 bytes,
        not an image, over ``max_pixels``, below ``min_side``, truncated or corrupt pixel data.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        where = _where(name or "<bytes>", question)
    else:
        path = os.fspath(source)
        where = _where(name or path, question)
        if not os.path.exists(path):
            raise ImageDecodeError(f"{where}: file not found")
        if not os.path.isfile(path):
            raise ImageDecodeError(f"{where}: not a file")
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise ImageDecodeError(f"{where}: cannot read ({e.strerror or e})") from None
    if not raw:
        raise ImageDecodeError(f"{where}: empty file (0 bytes), not an image")
    old_limit = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = None  # opening reads the header only; the size is checked below
        im = Image.open(io.BytesIO(raw))
    except UnidentifiedImageError:
        raise ImageDecodeError(f"{where}: not a recognised image file ({len(raw)} bytes; PIL reads JPEG, PNG, "
                               "BMP, GIF, TIFF, WebP, ...)") from None
    except Exception as e:  # PIL raises OSError, SyntaxError, ValueError, struct.error on corrupt headers
        raise ImageDecodeError(f"{where}: cannot open ({type(e).__name__}: {_one_line(e)})") from None
    finally:
        Image.MAX_IMAGE_PIXELS = old_limit
    w, h = im.size
    if w * h > max_pixels:
        raise ImageDecodeError(f"{where}: {w}x{h} pixels ({w * h / 1e6:.0f} megapixels) is over the limit of "
                               f"{max_pixels / 1e6:g} megapixels (a decompression bomb or an oversized photo); "
                               "downscale it first")
    if min(w, h) < min_side:
        raise ImageDecodeError(f"{where}: {w}x{h} pixels is below the minimum of {min_side} pixels on the "
                               "shorter side")
    fmt = im.format
    cut = incomplete_reason(raw, fmt)
    if cut is not None:
        raise ImageDecodeError(f"{where}: cannot decode ({cut}; {len(raw)} bytes)")
    try:
        Image.MAX_IMAGE_PIXELS = max_pixels
        with warnings.catch_warnings(), _truncated_images_refused():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im.load()
            orientation = im.getexif().get(_ORIENTATION_TAG, 1)
            canonical = (fmt in ("JPEG", "PNG") and im.mode == "RGB" and orientation in (None, 1)
                         and "transparency" not in im.info)
            rgb = to_rgb(im)
    except Exception as e:  # truncated / corrupt data: OSError, SyntaxError, ValueError, struct.error...
        raise ImageDecodeError(f"{where}: cannot decode ({type(e).__name__}: {_one_line(e)})") from None
    finally:
        Image.MAX_IMAGE_PIXELS = old_limit
    return DecodedImage(pil=rgb, canonical_source=canonical, format=fmt)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def encode_for_storage(raw: bytes, decoded: DecodedImage) -> bytes:
    """The bytes a builder stores for an image: ``raw`` when it already decodes to ``decoded``'s pixels
    (``decoded.canonical_source``), else a lossless PNG of ``decoded.pil`` (compression level 6).

    Decoding the result with :func:`decode_image` gives exactly ``decoded.array``.
    """
    if decoded.canonical_source:
        return bytes(raw)
    buf = io.BytesIO()
    decoded.pil.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def source_bytes(source: Any) -> bytes:
    """The raw bytes of a path or bytes value (used with :func:`encode_for_storage`)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    with open(os.fspath(source), "rb") as f:
        return f.read()
