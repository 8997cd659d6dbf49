"""W2VV++ sentence encoder for CLinRel and CMedRel (``papers/cross_lingual_caption_eval.md``;
openvivqa_jax/relevance/): Vietnamese answers projected into the space of the mean region features of
the synthetic set's oracle detector (``synthetic_openvivqa/default_clean_regions``), trained with VSE++'s
hardest-negative ranking loss. A few CPU minutes.

Run: ``python -m openvivqa_jax.main --config configs/relevance/w2vvpp.py --workdir runs/w2vvpp_vi``; then
``python -m openvivqa_jax.evaluate ... --metrics CLinRel,CMedRel --relevance_model runs/w2vvpp_vi``
(docs/relevance.md).

One encoder per language: ``--config.data.language=en`` (with a dataset whose records carry a language, e.g.
EVJVQA) trains the English one. Other visual spaces: ``--config.visual.source=cnn`` (the project's CNN over the
images), ``vit`` (``--config.visual.vit_checkpoint=ViT-B_16.npz --config.visual.vit_variant=B/16``) or ``file``
(``--config.visual.features_file=feats.npz``, one vector per image id).
"""

import ml_collections
from ml_collections.config_dict import placeholder

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the W2VV++ config."""
    c = ml_collections.ConfigDict()
    c.task = "relevance"
    c.seed = 0
    common.run_platform(c)
    c.data = common.tfds_data("synthetic_openvivqa", "default_clean_regions", eval_split="validation")
    # The text of a pair: 'answer' (what CLinRel and CMedRel score) or 'question_answer'.
    c.data.pair_text = "answer"
    # ISO 639-1 code: only questions of this language train the encoder (records without one count as it).
    c.data.language = "vi"
    c.data.image_size = (128, 96)  # (width, height) for visual.source 'cnn' / 'vit'

    c.visual = ml_collections.ConfigDict()
    c.visual.source = "regions"  # 'regions', 'cnn', 'vit' or 'file'
    # (rows, cols) cells the visual feature is pooled over, concatenated; (1, 1): the mean of the region
    # features (or the global mean of the grid). (1, 2) keeps the left and right halves apart.
    c.visual.pool_grid = (1, 2)
    # Standardize every dimension with the train images' mean and deviation before the cosine (the raw region
    # means are alike from image to image: cosines near 1).
    c.visual.standardize = True
    c.visual.features_file = placeholder(str)  # visual.source 'file': .npz keyed by image id
    c.visual.cnn_channels = (32, 64, 96, 128)  # visual.source 'cnn'
    c.visual.pixel_features = 4
    c.visual.vit_checkpoint = placeholder(str)  # visual.source 'vit': big_vision .npz
    c.visual.vit_variant = placeholder(str)  # e.g. 'B/16'
    c.visual.posemb_grid = placeholder(tuple)

    c.model = ml_collections.ConfigDict()
    c.model.name = "w2vvpp"
    c.model.vocab_size = 2000  # words kept (most frequent in train), padding and unknown included
    c.model.min_word_count = 1
    c.model.max_words = 24
    c.model.word_dim = 64
    c.model.gru_dim = 64
    c.model.mlp_dims = (256,)
    c.model.dropout = 0.2

    c.train = ml_collections.ConfigDict()
    c.train.batch_size = 64
    c.train.num_train_steps = 1500
    c.train.learning_rate = 1e-3
    c.train.grad_clip_norm = 2.0
    c.train.margin = 0.2
    # Steps that sum the hinges over all in-batch negatives (VSE0) before VSE++'s hardest negative takes over.
    # On the synthetic set the hardest negative alone collapses the space (dev rsum 0.72 after 300 summed steps,
    # 0.39 at step 1500; summed throughout 0.89; docs/relevance.md): many answers ("có một cây dù") fit
    # several pictures, so the hardest in-batch negative is often a right pair. Set it below num_train_steps
    # for VSE++'s hardest negatives after a warm-up.
    c.train.sum_negatives_steps = 1500
    common.train_loop(c.train, log_every_steps=100, eval_every_steps=250, best_metric="rsum")

    c.eval = ml_collections.ConfigDict()
    c.eval.batch_size = 256
    c.eval.ks = (1, 5, 10)
    return c
