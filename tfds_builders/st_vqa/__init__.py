"""ST-VQA dataset builder package (TFDS folder convention: `tfds build tfds_builders/st_vqa`)."""

from __future__ import annotations

from .st_vqa_dataset_builder import Builder, StVqaConfig

__all__ = ["Builder", "StVqaConfig"]
