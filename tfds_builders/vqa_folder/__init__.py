"""Builder package for any folder of photos with CSV or JSON question rows (TFDS folder convention:
`tfds build tfds_builders/vqa_folder`)."""

from __future__ import annotations

from .vqa_folder_dataset_builder import Builder, VqaFolderConfig

__all__ = ["Builder", "VqaFolderConfig"]
