"""Default experiment (the main job): small MLPAG that sees and reads, on the embedded synthetic OpenViVQA set.

Run: ``python -m openvivqa_jax.main --config configs/default.py --workdir runs/default``.

``configs/synthetic/base.py`` (the pixel-CNN MLPAG of the model zoo, where every field is set and explained)
with what makes the object questions (an object's colour, side and number) learnable from the pixels within the job,
each measured in docs/results.md ("The main job", "Seeing without a detector"):

* the image as class-free region proposals (``model.vision.kind = "proposals"``,
  ``openvivqa_jax/data/proposals.py``): one memory slot per segment of the picture (its colours, shape,
  context and box), made from the pixels with no detector and no training, so predict and any folder of
  photos get them too;
* each OCR token's box also as a learned 2-D position embedding (``box_grid``), with which the pointer network
  copies whole multi-syllable names from region inputs (without it 77-81% of unseen names, with it 90%), and its
  slot in the OCR list, the reading order, as a sinusoidal code (``order``), with which the pointer goes on to
  a name's next syllable instead of stopping after the first;
* the question grounded in the image (``model.question_over_image``, ``model.question_in_memory``) and taught
  where to look by the word–region contrastive loss (``model.word_region_loss``, over the questions' first 14
  tokens);
* the 12,000-picture set (``large_clean_regions``: the same validation and test pictures as
  ``default_clean``; its oracle region features are not read here) with the object questions oversampled
  (``data.train_kind_weights``: colour 42% and side 23% of the examples; the plateau before each is counted
  in examples of its kind) but not the count questions (the counter below has its own stream), 4,000 steps;
* the region counter (``model.counter``, ``openvivqa_jax/models/counting.py``): the count of the regions a
  counting question names, from a small question-conditioned MLP trained on a stream of 64 of the training
  split's counting questions beside each batch, given to the decoder as one memory token;
* the shop the question names (``model.named_text_token``, ``model.ocr_self_attention``, the OCR feature group
  ``question_match``, ``openvivqa_jax/models/mlpag.py``): the OCR tokens whose words occur in the question are
  marked, pooled into one more memory token, and seen by their sign's other words through one self-attention
  block over the OCR tokens, so that a shop's side, what it sells and its sign are read from the named shop;
* the region under the named shop's text (``model.named_region_token``: the smallest proposal that holds the
  named text's box, the surface it is painted on, as one more memory token), from which a named shop's
  signboard colour is read;
* the named shop's tokens as the longest stretch of the question the picture writes out
  (``model.named_match = "longest_run"``): many pictures write one word of a two-word name on another sign too
  ("uyên" beside "uyên linh"), and pooling both signs made the named region the wall around them;
* the question in the answer decoder's inputs (``model.question_to_decoder``: the question's mean fused token,
  projected, added to every decoder input), so that after a copied shop name the next word (``bán`` for what it
  sells, ``nằm`` for where it is) follows the question instead of the more frequent continuation;
* the signboard-colour and sells questions oversampled too (``sign_colour=4,sells=2``) and the object colours
  more (``colour=9``): each of these kinds is learned only past a number of its own examples, and 4,000 steps
  hold one epoch of the weighted stream;
* model-ready records (``data.model_ready``): each picture is segmented once, by every core.

Override any field from the command line, e.g. ``--config.train.num_train_steps=500``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

base = config_module("synthetic/base.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the main job's config (see the module docstring)."""
    c = base.get_config()
    c.data.builder_config = "large_clean_regions"
    c.data.train_kind_weights = "colour=9,count=1,position=3,shop_count=2,sign_colour=4,sells=2"
    c.data.model_ready = True
    m = c.model
    m.vision.kind = "proposals"
    m.vision.num_regions = 64  # a 128x96 scene has about 95 segments; the 64 largest keep 98% of its objects
    m.ocr_features = ("phoc", "appearance", "box_grid", "order", "question_match")
    m.named_text_token = True
    m.ocr_self_attention = 1
    m.named_region_token = True
    m.named_match = "longest_run"
    m.question_to_decoder = True
    m.question_over_image = True
    m.question_in_memory = True
    m.word_region_loss.weight = 1.0
    # Its scores cost batch^2 x words x heads x regions; the synthetic questions have at most 13 pieces, so
    # matching the first 14 instead of all 20 gives the same loss for about a fifth less step time.
    m.word_region_loss.max_words = 14
    m.counter.weight = 1.0
    c.train.num_train_steps = 4000
    c.train.eval_every_steps = 1000
    return c
