"""Image decoding for worker processes (light imports: numpy, PIL, scikit-image; no JAX), used by
:mod:`openvivqa_jax.data.model_ready` to decode each distinct image of a split once, or to make its class-free
region proposals once (vision kind ``proposals``)."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from openvivqa_jax.data import images
from openvivqa_jax.data.proposals import padded_proposals


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


def proposals_into(paths: dict, items: list, settings: dict) -> tuple[list[tuple[int, str]], int]:
    """:func:`openvivqa_jax.data.proposals.padded_proposals` of each ``(row, name, encoded bytes)`` of
    ``items`` (``settings``: its keyword arguments but the picture), written at row ``row`` of the raw files
    ``paths["region_features"]`` (float32), ``paths["region_boxes"]`` (float32) and ``paths["region_mask"]``
    (bool), which exist; rows may arrive in any order and from several processes.

    Returns:
      ``(errors, beyond)``: ``(row, message)`` for each picture that could not be decoded (rows left unwritten),
      and the number of segments beyond ``num_regions`` over the job's pictures.
    """
    errors, beyond = [], 0
    fds = {k: os.open(p, os.O_WRONLY) for k, p in paths.items()}
    try:
        for row, name, data in items:
            try:
                f, b, m, n = padded_proposals(data, name, **settings)
            except images.ImageDecodeError as e:
                errors.append((row, str(e)))
                continue
            beyond += max(0, n - settings["num_regions"])
            for key, arr in (("region_features", f), ("region_boxes", b), ("region_mask", m)):
                raw = np.ascontiguousarray(arr).tobytes()
                os.pwrite(fds[key], raw, row * len(raw))
    finally:
        for fd in fds.values():
            os.close(fd)
    return errors, beyond
