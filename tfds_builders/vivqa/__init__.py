"""ViVQA dataset builder package (TFDS folder convention: `tfds build tfds_builders/vivqa`)."""

from __future__ import annotations

from .vivqa_dataset_builder import Builder, VivqaConfig

__all__ = ["Builder", "VivqaConfig"]
