"""TextVQA dataset builder package (TFDS folder convention: `tfds build tfds_builders/textvqa`)."""

from __future__ import annotations

from .textvqa_dataset_builder import Builder, TextVqaConfig

__all__ = ["Builder", "TextVqaConfig"]
