"""Image decoding for worker processes (light imports: numpy, PIL; no JAX), used by
:mod:`openvivqa_jax.data.model_ready` to decode each distinct image of a split once."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from openvivqa_jax.data import images


def decode_into(path: str, items: list, width: int, height: int, max_pixels: int) -> list[tuple[int, str]]:
    """Decodes and resizes each ``(row, name, encoded bytes)`` of ``items`` and writes the ``(height, width, 3)``
    uint8 pixels at byte ``row * height * width * 3`` of the raw file ``path`` (it exists; rows may arrive in
    any order and from several processes, each row written by one).

    The pixels are :func:`openvivqa_jax.data.images.decode_image` (EXIF orientation, alpha onto white, 16-bit
    by range) followed by PIL's bilinear resize, as ``Preprocessor`` makes them.

    Returns:
      ``(row, message)`` for each image that could not be decoded (the
      :class:`~openvivqa_jax.data.images.ImageDecodeError`'s one line); those rows are left unwritten.
    """
    errors = []
    per = width * height * 3
    fd = os.open(path, os.O_WRONLY)
    try:
        for row, name, data in items:
            try:
                rgb = images.decode_image(data, name=name, max_pixels=max_pixels).pil
            except images.ImageDecodeError as e:
                errors.append((row, str(e)))
                continue
            arr = np.ascontiguousarray(np.asarray(rgb.resize((width, height), Image.BILINEAR), np.uint8))
            os.pwrite(fd, arr.tobytes(), row * per)
    finally:
        os.close(fd)
    return errors
