"""Pretrained text initializations from files in their published formats, written by the tests themselves.

* fastText: a ``.bin`` written byte by byte in Facebook's layout (magic, args, dictionary, input matrix) with known
  rows; the loaded vectors must equal a numpy re-implementation of fastText's ``getWordVector`` (subword n-grams of
  ``<word>``, FNV-1a over sign-extended UTF-8 bytes, ``nwords + hash % bucket``), for in-vocabulary words, unseen
  words and OCR misreadings. A gensim-trained model saved as ``.bin`` loads to gensim's own vectors. The ``.vec``
  text format, with its zero fallback.
* BERT / RoBERTa: a tiny checkpoint written as ``model.safetensors`` + ``config.json`` + ``vocab.txt``; the
  encoder's hidden states must equal a numpy BERT forward pass over the same tensors. WordPiece and PhoBERT BPE ids
  against hand-derived ones.
* One training step of MLPAG with fastText vectors and of M4C with the BERT encoder on the tiny synthetic set.
* Missing files, wrong shapes and wrong sizes: one-line errors deriving from ``UserError``.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from conftest import build_tiny_tfds, tiny_model_config
from openvivqa_jax.errors import UserError

# ------------------------------------------------------------------------------------------------ fastText


def _fnv1a_fasttext(s: str) -> int:
    """fastText's ``Dictionary::hash``: FNV-1a 32-bit, each UTF-8 byte cast through ``int8_t`` (sign-extended)."""
    h = 2166136261
    for b in s.encode("utf-8"):
        h ^= b if b < 128 else (b | 0xFFFFFF00)
        h = (h * 16777619) & 0xFFFFFFFF
    return h


def _char_ngrams(word: str, minn: int, maxn: int) -> list[str]:
    """The character n-grams of ``<word>`` fastText hashes (whole characters; n = minn..maxn; with minn = 1 the
    lone ``<`` and ``>`` excluded)."""
    w = "<" + word + ">"
    out = []
    for i in range(len(w)):
        for n in range(minn, maxn + 1):
            if i + n > len(w):
                break
            g = w[i:i + n]
            if n == 1 and (i == 0 or i + n == len(w)):
                continue
            out.append(g)
    return out


def _reference_vector(word, words, matrix, minn, maxn, bucket):
    rows = [words.index(word)] if word in words else []
    rows += [len(words) + _fnv1a_fasttext(g) % bucket for g in _char_ngrams(word, minn, maxn)]
    return matrix[rows].mean(0) if rows else np.zeros(matrix.shape[1], np.float32)


def _write_fasttext_bin(path, words, matrix, *, dim, minn, maxn, bucket):
    """Facebook's ``.bin`` layout (fastText ``FastText::saveModel``, version 12)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<2i", 793712314, 12))
        # args: dim ws epoch minCount neg wordNgrams loss(ns=2) model(skipgram=2) bucket minn maxn lrUpdateRate t
        f.write(struct.pack("<12id", dim, 5, 5, 1, 5, 1, 2, 2, bucket, minn, maxn, 100, 1e-4))
        f.write(struct.pack("<3i", len(words), len(words), 0))  # size, nwords, nlabels
        f.write(struct.pack("<2q", 10 * len(words), -1))  # ntokens, pruneidx_size (-1: not pruned)
        for w in words:
            f.write(w.encode("utf-8") + b"\0" + struct.pack("<qb", 10, 0))
        f.write(struct.pack("<?", False))  # quant_input
        f.write(struct.pack("<2q", *matrix.shape) + matrix.astype("<f4").tobytes())
        f.write(struct.pack("<?", False))  # qout
        out = np.zeros((len(words), dim), np.float32)
        f.write(struct.pack("<2q", *out.shape) + out.tobytes())


_WORDS = ["cửa", "hàng", "màu", "đỏ", "phở", "biển", "hiệu"]
_DIM, _MINN, _MAXN, _BUCKET = 6, 2, 4, 97


@pytest.fixture(scope="module")
def fasttext_bin(tmp_path_factory):
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((len(_WORDS) + _BUCKET, _DIM)).astype(np.float32)
    path = tmp_path_factory.mktemp("ft") / "tiny.bin"
    _write_fasttext_bin(path, _WORDS, matrix, dim=_DIM, minn=_MINN, maxn=_MAXN, bucket=_BUCKET)
    return str(path), matrix


def test_bin_vectors_equal_fasttext_subword_reference(fasttext_bin):
    from openvivqa_jax.text.word_vectors import load_word_vectors

    path, matrix = fasttext_bin
    # In vocabulary; unseen ("quán"); OCR misreadings of vocabulary words ("phỏ" for "phở", "cüa", "hang").
    words = ["cửa", "đỏ", "quán", "phỏ", "cüa", "hang", "a", ""]
    vecs, found = load_word_vectors(path, words)
    assert vecs.shape == (len(words), _DIM) and vecs.dtype == np.float32
    for i, w in enumerate(words[:-1]):
        np.testing.assert_allclose(vecs[i], _reference_vector(w, _WORDS, matrix, _MINN, _MAXN, _BUCKET),
                                   rtol=1e-5, atol=1e-6, err_msg=w)
    np.testing.assert_array_equal(found, [True] * 7 + [False])
    assert not vecs[-1].any()


def test_bin_written_by_gensim_loads_gensims_vectors(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    from openvivqa_jax.text.word_vectors import WordVectors

    sents = [["cửa", "hàng", "màu", "đỏ"], ["biển", "hiệu", "ghi", "phở", "hà", "nội"]] * 10
    m = FastText(vector_size=8, min_count=1, min_n=2, max_n=5, bucket=300, epochs=2, seed=0, workers=1)
    m.build_vocab(sents)
    m.train(sents, total_examples=len(sents), epochs=2)
    save_facebook_model(m, str(tmp_path / "g.bin"))
    wv = WordVectors(str(tmp_path / "g.bin"))
    words = ["cửa", "nội", "phỏ", "hànội"]
    vecs, found = wv.lookup(words)
    np.testing.assert_allclose(vecs, np.stack([m.wv[w] for w in words]), rtol=1e-5, atol=1e-6)
    assert found.all() and wv.in_vocabulary(words).tolist() == [True, True, False, False]


def test_vec_text_format_and_zero_fallback(tmp_path):
    from openvivqa_jax.text.word_vectors import WordVectors, load_word_vectors

    p = tmp_path / "v.vec"
    p.write_text("2 3\nmàu 1 2 3\nđỏ -1 0.5 0\n", encoding="utf-8")
    vecs, found = load_word_vectors(str(p), ["đỏ", "xanh", "màu"])
    np.testing.assert_array_equal(vecs, [[-1, 0.5, 0], [0, 0, 0], [1, 2, 3]])
    np.testing.assert_array_equal(found, [True, False, True])
    # OCR token features: a two-syllable token is the mean of its syllables; padding slots are zero.
    feats = WordVectors(str(p)).token_vectors(["màu đỏ", "xanh", "màu"], 4)
    np.testing.assert_allclose(feats, [[0, 1.25, 1.5], [0, 0, 0], [1, 2, 3], [0, 0, 0]])


def test_piece_vectors_use_each_piece_text(fasttext_bin):
    from openvivqa_jax.text.word_vectors import load_word_vectors, piece_vectors, piece_words

    class _Tok:  # the Tokenizer interface piece_words reads: 4 specials, then pieces
        pieces = ["<pad>", "<unk>", "<s>", "</s>", "\u2581màu", "\u2581đỏ", "ng", "\u2581"]
        vocab_size = len(pieces)

        def id_to_piece(self, i):
            return self.pieces[i]

    path, _ = fasttext_bin
    assert piece_words(_Tok()) == ["", "", "", "", "màu", "đỏ", "ng", ""]
    vecs, found = piece_vectors(path, _Tok(), dim=_DIM)
    np.testing.assert_array_equal(found, [False] * 4 + [True] * 3 + [False])
    np.testing.assert_allclose(vecs[4:7], load_word_vectors(path, ["màu", "đỏ", "ng"])[0])


@pytest.mark.parametrize("case", ["missing", "format", "garbage", "width"])
def test_fasttext_errors_are_one_line(tmp_path, fasttext_bin, case):
    from openvivqa_jax.text.word_vectors import WordVectors, WordVectorsError, piece_vectors

    if case == "missing":
        call, want = (lambda: WordVectors(str(tmp_path / "nope.bin"))), "not found"
    elif case == "format":
        (tmp_path / "v.npy").write_bytes(b"x")
        call, want = (lambda: WordVectors(str(tmp_path / "v.npy"))), "unknown word-vector format"
    elif case == "garbage":
        (tmp_path / "bad.bin").write_bytes(b"\x00" * 40)
        call, want = (lambda: WordVectors(str(tmp_path / "bad.bin"))), "is not a fastText .bin file"
    else:
        class _Tok:
            vocab_size = 5

            def id_to_piece(self, i):
                return ["<pad>", "<unk>", "<s>", "</s>", "\u2581màu"][i]

        call, want = (lambda: piece_vectors(fasttext_bin[0], _Tok(), dim=300)), "set model.word_dim=6"
    with pytest.raises(WordVectorsError) as e:
        call()
    assert isinstance(e.value, UserError) and want in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------ BERT

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "màu", "đỏ", "gì", "##u", "m", "?"]


def _bert_tensors(cfg: dict, prefix: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, i_sz = cfg["hidden_size"], cfg["intermediate_size"]
    r = lambda *s: (0.2 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    t = {f"{prefix}embeddings.word_embeddings.weight": r(cfg["vocab_size"], h),
         f"{prefix}embeddings.position_embeddings.weight": r(cfg["max_position_embeddings"], h),
         f"{prefix}embeddings.token_type_embeddings.weight": r(cfg["type_vocab_size"], h),
         f"{prefix}embeddings.LayerNorm.weight": 1 + r(h), f"{prefix}embeddings.LayerNorm.bias": r(h),
         f"{prefix}embeddings.position_ids": np.arange(cfg["max_position_embeddings"], dtype=np.int64)[None],
         f"{prefix}pooler.dense.weight": r(h, h), f"{prefix}pooler.dense.bias": r(h),
         "cls.predictions.bias": r(cfg["vocab_size"])}
    for layer in range(cfg["num_hidden_layers"]):
        b = f"{prefix}encoder.layer.{layer}."
        for name, (o, i) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (i_sz, h), "output.dense": (h, i_sz)}.items():
            t[b + name + ".weight"], t[b + name + ".bias"] = r(o, i), r(o)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[b + name + ".weight"], t[b + name + ".bias"] = 1 + r(h), r(h)
    return t


def _write_bert(folder, *, model_type="bert", layers=3, vocab=_VOCAB, tensors=None, pad=0):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(model_type=model_type, vocab_size=len(vocab), hidden_size=8, num_hidden_layers=layers,
               num_attention_heads=2, intermediate_size=12, hidden_act="gelu", max_position_embeddings=16,
               type_vocab_size=2 if model_type == "bert" else 1, layer_norm_eps=1e-12, pad_token_id=pad)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    prefix = "bert." if model_type == "bert" else "roberta."
    tensors = _bert_tensors(cfg, prefix) if tensors is None else tensors
    save_file(tensors, str(folder / "model.safetensors"))
    return cfg, tensors, prefix


def _np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _np_bert(ids, mask, t, cfg, prefix, num_layers, positions):
    """HF ``BertModel.forward`` in float64 numpy (post-LN layers, exact-erf GELU)."""
    g = lambda n: t[prefix + n].astype(np.float64)  # noqa: E731
    eps, h, nh = cfg["layer_norm_eps"], cfg["hidden_size"], cfg["num_attention_heads"]
    x = g("embeddings.word_embeddings.weight")[ids] + g("embeddings.position_embeddings.weight")[positions] + \
        g("embeddings.token_type_embeddings.weight")[np.zeros_like(ids)]
    x = _np_layer_norm(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    erf = np.vectorize(math.erf)
    for layer in range(num_layers):
        p = f"encoder.layer.{layer}."
        lin = lambda v, n: v @ g(p + n + ".weight").T + g(p + n + ".bias")  # noqa: E731
        b, n, _ = x.shape
        split = lambda v: v.reshape(b, n, nh, h // nh).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(lin(x, f"attention.self.{z}")) for z in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(h // nh) + np.where(mask, 0.0, -1e30)[:, None, None, :]
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(0, 2, 1, 3).reshape(b, n, h)
        x = _np_layer_norm(x + lin(ctx, "attention.output.dense"), g(p + "attention.output.LayerNorm.weight"),
                           g(p + "attention.output.LayerNorm.bias"), eps)
        inter = lin(x, "intermediate.dense")
        inter = 0.5 * inter * (1 + erf(inter / math.sqrt(2)))
        x = _np_layer_norm(x + lin(inter, "output.dense"), g(p + "output.LayerNorm.weight"),
                           g(p + "output.LayerNorm.bias"), eps)
    return x


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_bert_hidden_states_equal_numpy_reference(tmp_path, model_type):
    from flax import nnx

    from openvivqa_jax.models.bert import BertEncoder, load_hf_checkpoint, read_bert_settings

    pad = 0 if model_type == "bert" else 1
    cfg, tensors, prefix = _write_bert(tmp_path / "ckpt", model_type=model_type, pad=pad)
    enc = BertEncoder(read_bert_settings(str(tmp_path / "ckpt")), 2, rngs=nnx.Rngs(0))
    report = load_hf_checkpoint(enc, str(tmp_path / "ckpt"))
    ids = np.array([[2, 5, 6, 7, 3, pad], [2, 9, 3, pad, pad, pad]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], bool)
    out = np.asarray(nnx.jit(lambda e, i, m: e(i, m))(enc, ids, mask))
    if model_type == "bert":
        positions = np.broadcast_to(np.arange(6), ids.shape)
    else:  # RoBERTa counts real tokens from pad + 1; padding sits at pad
        positions = np.where(mask, np.cumsum(mask, 1) + pad, pad)
    ref = _np_bert(ids, mask, tensors, cfg, prefix, 2, positions)
    np.testing.assert_allclose(out[mask], ref[mask], rtol=1e-4, atol=1e-4)
    # Every tensor is either loaded or reported: layer 2, pooler, MLM head and buffers are ignored.
    assert len(report.loaded) + len(report.ignored) == len(tensors)
    assert f"{prefix}encoder.layer.2.output.dense.weight" in report.ignored
    assert f"{prefix}pooler.dense.weight" in report.ignored and "cls.predictions.bias" in report.ignored
    assert not any(n.startswith(f"{prefix}encoder.layer.2") for n in report.loaded)
    assert "ignored" in report.summary() and "\n" not in report.summary()


def test_wordpiece_and_phobert_bpe_ids(tmp_path):
    from openvivqa_jax.text.checkpoint_tokenizer import CheckpointTokenizer

    _write_bert(tmp_path / "b")
    tok = CheckpointTokenizer(str(tmp_path / "b"))
    assert tok.kind == "wordpiece"
    # Cased (tone marks kept): [CLS] màu đỏ gì ? [SEP]; "mxu" has no WordPiece split in the vocabulary: [UNK].
    assert tok.encode("màu đỏ gì ?") == [2, 5, 6, 7, 10, 3]
    assert tok.encode("mxu") == [2, 1, 3]
    ids, mask, cut = tok.encode_padded("màu đỏ gì ? màu", 4)
    assert ids.tolist() == [2, 5, 6, 3] and mask.all() and cut

    ph = tmp_path / "pho"
    ph.mkdir()
    (ph / "vocab.txt").write_text("học 5\nsinh 4\nsin@@ 3\nh@@ 2\nx 1\n", encoding="utf-8")
    (ph / "bpe.codes").write_text("h ọ 9\nhọ c</w> 8\ns i 7\nsi n 6\nsin h</w> 5\n", encoding="utf-8")
    pt = CheckpointTokenizer(str(ph))
    assert pt.kind == "phobert_bpe"
    # học -> h ọ c</w> -> họ c</w> -> học</w>; sinhx -> sin h x</w> (no merge (sin, h) before x): sin@@ h@@ x.
    assert pt._tok.tokenize("học sinhx") == ["học", "sin@@", "h@@", "x"]
    # <s> ... </s>; "zz" is z@@ z, both <unk> (3).
    assert pt.encode("học sinh sinhx zz") == [0, 4, 5, 6, 7, 8, 3, 3, 2]


def test_tokenizer_json_gives_the_wordpiece_ids(tmp_path):
    from tokenizers import BertWordPieceTokenizer

    from openvivqa_jax.text.checkpoint_tokenizer import CheckpointTokenizer

    _write_bert(tmp_path / "b")
    BertWordPieceTokenizer(str(tmp_path / "b" / "vocab.txt"), lowercase=False, strip_accents=False).save(
        str(tmp_path / "b" / "tokenizer.json"))
    tok = CheckpointTokenizer(str(tmp_path / "b"))
    assert tok.kind == "tokenizer.json" and tok.pad_id == 0
    assert tok.encode("màu đỏ gì ?") == [2, 5, 6, 7, 10, 3]


def test_missing_paths_leave_a_random_start_and_say_so():
    from flax import nnx

    from openvivqa_jax.models import build_model

    class _Tok:
        vocab_size = 300

    for name in ("mlpag", "m4c"):
        cfg = tiny_model_config(name)
        cfg.model.question_embedding = "fasttext" if name == "mlpag" else "learned"
        cfg.model.word_dim = 6
        cfg.model.text_encoder.kind = "bert"
        from openvivqa_jax.models.pretrained import initialize_pretrained

        model = nnx.eval_shape(lambda: build_model(cfg.model, 300))  # noqa: B023
        notes = initialize_pretrained(model, cfg.model, _Tok())
        if name == "mlpag":
            assert len(notes) == 1 and "model.fasttext.path is not set" in notes[0] and "\n" not in notes[0]
            assert model.question.embedding.embedding.shape == (300, 6)
        else:
            assert notes == [] and not model.uses_bert  # a 'bert' kind without a path: the learned encoder


@pytest.mark.parametrize("case", ["missing", "shape", "no_tensor", "vocab", "bin_only"])
def test_bert_errors_are_one_line(tmp_path, case):
    from flax import nnx

    from openvivqa_jax.models.bert import BertCheckpointError, BertEncoder, load_hf_checkpoint, read_bert_settings
    from openvivqa_jax.text.checkpoint_tokenizer import load_checkpoint_tokenizer

    folder = tmp_path / "ckpt"
    if case == "missing":
        call, want = (lambda: read_bert_settings(str(tmp_path / "none"))), "config.json"
    else:
        cfg, tensors, prefix = _write_bert(folder)
        enc = BertEncoder(read_bert_settings(str(folder)), 2, rngs=nnx.Rngs(0))
        if case == "shape":
            tensors[f"{prefix}encoder.layer.1.intermediate.dense.weight"] = np.zeros((13, 8), np.float32)
            _write_bert(folder, tensors=tensors)
            want = "tensor bert.encoder.layer.1.intermediate.dense.weight has shape (13, 8)"
        elif case == "no_tensor":
            del tensors[f"{prefix}encoder.layer.0.attention.self.key.bias"]
            _write_bert(folder, tensors=tensors)
            want = "tensor bert.encoder.layer.0.attention.self.key.bias is missing"
        elif case == "bin_only":
            (folder / "model.safetensors").unlink()
            (folder / "pytorch_model.bin").write_bytes(b"PK")
            want = "no model.safetensors"
        if case == "vocab":
            (folder / "vocab.txt").write_text("\n".join(_VOCAB + ["thêm", "nữa"]) + "\n", encoding="utf-8")
            call, want = (lambda: load_checkpoint_tokenizer(str(folder), len(_VOCAB))), "has 13 ids but config.json"
        else:
            call = lambda: load_hf_checkpoint(enc, str(folder))  # noqa: E731
    with pytest.raises(BertCheckpointError) as e:
        call()
    assert isinstance(e.value, UserError) and want in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    return build_tiny_tfds(tmp_path_factory)


def _one_step(cfg, workdir):
    import jax

    from openvivqa_jax.training import sharding
    from openvivqa_jax.vqa import experiment, train
    from openvivqa_jax.data import pipeline

    exp, state = experiment.create_experiment(cfg, str(workdir))
    it = pipeline.train_iterator(exp.data.source("train"), exp.inputs.pre, batch_size=4, seed=0, num_threads=1)
    batch = next(it)
    step = train.make_train_step(exp.spec)
    before = jax.device_get(state.params)
    with sharding.mesh_context(exp.spec.mesh):
        state, m = step(state, pipeline.to_global(batch, exp.spec.batch_sharding))
    assert np.isfinite(float(m["loss"]))
    return exp, before, jax.device_get(state.params), batch


def _tiny(name, tiny_tfds):
    cfg = tiny_model_config(name)
    cfg.data.builder_config = "tiny"
    cfg.data.data_dir = tiny_tfds
    cfg.data.num_threads = 1
    cfg.train.batch_size = 4
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [False, True])
def test_mlpag_trains_one_step_from_fasttext(tmp_path, tiny_tfds, fasttext_bin, freeze):
    from openvivqa_jax.text.word_vectors import load_word_vectors, piece_vectors

    cfg = _tiny("mlpag", tiny_tfds)
    m = cfg.model
    m.question_embedding = "fasttext"
    m.word_dim = _DIM
    m.fasttext.path = fasttext_bin[0]
    m.fasttext.freeze = freeze
    m.ocr_extra_features = {"ocr_fasttext": _DIM}
    exp, before, after, batch = _one_step(cfg, tmp_path)
    table = np.asarray(before["question"]["embedding"]["embedding"])
    vecs, found = piece_vectors(fasttext_bin[0], exp.inputs.tokenizer)
    np.testing.assert_allclose(table[found], vecs[found], rtol=1e-6)
    moved = np.abs(np.asarray(after["question"]["embedding"]["embedding"]) - table).max()
    assert (moved == 0) == freeze
    # The OCR features are each token's vector (the mean over a token's syllables), zero in padding slots.
    feats = batch["ocr_fasttext"]
    assert feats.shape == (4, m.num_ocr, _DIM) and batch["ocr_mask"].any()
    records = exp.data.records("train")
    for row, idx in enumerate(batch["index"]):
        texts = records[int(idx)].ocr_texts[: m.num_ocr]
        want = np.zeros((m.num_ocr, _DIM), np.float32)
        for j, t in enumerate(texts):
            want[j] = load_word_vectors(fasttext_bin[0], t.split())[0].mean(0)
        np.testing.assert_allclose(feats[row], want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_m4c_trains_one_step_from_bert(tmp_path, tiny_tfds):
    vocab = _VOCAB + ["màu", "của", "biển", "hiệu", "là", "gì", "chữ", "trên"]
    vocab = list(dict.fromkeys(vocab))
    cfg_json, tensors, _ = _write_bert(tmp_path / "ckpt", vocab=vocab)
    cfg = _tiny("m4c", tiny_tfds)
    cfg.model.text_encoder.kind = "bert"
    cfg.model.text_encoder.path = str(tmp_path / "ckpt")
    cfg.model.text_encoder.num_layers = 2
    cfg.train.loss = "bce"
    exp, before, after, batch = _one_step(cfg, tmp_path / "run")
    np.testing.assert_allclose(np.asarray(before["text_bert"]["word_embeddings"]["embedding"]),
                               tensors["bert.embeddings.word_embeddings.weight"], rtol=1e-6)
    assert batch["question_bert"].shape == (4, cfg.model.max_question_len)
    assert (batch["question_bert"][:, 0] == 2).all()  # [CLS]
    assert "question" not in after  # the learned text encoder is not built


@pytest.mark.slow
def test_main_reports_a_missing_vectors_file_in_one_line(tmp_path, tiny_tfds):
    import subprocess
    import sys

    from conftest import ROOT, subprocess_env

    res = subprocess.run([sys.executable, "-m", "openvivqa_jax.main", "--config", "configs/synthetic/mlpag_fasttext.py",
                          "--workdir", str(tmp_path / "w"), "--config.data.builder_config=tiny",
                          f"--config.data.data_dir={tiny_tfds}", f"--config.model.fasttext.path={tmp_path}/cc.vi.bin"],
                         cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert lines == [f"error: WordVectorsError: fastText vectors not found: {tmp_path}/cc.vi.bin (download e.g. "
                     "cc.vi.300.bin from https://fasttext.cc/docs/en/crawl-vectors.html; nothing is downloaded here)"]
