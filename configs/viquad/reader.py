"""Span readers on ViQuAD (SQuAD v1.1 style extractive QA), trained from scratch (docs/viquad.md).

Variants (``--config configs/viquad/reader.py:<variant>``):

* ``synthetic`` (default): the transformer reader on the builder's embedded synthetic set (``tfds_builders/viquad``
  config ``synthetic``: nothing to download), small sizes for a few CPU minutes::

      python -m openvivqa_jax.main --config configs/viquad/reader.py --workdir runs/viquad_synthetic

* ``drqa_synthetic``, ``qanet_synthetic``: DrQA and QANet on the synthetic set, CPU minutes.

* Real UIT-ViQuAD files in ``--config.data.manual_dir``: the public files (builder config ``v1_eval_v2_train``:
  1.0 dev/test, train from the 2.0 folds' 11,626 answerable questions; ``../shared/data/real/viquad``), each
  reader sized for 30 minutes on 2 CPU cores (``*_cpu``) or at the paper's sizes for a GPU:

  - ``drqa_cpu``, ``qanet_cpu``, ``transformer_cpu``: syllable tokens and the exact-match features (the
    character CNN only at the papers' sizes), a constant learning rate; the transformer with T5's
    relative-position bias and DrQA's aligned question embedding; DrQA's and the transformer's word embedding
    started from fastText vectors trained first on the train split's passages and questions
    (``model.fasttext.train_here``; the transformer's kept frozen);
  - ``drqa``, ``qanet``: the papers' sizes (DrQA: 3 BiLSTM layers of 128, Adamax; QANet: d 128, 7 model-encoder
    blocks; 300-d words, 40 epochs of batch 32 as ViQuAD §5.3);
  - ``viquad``: the transformer at the BERT baseline's input sizes (§5.3: sequence 384, question 64, answers up
    to 300 pieces; doc stride 128 as BERT's run_squad.py), BPE pieces, on the 1.0 release with its train file
    (builder config ``default``);
  - ``mbert``, ``xlmr``, ``phobert``: a pretrained Hugging Face checkpoint (``--config.model.pretrained_path``)
    fine-tuned under the span head at §5.3's sizes.

  ::

      python -m openvivqa_jax.main --config configs/viquad/reader.py:drqa_cpu --workdir runs/viquad_drqa \\
          --config.data.manual_dir=../shared/data/real/viquad
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = ("synthetic", "viquad", "drqa_synthetic", "qanet_synthetic", "transformer_cpu", "drqa_cpu", "qanet_cpu",
            "drqa", "qanet", "mbert", "xlmr", "phobert")
#: The real-data variants (the release files in ``data.manual_dir``).
REAL = ("viquad", "transformer_cpu", "drqa_cpu", "qanet_cpu", "drqa", "qanet", "mbert", "xlmr", "phobert")


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
    c.data = common.tfds_data("viquad", "synthetic", eval_split="dev")
    if variant == "viquad":  # the 1.0 release with its train file (train_ViQuAD.json, dev_..., test_...)
        c.data.builder_config = "default"
    elif variant in REAL:  # the public files: 1.0 dev/test, train from the 2.0 folds (tfds_builders/viquad)
        c.data.builder_config = "v1_eval_v2_train"

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
    c.model.match_features = False  # the exact-match features (openvivqa_jax/reading/features.py)
    # The transformer's positions: 0, a learned embedding per position; else T5's relative-position bias with
    # this many buckets, offsets from relative_max_distance on sharing the last (openvivqa_jax/models/attention.py).
    c.model.relative_buckets = 0
    c.model.relative_max_distance = 128
    # The transformer: DrQA's aligned question embedding added to each passage token's input.
    c.model.aligned_question = False
    c.model.char_channels = 0  # the character CNN's width (0: none; needs tokenizer.model_type='words')
    c.model.char_dim = 32
    c.model.char_kernel = 5
    c.model.pretrained_path = ""  # model.encoder='pretrained': the Hugging Face folder

    c.train = ml_collections.ConfigDict()
    c.train.batch_size = 32
    c.train.num_train_steps = 1500
    # 0: every batch padded to model.max_seq_len; else to its longest window rounded up to a multiple of this
    # (length bucketing, openvivqa_jax/reading/batching.py; training and evaluation).
    c.train.bucket_width = 0
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
    elif variant != "synthetic":
        _words(c, variant)
    return c


def _words(c: ml_collections.ConfigDict, variant: str) -> None:
    """The syllable-token readers (module doc): sizes, optimizer and loop of ``variant``."""
    m, t = c.model, c.train
    reader, size = (variant.split("_") + ["paper"])[:2]
    if reader in ("mbert", "xlmr", "phobert"):
        return _pretrained(c, reader)
    c.tokenizer = common.bpe_tokenizer(30000)
    c.tokenizer.model_type = "words"
    c.tokenizer.min_count = 1
    m.encoder = reader
    m.match_features = True
    # The user's fastText vectors for the word embedding (.bin / .vec; word_dim must be their width, 300 for
    # cc.vi.300), kept as loaded with freeze=True; unset: learned from scratch, or with train_here=True from
    # vectors trained first on the train split's passages and questions (<workdir>/fasttext_train.vec, `epochs`
    # passes; openvivqa_jax/reading/vectors.py).
    m.fasttext = ml_collections.ConfigDict({"path": "", "freeze": False, "train_here": False, "epochs": 10})
    # On 2 CPU cores the syllables go without the character CNN (2.9% of dev passage tokens are unknown; the
    # exact-match features still see them), which costs as much as the rest of DrQA.
    m.word_dim, m.char_dim, m.char_channels, m.char_kernel = 128, 32, 0, 5
    m.max_seq_len, m.max_question_len, m.doc_stride, m.max_answer_len = 320, 40, 128, 40
    m.dropout = 0.2
    t.schedule, t.warmup_steps, t.learning_rate = "warmup_constant", 100, 1e-3
    t.batch_size, t.num_train_steps = 32, 1500
    # Real windows hold 150-320 syllables (median 200): padding each batch only to its bucket saves about a third
    # of a CPU step (docs/viquad.md).
    t.bucket_width = 32
    common.train_loop(t, log_every_steps=25, eval_every_steps=250, best_metric="F1", checkpoint_every_steps=250)
    if reader == "drqa":
        m.word_dim, m.hidden, m.num_layers = 100, 64, 2
        # Vectors trained first on the train passages (40 s) and more steps: dev F1 60.5 at step 3,500 against
        # 53.9 at 2,000 without them; 3,500 steps scored every 500 keep the run near 30 minutes on two cores
        # (4,000 steps scored every 250 took 34 minutes; docs/viquad.md).
        m.fasttext.train_here = size == "cpu"
        t.num_train_steps, t.eval_every_steps = 3500, 500
        t.optimizer, t.b1, t.b2, t.learning_rate, t.grad_clip_norm = "adamax", 0.9, 0.999, 2e-3, 10.0
    elif reader == "qanet":
        # Self-attention over 317 passage slots is most of a CPU step: one head, one model-encoder block (applied
        # three times), where the paper has 8 heads and 7 blocks (the `qanet` variant).
        m.d_model, m.num_heads, m.num_layers = 64, 1, 1
        m.embed_convs, m.embed_kernel, m.model_convs, m.model_kernel = 2, 7, 2, 5
        t.b1, t.b2, t.eps = 0.8, 0.999, 1e-7
        # Dev F1 still rose 3 points per 500 steps at 1,500 (docs/viquad.md); 2,500 steps are about 20 minutes
        # on two idle cores.
        t.num_train_steps = 2500
    else:  # transformer
        m.d_model, m.num_heads, m.ffn_dim, m.num_layers = 128, 4, 256, 3
        # T5's relative-position bias in place of learned positions: dev F1 17.4 against 12.7 at step 500, 30.9
        # at 1,500 (docs/viquad.md).
        m.relative_buckets = 32
        # From scratch it fits its training windows and levels off at 36 dev F1; DrQA's aligned question
        # embedding and frozen vectors trained on the train passages gave 44.2 at step 2,500 (docs/viquad.md).
        m.aligned_question = True
        m.fasttext.train_here = m.fasttext.freeze = size == "cpu"
        t.num_train_steps, t.eval_every_steps = 2500, 500
        if size == "cpu":
            # With the vectors frozen it underfits (train loss 2.76 at step 3,000): twice the rate and half the
            # dropout gave dev F1 39.6 at step 1,000 against 30.9 (docs/viquad.md).
            t.learning_rate, m.dropout = 2e-3, 0.1
    if size == "synthetic":
        c.data = common.tfds_data("viquad", "synthetic", eval_split="dev")
        m.max_seq_len, m.max_question_len, m.char_channels = 160, 24, 32
        t.num_train_steps, t.eval_every_steps = 1000, 250
    elif size == "paper":  # ViQuAD §5.3: batch 32, 40 epochs (~14,500 steps of 11,626 questions); the papers' sizes
        m.word_dim, m.char_channels, m.max_seq_len, m.max_question_len = 300, 100, 400, 64
        m.dropout = 0.3 if reader == "drqa" else 0.1
        t.num_train_steps, t.eval_every_steps, t.checkpoint_every_steps = 15000, 1000, 1000
        if reader == "drqa":
            m.hidden, m.num_layers = 128, 3
        else:
            m.d_model, m.num_heads, m.num_layers, m.embed_convs, m.model_convs = 128, 8, 7, 4, 2
            t.warmup_steps = 1000


def _pretrained(c: ml_collections.ConfigDict, reader: str) -> None:
    """A Hugging Face checkpoint under the span head at ViQuAD §5.3's sizes (sequence 384, question 64, answers up
    to 300 tokens), fine-tuned as HF's run_squad.py: AdamW 3e-5 with a linear warmup, batch 32, 2 epochs."""
    m, t = c.model, c.train
    m.encoder = "pretrained"
    m.max_seq_len, m.max_question_len, m.doc_stride, m.max_answer_len = 384, 64, 128, 300
    t.optimizer, t.b1, t.b2, t.weight_decay, t.eps = "adamw", 0.9, 0.999, 0.01, 1e-8
    t.schedule, t.learning_rate, t.warmup_steps = "warmup_constant", 3e-5, 100
    t.num_train_steps = 800
    common.train_loop(t, log_every_steps=50, eval_every_steps=200, best_metric="F1", checkpoint_every_steps=200)
    m.d_model = {"mbert": 768, "xlmr": 1024, "phobert": 1024}[reader]  # read from config.json; kept for the logs
