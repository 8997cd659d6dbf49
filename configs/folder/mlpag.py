"""MLPAG on your own photos: a folder of images and a CSV or JSON file of (image, question, answer) rows, built by
``tfds_builders/vqa_folder`` (layout and formats: docs/datasets.md, "Your own photos").

Usage::

    python -m openvivqa_jax.main --config configs/folder/mlpag.py --workdir runs/my_photos \
        --config.data.manual_dir=~/my_photos

The model sees the photos as the main job (configs/default.py) sees its pictures, with no detector: class-free
region proposals from the pixels (``model.vision.kind = "proposals"``, the 64 largest segments of the photo
resized to 128x96) and each OCR token's box as a learned 2-D position embedding (``box_grid``). Everything else
is configs/synthetic/base.py: the small MLPAG (d_model 128) at batch 32, with two settings of its own:

* the number of steps follows the folder's size: 20 epochs of its training questions, between 500 and 4,000 steps
  (``train.num_train_steps = 0``, rule ``train.steps_from_data``; the log says how many), so a few hundred photos
  get the epochs they need and a large folder stops at 4,000 steps (about 14 minutes on 2 CPU cores for 800 drawn
  pictures);
* yes/no questions about what is in the photo (*is there a red circle?*, *hình tròn có màu đỏ không?*) go
  through MLPAG's region verifier (``model.verifier``), with the negation read by rules; so do those about the
  words written in it (*is the word milk written in the picture?*), whose answer is whether an OCR token is a
  word of the question (``model.verifier.ocr_tokens``; nothing changes for a folder without OCR tokens);
* the verifier's region scores also count (*how many red circles are there?*) and compare (*are there more
  circles than squares?*, *are the circle and the square the same colour?*) (``model.verifier.compare``), and
  point at what lies beside a named thing (*what is left of the red circle?*) (``model.verifier.relate``).

Any number of steps: ``--config.train.num_train_steps=N``. The CNN over the pixels instead of the proposals:
``--config.model.vision.kind=cnn --config.model.verifier.enabled=False``.

A train split of fewer than 32 questions stops with a one-line error: lower the batch, e.g.
``--config.train.batch_size=4``. Splits: ``train``, ``validation`` (the dev split: periodic scores, best
checkpoint) and ``test``; where the folder has no validation or test file, the builder holds out 10% of the
train photos for each.

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
    # The steps follow the folder's size (openvivqa_jax/vqa/run_length.py, one log line): 20 epochs of its training
    # questions, at least 500 steps and at most 4,000 (raise max_steps on an accelerator). On a world of 800 drawn
    # pictures (6,429 questions) the yes/no kinds were 69-85% after 2,000 steps and 89-96% after 4,000, which took
    # 12-14 minutes on 2 CPU cores; with the verifier's counting, comparing and relating, 14 minutes
    # (docs/results.md).
    c.train.num_train_steps = 0
    c.train.steps_from_data = ml_collections.ConfigDict(dict(epochs=20.0, min_steps=500, max_steps=4000))
    # Yes/no questions about what is in the photo: the region verifier (openvivqa_jax/models/verifying.py) on the
    # proposals' own colour, area and shape. It needs region vision: with --config.model.vision.kind=cnn also
    # set --config.model.verifier.enabled=False.
    c.model.verifier.enabled = True
    # The verifier also finds the words a question names among the OCR tokens (is the word milk written?), and
    # does not score the regions inside an OCR token's box (letters, their label) as things; with no OCR tokens
    # this adds nothing.
    c.model.verifier.ocr_tokens = True
    # Its region scores also answer how-many questions (a number word's first-piece logit is the log-probability
    # of that many matching regions) and more/fewer and same-colour questions about two named things
    # (models/comparing.py). A yes/no question that names one thing is answered by the existence alone; on one
    # that names two, the existence leads from the start (a share of 0.79, learned from the words). Number words
    # are moved only on the first answer piece.
    c.model.verifier.compare = True
    # And what is left of / above ... a named thing: the thing named after the side word is found by its region
    # scores, the most object-like other region becomes one more decoder memory token (from which the answer
    # names it), and the answer "nothing" is moved by which side of the thing that region lies on.
    c.model.verifier.relate = True
    # Its own Adam runs at a constant 1e-2 for the first half of the steps, then falls by a half cosine to 0 at the
    # last step (training/state.py, verifier_rate), so that the run ends on settled scores. On the second world
    # it changed little: test exact match 98.4% against 98.3% at a constant rate (three seeds; docs/results.md).
    c.model.verifier.decay_start = 0.5
    return c
