"""OpenViVQA dataset builder package (TFDS folder convention: `tfds build tfds_builders/openvivqa`)."""

from __future__ import annotations

from .openvivqa_dataset_builder import Builder, OpenVivqaConfig

__all__ = ["Builder", "OpenVivqaConfig"]
