"""M4C on ST-VQA (Biten et al., ICCV 2019) with M4C's own recipe (Hu et al., CVPR 2020, §4), scored with ANLS.

Usage (the ST-VQA release downloaded to ``~/data/st_vqa``, see ``tfds_builders/st_vqa``)::

    python -m openvivqa_jax.main --config configs/stvqa/m4c.py:task1 --workdir runs/stvqa_m4c_task1 \
        --config.data.manual_dir=~/data/st_vqa

Variants (``--config configs/stvqa/m4c.py:<variant>``) are the three ST-VQA tasks:

* ``task1``: each test question comes with a 100-word dictionary; decoding is constrained to it
  (``data.decode_dictionary='per_image'``).
* ``task2``: one 30k-word global dictionary; decoding is constrained to it (``'global'``; the
  dictionary comes from ``data.global_dictionary_file`` when set, else from the examples, which the
  builder fills with ``manual_dir/global_dictionary.txt``).
* ``task3`` (default): open vocabulary, no constraint.

Constrained decoding is piece-level (:mod:`openvivqa_jax.data.pipeline`, :mod:`openvivqa_jax.vqa.decoding`):
beam search may only emit the SentencePiece pieces of dictionary entries, EOS, and OCR slots whose token is
in the dictionary; it does not force whole dictionary words. ``--config.data.decode_dictionary=none`` turns
it off for any task.

Splits: ST-VQA ships ``train`` and ``test`` only, and test answers are withheld (scored on the RRC server),
so model selection uses a held-out tail of train: ``train[:90%]`` / ``train[90%:]`` (M4C held out 10% of
the training images; slicing by question here lets an image's other questions fall on both sides). The
test split is decoded and written to ``eval/test_predictions.json``; its metrics are empty (no
references).

M4C's recipe: Adam 1e-4 (betas 0.9/0.999), the ``m4c`` schedule (linear warmup over 1,000 steps, x0.1 at
14k and 19k of 24k steps), batch 128, gradient clipping 0.25, 12 decoding steps, multi-label BCE, d_model
768, 12 heads, 4 multimodal layers, a 3-layer text encoder (M4C uses BERT-base's first 3 layers; ours is
trained from scratch), 50 OCR tokens with M4C's 604-d PHOC. The visual stream is a CNN over the image
(the builder keeps images, not Faster R-CNN features). Metrics: ANLS (the ST-VQA metric, best
checkpoint by it) plus BLEU, ROUGE-L and CIDEr.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)
#: ``--config configs/stvqa/m4c.py:<variant>``.
VARIANTS = ("task1", "task2", "task3")
_DICTIONARY = {"task1": "per_image", "task2": "global", "task3": "none"}


def get_config(variant: str = "task3") -> ml_collections.ConfigDict:
    """Returns the ST-VQA M4C config for ``variant`` (``task1``, ``task2`` or ``task3``).

    Raises:
      ValueError: for an unknown variant.
    """
    common.check_variant(variant, VARIANTS)
    c = load_config("../openvivqa/m4c.py", "images", relative_to=__file__)

    d = c.data
    # d.manual_dir is required: --config.data.manual_dir=<folder with train_task_<t>.json, test_task_<t>.json, images>
    common.use_dataset(d, "st_vqa", variant, train_split=common.HELD_OUT_TRAIN, eval_split=common.HELD_OUT_DEV)
    d.image_size = (384, 288)
    d.max_ocr_pieces = 8
    d.decode_dictionary = _DICTIONARY[variant]  # 'none' | 'per_image' | 'global'
    d.global_dictionary_file = placeholder(str)  # task 2: txt (one entry a line) or JSON list; None: from examples

    c.tokenizer.vocab_size = 4000

    # The model and training recipe are configs/openvivqa/m4c.py's (M4C's own); ST-VQA changes these:
    m = c.model
    m.num_text_layers = 3
    m.max_question_len = 20
    m.num_ocr = 50
    m.phoc_alphabet = "m4c"  # English scene text: M4C's 604-d PHOC
    m.phoc_dim = 604
    m.ocr_features = ("pieces", "phoc", "appearance")
    m.vision.kind = "cnn"

    t = c.train
    t.eval_every_steps = 2_000
    t.checkpoint_every_steps = 1_000
    t.patience = 0
    t.best_metric = "ANLS"

    e = c.eval
    e.metrics = ("ANLS", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")
    e.decoding = "beam"  # constrained beam search for tasks 1-2; beam_size=1 is M4C's greedy decoding
    e.beam_size = 3
    e.alpha = 0.0
    e.ocr_ablation = False  # the test split has no answers to score an ablation against
    e.answer_rules = "english"  # the official VQA answer processing (evaluation/vqa_accuracy.py)
    e.text_mode = "official"  # ANLS as the RRC script, BLEU/ROUGE-L/CIDEr as pycocoevalcap (evaluation/rules.py)
    return c
