"""EVJVQA dataset builder package (TFDS folder convention: `tfds build tfds_builders/evjvqa`)."""

from __future__ import annotations

from .evjvqa_dataset_builder import Builder, EvjvqaConfig

__all__ = ["Builder", "EvjvqaConfig"]
