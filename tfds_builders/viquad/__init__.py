"""UIT-ViQuAD dataset builder package (TFDS folder convention: `tfds build tfds_builders/viquad`)."""

from __future__ import annotations

from .viquad_dataset_builder import Builder, ViquadConfig

__all__ = ["Builder", "ViquadConfig"]
