"""Span reader on ViQuAD (SQuAD v1.1 style extractive QA), trained from scratch (docs/viquad.md).

Variants:

* ``synthetic`` (default): the builder's embedded synthetic ViQuAD-format set (``tfds_builders/viquad``
  config ``synthetic``: nothing to download), small sizes for a few CPU minutes::

      python -m openvivqa_jax.main --config configs/viquad/reader.py --workdir runs/viquad_synthetic

* ``viquad``: the UIT-ViQuAD release (``train_ViQuAD.json``, ``dev_ViQuAD.json``, ``test_ViQuAD.json`` in a
  folder) at the BERT baseline's input sizes of the paper (§5.3: sequence 384, question 64, answers up to
  300 pieces; doc stride 128 as BERT's run_squad.py)::

      python -m openvivqa_jax.main --config configs/viquad/reader.py:viquad --workdir runs/viquad \\
          --config.data.manual_dir=~/data/viquad
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = ("synthetic", "viquad")


def get_config(variant: str = "synthetic") -> ml_collections.ConfigDict:
    """Returns the reader config of ``variant`` (module doc).

    Raises:
      ValueError: an unknown variant.
    """
    common.check_variant(variant, VARIANTS)
    c = ml_collections.ConfigDict()
    c.task = "reading"
    c.seed = 0
    common.run_platform(c)
    c.data = common.tfds_data("viquad", "synthetic" if variant == "synthetic" else "default", eval_split="dev")

    c.tokenizer = common.bpe_tokenizer(1000 if variant == "synthetic" else 8000)

    c.model = ml_collections.ConfigDict()
    # The encoder over [question; passage] (openvivqa_jax/reading/model.py ENCODERS): 'transformer' is trained
    # from scratch; a pretrained BERT/PhoBERT encoder is another entry there.
    c.model.encoder = "transformer"
    c.model.d_model = 64
    c.model.num_heads = 4
    c.model.ffn_dim = 128
    c.model.num_layers = 2
    c.model.dropout = 0.1
    c.model.max_seq_len = 128  # pieces of [BOS] question [EOS] passage-window [EOS]
    c.model.max_question_len = 24  # question pieces kept (the rest cut and counted)
    c.model.doc_stride = 48  # pieces between the starts of a long passage's windows
    c.model.max_answer_len = 16  # the most pieces in a predicted span
    c.model.dtype = "float32"
    c.model.remat = False

    c.train = ml_collections.ConfigDict()
    c.train.batch_size = 32
    c.train.num_train_steps = 1500
    common.adam_noam(c.train, lr_scale=1.0)
    # Dev F1 varies by a few points between evaluations (the best checkpoint is kept): evaluate often.
    common.train_loop(c.train, log_every_steps=50, eval_every_steps=250, best_metric="F1")

    c.eval = ml_collections.ConfigDict()
    c.eval.batch_size = 64
    c.eval.metrics = ("EM", "F1")
    c.eval.text_mode = "official"  # SQuAD v1.1's evaluate-v1.1.py, the script ViQuAD's paper scores with
    c.eval.max_eval_examples = 0  # 0: the whole split
    c.eval.num_examples_to_print = 4

    if variant == "viquad":
        m = c.model
        m.d_model, m.num_heads, m.ffn_dim, m.num_layers = 256, 4, 1024, 4
        m.max_seq_len, m.max_question_len, m.doc_stride, m.max_answer_len = 384, 64, 128, 300
        c.train.num_train_steps = 20000
        c.train.eval_every_steps = 2000
        c.train.checkpoint_every_steps = 1000
    return c
