"""The base of every synthetic config: small MLPAG with the pixel CNN on the embedded synthetic OpenViVQA set
(``default_clean``: 1,500 training pictures), 2,000 steps (CPU minutes).

The main job (``configs/default.py``) is this with the class-free region proposals and the grounded training;
the model zoo (``configs/synthetic/<model>.py``), ``configs/tiny.py``, the folder config and the paper configs
start from this file. Every field of the synthetic experiments is set here; override any from the command
line, e.g. ``--config.train.num_train_steps=500``.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/base.py --workdir runs/pixels``.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the base synthetic config (pixel CNN, 2,000 steps)."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    common.run_platform(c)
    _data(c)
    c.tokenizer = common.bpe_tokenizer(1000)
    _model(c)
    _region_modules(c)
    _vision(c)
    _train(c)
    _eval(c)
    _evals(c)
    _mesh(c)
    _distributed(c)
    return c


def _data(c: ml_collections.ConfigDict) -> None:
    """The ``data`` fields: the synthetic set's clean-OCR variant and the input pipeline."""
    # The clean-OCR variant: with the OCR noise model on ("default"), answer words whose OCR token was
    # corrupted become vocabulary targets, which teaches the model to guess training names; measured on
    # the same 2,000 steps, 64% of unseen test shop names were copied with noisy OCR.
    c.data = common.tfds_data("synthetic_openvivqa", "default_clean", eval_split="validation")
    c.data.rebuild = False  # rebuild a prepared dataset whose manual files or builder config changed
    # Train on the questions of these template kinds only (synthetic set: e.g. ("colour",)); () trains on all.
    # Evaluation still scores every question. Used to measure how fast one kind is learned (docs/evaluation.md).
    c.data.train_kinds = ()
    # Oversample template kinds (synthetic set): "colour=4,count=3" makes every colour question appear 4 times per
    # epoch and every count question 3 times (0 leaves a kind out; kinds not named keep 1). "" weights none.
    c.data.train_kind_weights = ""
    c.data.image_size = (128, 96)  # (width, height) fed to the CNN backbone
    c.data.max_ocr_pieces = 8
    c.data.num_threads = 2
    c.data.prefetch = 8
    c.data.image_cache_size = 8192
    # Model-ready records (openvivqa_jax/data/model_ready.py, docs/input_pipeline.md): decode, resize, tokenize,
    # PHOC and answer targets once per split, then train and evaluate from memory-mapped arrays (the same batches
    # as the per-example path). Off here: the synthetic set is small enough to prepare per example.
    c.data.model_ready = False
    c.data.model_ready_dir = placeholder(str)  # None: the shared cache (docs/input_pipeline.md, "Where they live")
    c.data.preprocess_workers = 0  # image-decoding processes of the one-time pass; 0: one per CPU core
    # Constrained decoding (ST-VQA tasks 1/2): 'none', 'per_image' or 'global' dictionary.
    c.data.decode_dictionary = "none"
    c.data.global_dictionary_file = placeholder(str)


def _model(c: ml_collections.ConfigDict) -> None:
    """The ``model`` fields but the vision backbone: a small MLPAG and its text inputs."""
    c.model = ml_collections.ConfigDict()
    c.model.name = "mlpag"
    c.model.d_model = 128
    c.model.num_heads = 4
    c.model.ffn_dim = 256
    c.model.dropout = 0.1
    c.model.num_fusion_layers = 1
    c.model.num_decoder_layers = 2
    c.model.max_question_len = 20
    c.model.max_answer_len = 16
    c.model.num_ocr = 32
    c.model.phoc_alphabet = "vietnamese"
    c.model.phoc_dim = 702
    # OCR token features: PHOC + appearance under the box (+ the box, always). Piece embeddings
    # ("pieces") are an option: learned from scratch, they are untrained for words never seen in
    # training, so a model that reads them copies unseen shop names far less often (docs/results.md).
    c.model.ocr_features = ("phoc", "appearance")
    c.model.ocr_extra_features = ml_collections.ConfigDict()
    # Question piece embeddings: 'learned' (random start) or 'fasttext' (each piece's row starts as the fastText
    # vector of its text, OpenViVQA §4.2-4.3; docs/pretrained.md). word_dim is the vectors' width.
    c.model.question_embedding = "learned"
    c.model.word_dim = 300
    # fastText vectors (the user's file: Facebook .bin with subword n-grams, or .vec text; nothing is downloaded):
    # the question embedding above, and the OCR tokens' 'ocr_fasttext' features when ocr_extra_features names
    # them ({"ocr_fasttext": 300}). freeze keeps the question vectors as loaded instead of fine-tuning them.
    c.model.fasttext = ml_collections.ConfigDict({"path": placeholder(str), "freeze": False})
    # M4C's question encoder: 'learned' (a transformer trained from scratch) or 'bert': the first num_layers layers
    # of the Hugging Face BERT / RoBERTa (PhoBERT) checkpoint in the folder path (config.json, model.safetensors,
    # tokenizer files; docs/pretrained.md), fine-tuned unless freeze.
    c.model.text_encoder = ml_collections.ConfigDict()
    c.model.text_encoder.kind = "learned"
    c.model.text_encoder.path = placeholder(str)
    c.model.text_encoder.num_layers = 3
    c.model.text_encoder.freeze = False
    c.model.fusion = "sum"
    # MLPAG: also give the answer decoder the fused question tokens in its memory (after the OCR tokens and the
    # image); the paper's decoder reads only the fused OCR tokens and image (docs/results.md, non-text).
    c.model.question_in_memory = False
    # MLPAG: after the fusion layers, the question tokens attend over the image (MCAN's guided attention), so the
    # question in the memory (question_in_memory) carries the objects it names (docs/results.md, non-text).
    c.model.question_over_image = False
    # MLPAG: self-attention blocks over the question, image and OCR tokens together after the fusion layers (M4C's
    # multimodal transformer; models/mlpag.py), so that a region meets the question's words and the other regions
    # in one place (verifying, comparing, relations). 0: none, the paper's model.
    c.model.joint_layers = 0
    # MLPAG: OCR self-attention before the fusion; memory tokens of the named OCR tokens (named_match: "any" in the
    # question, or "longest_run" of it, models/embeddings.py) and of their sign; the question in every decoder input.
    c.model.update(ocr_self_attention=0, named_text_token=False, named_region_token=False, named_match="any",
                   question_to_decoder=False)
    # MLPAG: question-guided glimpses over the image appended to the decoder's memory (models/grounding.py):
    # num glimpse tokens (0: none, the paper's model), the width of their score MLP, the largest count bin, and
    # the weight of a training-only loss that fits the first glimpse's soft count to the count a counting
    # question's answer gives (0: off).
    c.model.visual_glimpses = ml_collections.ConfigDict(dict(num=0, hidden_dim=128, max_count=10, count_loss=0.0))
    # MLPAG, with question_over_image: a training-only contrastive loss that matches each question's words to
    # its own picture's cells against the batch's other pictures, through the projections of the question-over-
    # image attention (models/word_region.py): weight (0: off), temperature of the InfoNCE, sharpness of the
    # pooling over cells (1: log-sum-exp; larger: nearer the max) and max_words, the question tokens it matches
    # (0: all model.max_question_len; fewer makes it cheaper, and the share of questions with tokens past it is
    # the training metric word_region_words_cut, with a WARNING line when it is not 0).
    c.model.word_region_loss = ml_collections.ConfigDict(dict(weight=0.0, temperature=0.1, sharpness=1.0,
                                                              max_words=0))
    c.model.dtype = "float32"
    # Recompute transformer blocks' activations in the backward pass instead of keeping them (jax.checkpoint):
    # less training memory for one more forward pass of each block. Used by M4C.
    c.model.remat = False
    # M4C's blocks under remat, when set: 'mmt', 'text', 'all', 'none' or block indices "0,13" (text blocks
    # first, then MMT); "" follows model.remat (models/m4c.py remat_plan).
    c.model.remat_blocks = ""
    # jax.nn.dot_product_attention implementation of every attention layer: 'xla' (any backend/dtype) or
    # 'cudnn' (cuDNN's fused kernel; CUDA GPU with model.dtype bfloat16 only).
    c.model.attention_impl = "xla"


def _region_modules(c: ml_collections.ConfigDict) -> None:
    """MLPAG's small modules over the image regions, off by default."""
    # MLPAG with region vision (proposals or region): a small region counter whose count is one more memory
    # token (models/counting.py), trained by its own count loss (weight; 0: off) on a stream of batch_size of the
    # training split's counting questions per step, with Adam at a constant learning_rate of its own; max_count
    # is the largest count bin of its token, hidden_dim the width of its scoring MLP; proposal_features as the
    # verifier's below ('all': the stored features whole).
    c.model.counter = ml_collections.ConfigDict(dict(weight=0.0, hidden_dim=128, max_count=10, batch_size=64,
                                                     learning_rate=3e-3, proposal_features="all"))
    # MLPAG with region vision: a region verifier (models/verifying.py; enabled: on) that adds to the first answer
    # piece's logits whether what a yes/no question names is in the picture, flipped by the question's negation
    # from rules (text/polarity.py); hidden_dim its region embedding's width, learning_rate its own Adam's;
    # proposal_features 'objects' (a proposal's own colour, area and shape) or 'all' (with its box's and context's
    # pixels) with vision kind proposals; ocr_tokens: the OCR tokens that the question names are candidates too;
    # compare: its region scores also answer how-many, more/fewer and same-colour questions (models/comparing.py),
    # counts told apart up to max_count; relate: what is left of / above ... a named thing (one more memory token);
    # decay_start: the fraction of the steps after which its rate falls by a half cosine to 0 (1: constant).
    c.model.verifier = ml_collections.ConfigDict(dict(enabled=False, hidden_dim=32, learning_rate=1e-2,
                                                      proposal_features="objects", ocr_tokens=False,
                                                      compare=False, max_count=10, relate=False, decay_start=1.0))


def _vision(c: ml_collections.ConfigDict) -> None:
    """The ``model.vision`` fields: the CNN backbone over the pixels."""
    c.model.vision = ml_collections.ConfigDict()
    c.model.vision.kind = "cnn"
    c.model.vision.cnn_channels = (32, 64, 96, 128)
    # Space-to-depth block of the CNN's last feature map (1: none; 2 stacks each 2x2 block of cells into one
    # grid cell's channels; models/layers.py SmallCNN).
    c.model.vision.space_to_depth = 1
    # Each grid cell also gets its own pixels, average-pooled over 4x4 blocks (16 x 3 values per 16x16-pixel
    # cell; 0: none; models/layers.py SmallCNN): with them the signboard colours are learned
    # (docs/results.md, non-text questions).
    c.model.vision.pixel_features = 4
    # Vision kind "proposals" (class-free region proposals from the pixels, openvivqa_jax/data/proposals.py):
    # the largest num_regions segments of the picture resized to data.image_size, and the segmentation's
    # smallest segment (pixels) and scale (Felzenszwalb & Huttenlocher's k).
    c.model.vision.num_regions = 64
    c.model.vision.proposal_min_size = 8
    c.model.vision.proposal_scale = 400.0
    # Which proposal features are embedded: "all" (colour, area, shape and the pixels of the box and its context)
    # or "objects" (the segment's own colour, area and shape; the box is embedded either way).
    c.model.vision.proposal_features = "all"


def _train(c: ml_collections.ConfigDict) -> None:
    """The ``train`` fields: batch, steps, optimizer, loss and the loop's intervals."""
    c.train = ml_collections.ConfigDict()
    c.train.batch_size = 32  # global batch
    c.train.num_train_steps = 2000
    # Read only when num_train_steps is 0: the steps are then derived from the training split (openvivqa_jax/vqa/
    # run_length.py): clip(ceil(epochs * questions / batch_size), min_steps, max_steps), said in one log line.
    c.train.steps_from_data = ml_collections.ConfigDict(dict(epochs=15.0, min_steps=500, max_steps=20000))
    common.adam_noam(c.train, lr_scale=0.3)
    # PRNG of the dropout masks: 'threefry2x32' (JAX's default, the same bits on every backend), 'rbg' or
    # 'unsafe_rbg' (cheaper bits; benchmarks/README.md).
    c.train.dropout_prng = "threefry2x32"
    # 'softmax' over the positive set; 'softmax_prefer_copy': a copyable word's target is its OCR
    # slots only (see models/base.py); 'bce': M4C's multi-label loss.
    c.train.loss = "softmax_prefer_copy"
    common.train_loop(c.train, log_every_steps=50, eval_every_steps=500, best_metric="CIDEr")
    c.train.patience = 0  # evaluations without dev improvement before stopping (0: never stop early)
    c.train.profile = False


def _eval(c: ml_collections.ConfigDict) -> None:
    """The ``eval`` fields: decoding and metrics."""
    c.eval = ml_collections.ConfigDict()
    c.eval.batch_size = 64
    c.eval.decoding = "beam"  # 'beam' or 'greedy'
    c.eval.beam_size = 3
    # Decoding of the periodic dev evaluations that select the best checkpoint: "" (eval.decoding), 'greedy' or
    # 'beam'. The final dev and test scores always use eval.decoding.
    c.eval.select_decoding = ""
    c.eval.alpha = 0.0
    # Beam search keeps the memory's cross-attention keys/values once per example instead of once per beam
    # (decoding.beam_search(share_memory=True)): less memory traffic; floats may differ in the last bits.
    c.eval.beam_share_memory = False
    c.eval.max_eval_examples = 0  # 0: the whole split
    c.eval.num_examples_to_print = 6
    c.eval.metrics = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")
    c.eval.ocr_ablation = True  # also score the test split with OCR tokens masked out
    # VQA-accuracy's answer processing: 'vietnamese' (our normalizer) or 'english' (the official VQA rules:
    # punctuation, number words, articles, contractions; TextVQA and ST-VQA configs).
    c.eval.answer_rules = "vietnamese"
    # How answers are compared (openvivqa_jax/evaluation/evaluator.py): 'openvivqa' (Vietnamese-normalized scores),
    # 'official' (each metric by its official script: TextVQA, ST-VQA, ViQuAD configs) or 'pycocoevalcap'.
    # EVJVQA-F1/BLEU are the challenge scorer's in every mode.
    c.eval.text_mode = "openvivqa"


def _evals(c: ml_collections.ConfigDict) -> None:
    """The ``evals`` entries run after training."""
    # What runs after training (and in --mode evaluate), in this order, with the best checkpoint
    # (openvivqa_jax/vqa/config.py). An entry's name is its role: eval/<name>_metrics.json, metrics.jsonl keys,
    # TensorBoard tags. 'split' names a key of c.data or a split of the dataset; switch an entry off with
    # --config.evals.<name>.enabled=False (the OCR ablation follows eval.ocr_ablation).
    c.evals = ml_collections.ConfigDict(sort_keys=False)
    c.evals.dev = dict(kind="decode", split="eval_split", enabled=True)
    c.evals.test = dict(kind="decode", split="test_split", tensorboard=True,
                        print_examples=c.eval.get_ref("num_examples_to_print"), enabled=True)
    c.evals.test_no_ocr = dict(kind="decode", split="test_split", mask_ocr=True, tensorboard=True,
                               enabled=c.eval.get_ref("ocr_ablation"))
    c.evals.copy_rate = dict(kind="copy_rate", of=("dev", "test", "test_no_ocr"), enabled=True)
    c.evals.ocr_ratio = dict(kind="ocr_ratio", with_ocr="test", without_ocr="test_no_ocr", enabled=True)


def _mesh(c: ml_collections.ConfigDict) -> None:
    """The device mesh, the sharding rules and FSDP."""
    c.mesh = ml_collections.ConfigDict()
    c.mesh.shape = (-1, 1)  # ('data', 'model'); -1 takes the remaining devices
    c.mesh.axes = ("data", "model")
    # (regex over the parameter path, PartitionSpec tuple); first match wins, unmatched: replicated.
    # Attention heads, FFN hidden units and the vocabulary go along 'model' (Megatron-style).
    c.sharding_rules = (
        (r".*/(query|key|value)/kernel", (None, "model")),
        (r".*/(query|key|value)/bias", ("model",)),
        (r".*/attn/out/kernel|.*_attn/out/kernel", ("model", None)),
        (r".*/wi/kernel", (None, "model")),
        (r".*/wi/bias", ("model",)),
        (r".*/wo/kernel", ("model", None)),
        (r".*/vocab_head/kernel", (None, "model")),
        (r".*/vocab_head/bias", ("model",)),
        (r".*embedding/embedding", (None, "model")),
    )
    c.fsdp = False  # also shard the largest remaining dimension of every parameter along 'data' 


def _distributed(c: ml_collections.ConfigDict) -> None:
    """The ``distributed`` fields of multi-process runs (``jax.distributed.initialize``)."""
    c.distributed = ml_collections.ConfigDict()
    c.distributed.initialize = False
    c.distributed.coordinator_address = placeholder(str)
    c.distributed.num_processes = placeholder(int)
    c.distributed.process_id = placeholder(int)
    c.distributed.local_device_ids = placeholder(str)
    c.distributed.initialization_timeout = 300  # seconds to wait for all processes
    c.distributed.cpu_collectives = ""  # e.g. 'gloo' for multi-process CPU runs
