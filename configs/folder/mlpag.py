"""MLPAG on your own photos: a folder of images and a CSV or JSON file of (image, question, answer) rows, built by
``tfds_builders/vqa_folder`` (layout and formats: docs/datasets.md, "Your own photos").

Usage::

    python -m openvivqa_jax.main --config configs/folder/mlpag.py --workdir runs/my_photos \
        --config.data.manual_dir=~/my_photos

The model sees the photos as the main job (configs/default.py) sees its pictures, with no detector: class-free
region proposals from the pixels (``model.vision.kind = "proposals"``, the 64 largest segments of the photo
resized to 128x96) and each OCR token's box as a learned 2-D position embedding (``box_grid``). Everything else
is configs/synthetic/base.py: the small MLPAG (d_model 128), 2,000 steps of batch 32; the CNN over the pixels
instead: ``--config.model.vision.kind=cnn``. A train split of fewer than 32 questions stops with a one-line
error: lower the batch, e.g. ``--config.train.batch_size=4``. Splits: ``train``, ``validation`` (the dev
split: periodic scores, best checkpoint) and ``test``; where the folder has no validation or test file, the
builder holds out 10% of the train photos for each.

OCR: none, unless the folder has an ``ocr.json`` (builder config ``default``); with
``--config.data.builder_config=tesseract`` (or ``detector_tesseract``) the builder reads the text in the photos at
build time, and ``--config.eval.ocr_ablation=True`` also scores the test split with the OCR tokens masked out.

Answers are scored with exact match and token F1 besides BLEU, ROUGE-L and CIDEr; the best checkpoint is chosen by
F1, which scores each question on its own: CIDEr weighs n-grams by their rarity over the dev split's references,
so it is 0 by construction on a one-question split and noisy on a few dozen (a held-out 10% of a small folder).
The copy rate of unseen shop names is the synthetic set's probe and is off. A folder's build
is rebuilt when its files change (``data.rebuild``), so editing the CSV and running again uses the new rows.
"""

import ml_collections

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)
#: The metrics computed at every evaluation (names of :mod:`openvivqa_jax.evaluation`).
FOLDER_METRICS = ("EM", "F1", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")


def get_config() -> ml_collections.ConfigDict:
    """Returns the config that trains the main job's MLPAG (its proposals, not its synthetic-set training) on a
    folder of photos."""
    c = load_config("../synthetic/base.py", relative_to=__file__)
    # data.manual_dir is required: --config.data.manual_dir=<folder with train.csv (or .json) and the photos>
    common.use_dataset(c.data, "vqa_folder", eval_split="validation")
    # One data_dir holds the build of whichever folder was used last: a changed folder is rebuilt (logged) instead
    # of stopping with StaleDatasetError.
    c.data.rebuild = True
    c.model.vision.kind = "proposals"
    c.model.ocr_features = ("phoc", "appearance", "box_grid", "order")
    c.eval.metrics = FOLDER_METRICS
    c.train.best_metric = "F1"
    c.eval.ocr_ablation = False  # no OCR tokens unless the folder has ocr.json or an OCR builder config is chosen
    c.evals.ocr_ratio.enabled = c.eval.get_ref("ocr_ablation")  # it compares test with test_no_ocr
    c.evals.copy_rate.enabled = False  # unseen shop names: a probe of the synthetic set only
    return c
