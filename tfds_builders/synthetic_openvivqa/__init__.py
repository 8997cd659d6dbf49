"""Embedded synthetic OpenViVQA dataset (docs/design.md §3): TFDS builder plus the pure-Python generator behind it."""

from __future__ import annotations

from tfds_builders.synthetic_openvivqa.synthetic_openvivqa_dataset_builder import Builder, SyntheticOpenVivqaConfig

__all__ = ["Builder", "SyntheticOpenVivqaConfig"]
