"""MLPAG (the OpenViVQA paper's generator, §4.3) on EVJVQA (VLSP 2022: English, Vietnamese and Japanese questions
on photos taken in Vietnam), scored with the challenge's metrics.

Usage (the EVJVQA files in ``~/data/evjvqa``, see ``tfds_builders/evjvqa``)::

    python -m openvivqa_jax.main --config configs/evjvqa/mlpag.py --workdir runs/evjvqa_mlpag \
        --config.data.manual_dir=~/data/evjvqa

Splits: EVJVQA ships a train file and test files, so the dev split for model selection is a held-out tail of
train (``train[:90%]`` / ``train[90%:]``); ``test`` is the public test file. The headline metric is the
challenge's token F1 (``EVJVQA-F1``, computed as the challenge's scorer ``evaluate_metrics.py`` does: Japanese
detected from the reference, token sets; :mod:`openvivqa_jax.evaluation.evjvqa`), which also chooses the best
checkpoint, with ``EVJVQA-BLEU`` (the scorer's mean of BLEU-1..4) and exact match alongside; every metrics file
reports them overall and per language (``by_field.language``) and names each metric's rule (``rules``).

Tokenizer: one SentencePiece BPE model over all three languages' normalized train text. With
``character_coverage=1.0`` every character of the train split is a piece (Japanese kana and kanji included;
anything unseen falls back to UTF-8 byte pieces), so ``vocab_size`` must hold the Japanese characters
(EVJVQA's train split has a few thousand distinct ones) besides the merges: 8,000 here. Questions and answers
are cut at 30 pieces (a Japanese sentence has no spaces, so BPE pieces stop at script changes and at
merged words; tests/e2e/test_evjvqa.py measures pieces per question per language and the cut rate).

Model and optimisation settings are configs/openvivqa/mlpag.py's ``images`` variant (the paper's sizes; grid
features from a CNN over the image). OCR: ``manual_dir/ocr.json`` if present, else none (builder config
``default``); ``--config.data.builder_config=tesseract`` runs Tesseract (vie+eng) at build time.
"""

import ml_collections

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)
#: The metrics computed at every evaluation (names of :mod:`openvivqa_jax.evaluation`).
EVJVQA_METRICS = ("EVJVQA-F1", "EVJVQA-BLEU", "EM", "ROUGE-L")


def get_config() -> ml_collections.ConfigDict:
    """Returns the EVJVQA MLPAG config."""
    c = load_config("../openvivqa/mlpag.py", "images", relative_to=__file__)
    # data.manual_dir is required: --config.data.manual_dir=<folder with the EVJVQA JSON files and images>
    common.use_dataset(c.data, "evjvqa", train_split=common.HELD_OUT_TRAIN, eval_split=common.HELD_OUT_DEV)
    c.tokenizer.vocab_size = 8000
    c.model.name = "mlpag"
    c.model.max_question_len = 30
    c.model.max_answer_len = 30
    c.train.best_metric = "EVJVQA-F1"
    c.eval.metrics = EVJVQA_METRICS
    # EVJVQA-F1/BLEU are the challenge scorer's in every text mode; EM and ROUGE-L (no challenge scorer) stay on
    # the Vietnamese-normalized text, and the metrics files say so under 'rules'.
    c.eval.text_mode = "openvivqa"
    c.eval.ocr_ablation = False
    return c
