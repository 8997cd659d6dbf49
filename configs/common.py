"""What the config files share (not a config itself: it has no ``get_config``).

Config files are plain Python files read by path (:mod:`openvivqa_jax.config_files`), so a config loads this
module by path too, which works from any current directory::

    from openvivqa_jax.config_files import config_module

    common = config_module("../common.py", relative_to=__file__)

**Paper-size configs** (``configs/openvivqa/<model>.py``, :func:`openvivqa_paper`): every model of the zoo at
the sizes of its paper on the real OpenViVQA dataset, with the data, tokenizer, training and evaluation
settings of configs/openvivqa/mlpag.py so that the models compare on equal terms. Usage (the dataset
downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/<model>.py[:<variant>] --workdir runs/<model> \\
        --config.data.manual_dir=~/data/openvivqa

Variants (:data:`OPENVIVQA_VARIANTS`):

* ``images`` (default): images + tesseract OCR at build time; the image is seen as the main job sees it, with no
  detector: class-free region proposals from the pixels (``model.vision.kind = "proposals"``: the 100 largest
  segments of the 384x288 picture, which cover 80-88% of it on the release's sample photos), and each OCR
  token's box also as a learned 2-D position embedding (``box_grid``), and MLPAG's region counter
  (``model.counter``) for the counting questions; docs/results.md, "The main job".
* ``cnn``: ``images`` with a CNN backbone's grid features instead (no ``box_grid``).
* ``features``: the authors' pre-extracted per-image feature files (region features 2048-d + boxes,
  scene-text tokens), i.e. the paper's setting.
* ``benchmark``: ``features`` at docs/design.md §10's benchmark shapes (50 regions of 1024-d, 50 OCR tokens
  with det 256 / rec 256 / fastText 300 features, question 20, answer 20, vocabulary 4,000, batch 64).

Classifiers (SAAA, MCAN, LoRRA): ``model.num_answers`` is ``K``, the top-K training answers
(:class:`openvivqa_jax.text.answer_list.AnswerList`; set it to ``len(answer_list)`` when the train split has
fewer distinct answers). Predictions are decoded to text and scored by the same evaluator.

**Synthetic configs** (``configs/synthetic/<model>.py``, :func:`synthetic`): configs/synthetic/base.py (the
embedded synthetic OpenViVQA set, small sizes for CPU minutes, the pixel CNN) with the model swapped.

**Task configs** (configs/synthetic/base.py, configs/viquad/reader.py, configs/relevance/w2vvpp.py) build their
``data`` with :func:`tfds_data` and set their run's logging, evaluation and checkpoints with :func:`train_loop`;
the two that train with :func:`openvivqa_jax.training.state.make_optimizer` and a SentencePiece tokenizer take
:func:`adam_noam` and :func:`bpe_tokenizer`. Configs on another dataset point the inherited ``data`` at it with
:func:`use_dataset`.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/<model>.py:<variant>``.
OPENVIVQA_VARIANTS = ("images", "cnn", "features", "benchmark")
#: Models whose question tokens are embedded with FastText (OpenViVQA §4.2-4.3; LoRRA, whose English question
#: embedding is GloVe, with FastText as there are no Vietnamese GloVe vectors):
#: their ``images`` / ``features`` configs start the question embedding from ``model.fasttext.path``.
FASTTEXT_QUESTION_MODELS = ("mlpag", "qumlag", "lorra")
#: Models whose OCR token features include 300-d fastText vectors (``ocr_fasttext``; MLPAG §4.3, LoRRA, M4C §3.2),
#: computed from ``model.fasttext.path`` in the ``images`` / ``features`` configs.
FASTTEXT_OCR_MODELS = ("mlpag", "lorra", "m4c")
#: Models that read the question with an LSTM over piece embeddings of width ``model.word_dim``.
LSTM_QUESTION_MODELS = ("fst", "qumlag", "saaa", "mcan", "lorra")
#: Models whose LSTM question vector (``model.lstm_dim``) guides attention over the image at width
#: ``model.attention_dim`` (FST eq. 5, SAAA's stacked attention, LoRRA's top-down attention).
ATTENTION_WIDTH_MODELS = ("fst", "saaa", "lorra")
#: Models that classify over the top ``model.num_answers`` training answers (the rest generate the answer).
CLASSIFIER_MODELS = ("saaa", "mcan", "lorra")
#: Splits of datasets that ship no dev split (ViVQA, EVJVQA, ST-VQA): train on the first 90% of train and select
#: the model on the last 10% (sliced by question, so an image's questions may fall on both sides).
HELD_OUT_TRAIN, HELD_OUT_DEV = "train[:90%]", "train[90%:]"


def check_variant(variant: str, variants: tuple[str, ...]) -> None:
    """Raises ``ValueError("unknown variant 'x'; expected one of (...)")`` unless ``variant`` is in ``variants``."""
    if variant not in variants:
        raise ValueError(f"unknown variant {variant!r}; expected one of {variants}")


def openvivqa_paper(name: str, variant: str, *, d_model: int = 512, num_heads: int = 8, ffn_dim: int = 2048,
                    dropout: float = 0.1) -> ml_collections.ConfigDict:
    """configs/openvivqa/mlpag.py's config for ``variant`` with ``model.name = name`` and the transformer sizes.

    Args:
      name: the model (``config.model.name``).
      variant: one of :data:`OPENVIVQA_VARIANTS`.
      d_model, num_heads, ffn_dim, dropout: the transformer sizes (configs/openvivqa/mlpag.py's by default).

    Every model keeps ``model.word_dim`` 300 (fastText's width, so that the question embeddings of
    :data:`FASTTEXT_QUESTION_MODELS` can start from the vectors; the others learn theirs at the same width), and
    the classifiers (:data:`CLASSIFIER_MODELS`) get ``model.num_answers = 3000``: the same K answers for all
    three (SAAA's K), cut to ``len(answer_list)`` when the train split has fewer.

    Returns:
      The config; the caller sets the model's own fields.

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("openvivqa/mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = name
    if name not in FASTTEXT_QUESTION_MODELS:
        m.question_embedding = "learned"
    if name not in FASTTEXT_OCR_MODELS and variant != "benchmark":
        m.ocr_extra_features = {}
    m.d_model = d_model
    m.num_heads = num_heads
    m.ffn_dim = ffn_dim
    m.dropout = dropout
    if name in CLASSIFIER_MODELS:
        m.num_answers = 3000
    if name != "mlpag":
        m.counter.weight = 0.0  # the region counter is a token of MLPAG's decoder memory
    return c


def synthetic(name: str) -> ml_collections.ConfigDict:
    """configs/synthetic/base.py (the synthetic set at small sizes, pixel CNN) with ``model.name = name``.

    The widths that the paper configs set per model follow ``model.d_model`` here, so that every model of the
    zoo compares at one small size: the question piece embeddings (``word_dim``) of
    :data:`LSTM_QUESTION_MODELS`; ``lstm_dim`` and ``attention_dim`` of :data:`ATTENTION_WIDTH_MODELS`; and for
    :data:`CLASSIFIER_MODELS` a hidden layer of ``2 * d_model`` (MCAN's AttFlat width) over
    ``num_answers = 1000`` answers (an upper bound: the synthetic train split has fewer distinct answers).
    """
    c = load_config("synthetic/base.py", relative_to=__file__)
    m = c.model
    m.name = name
    if name in LSTM_QUESTION_MODELS:
        m.word_dim = m.d_model
    if name in ATTENTION_WIDTH_MODELS:
        m.lstm_dim = m.d_model
        m.attention_dim = m.d_model
    if name in CLASSIFIER_MODELS:
        m.classifier_dim = 2 * m.d_model
        m.num_answers = 1000
    return c


def tfds_data(builder: str, builder_config: str, *, eval_split: str, train_split: str = "train",
              test_split: str = "test") -> ml_collections.ConfigDict:
    """A new ``config.data`` that reads the TFDS dataset ``builder`` / ``builder_config``.

    Besides the builder and the splits (``eval_split``: the dev split of the periodic evaluations and of the
    best-checkpoint choice), it holds the fields every task's input reads when it prepares a dataset:
    ``data_dir`` and ``manual_dir``, None until given on the command line (``data_dir`` None:
    ~/tensorflow_datasets; ``manual_dir``: the folder of the files a user downloaded, for the builders that
    read them), and ``builder_kwargs`` (keyword arguments of the builder; none here).
    """
    d = ml_collections.ConfigDict()
    d.builder = builder
    d.builder_config = builder_config
    d.data_dir = placeholder(str)
    d.manual_dir = placeholder(str)
    d.builder_kwargs = ml_collections.ConfigDict()
    d.train_split = train_split
    d.eval_split = eval_split
    d.test_split = test_split
    return d


def use_dataset(data: ml_collections.ConfigDict, builder: str, builder_config: str = "default", *,
                eval_split: str, train_split: str = "train", test_split: str = "test") -> None:
    """Points an inherited ``config.data`` at the TFDS dataset ``builder`` / ``builder_config`` and its splits.

    The other data fields (image size, OCR pieces, model-ready records, ...) stay those of the config built on.
    """
    data.builder = builder
    data.builder_config = builder_config
    data.train_split = train_split
    data.eval_split = eval_split
    data.test_split = test_split


def run_platform(c: ml_collections.ConfigDict) -> None:
    """Sets ``c.platform``, the backend a run must get (openvivqa_jax/accelerator.py): ``auto`` (the default) runs on
    what JAX finds, an accelerator before the CPU; ``cpu`` keeps JAX off any accelerator; ``gpu`` or ``tpu`` stop
    the run with one ``error:`` line when JAX does not see one (instead of training on the CPU), saying what to
    install. ``JAX_PLATFORMS``, when the user sets it, must agree."""
    c.platform = "auto"


def adam_noam(train: ml_collections.ConfigDict, *, lr_scale: float) -> None:
    """Sets the fields :func:`openvivqa_jax.training.state.make_optimizer` reads: Adam on the transformer's Noam
    schedule.

    Adam with betas (0.9, 0.98) and no weight decay; ``lr = lr_scale * d_model^-0.5 * min(step^-0.5,
    step * warmup^-1.5)`` over 200 warmup steps; gradients clipped at global norm 1; no accumulation.
    ``learning_rate`` (1e-3), ``decay_steps`` (none) and ``decay_factor`` (0.1) are read only by the
    ``constant`` and ``m4c`` schedules; they are set so that ``--config.train.schedule`` can switch to them.
    """
    train.optimizer = "adam"
    train.b1 = 0.9
    train.b2 = 0.98
    train.weight_decay = 0.0
    train.schedule = "noam"
    train.lr_scale = lr_scale
    train.learning_rate = 1e-3
    train.warmup_steps = 200
    train.decay_steps = ()
    train.decay_factor = 0.1
    train.grad_clip_norm = 1.0
    train.grad_accum_steps = 1


def bpe_tokenizer(vocab_size: int) -> ml_collections.ConfigDict:
    """A new ``config.tokenizer``: a SentencePiece BPE model of ``vocab_size`` pieces trained on the train split.

    BPE makes every frequent syllable one piece. SentencePiece's ``unigram`` model leaves syllables that never
    end a sentence out of its vocabulary (synthetic train split: 16.6 pieces per question and 21.6% of questions
    cut at 20 pieces, against 8.0 and 0% with BPE; openvivqa_jax/text/tokenizer.py).
    """
    t = ml_collections.ConfigDict()
    t.vocab_size = vocab_size
    t.model_type = "bpe"
    return t


def train_loop(train: ml_collections.ConfigDict, *, log_every_steps: int, eval_every_steps: int, best_metric: str,
               checkpoint_every_steps: int = 250, keep_checkpoints: int = 2) -> None:
    """Sets how often a run logs, evaluates on the dev split and checkpoints, and what it keeps.

    ``best_metric`` is the dev metric (higher is better) whose best evaluation is kept as the run's best
    checkpoint, besides the last ``keep_checkpoints`` (every ``checkpoint_every_steps``) that a run resumes from.
    """
    train.log_every_steps = log_every_steps
    train.checkpoint_every_steps = checkpoint_every_steps
    train.eval_every_steps = eval_every_steps
    train.keep_checkpoints = keep_checkpoints
    train.best_metric = best_metric
