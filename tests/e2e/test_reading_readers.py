"""The ViQuAD readers end to end: pretrained encoders read from Hugging Face folders made here (``config.json``,
``model.safetensors``, ``tokenizer.json``) with their pair layouts and checked against the numpy BERT of
test_pretrained.py; DrQA and QANet trained a few steps through the main entry point, resumed exactly, with one log
voice and the paper's table at the end."""

from __future__ import annotations

import json
import re

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from conftest import run_main_cli
from test_pretrained import _np_bert, _write_bert

from openvivqa_jax.reading import features as feats

_XLMR_VOCAB = ["<s>", "<pad>", "</s>", "<unk>", "▁Hà", "▁Nội", "▁có", "▁màu", "▁đỏ", "▁gì", "▁?", "▁."]
_BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "Hà", "Nội", "có", "màu", "đỏ", "gì", "?", "."]


def _folder(tmp_path, family: str):
    """A tiny checkpoint folder of ``family`` (``bert``: WordPiece, ``xlm-roberta``: unigram with Metaspace)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path / family
    if family == "bert":
        cfg, tensors, prefix = _write_bert(folder, model_type="bert", layers=2, vocab=_BERT_VOCAB, pad=0)
        tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(_BERT_VOCAB)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    else:
        cfg, tensors, prefix = _write_bert(folder, model_type=family, layers=2, vocab=_XLMR_VOCAB, pad=1)
        tok = Tokenizer(models.Unigram([(w, 0.0 if i < 4 else -1.0) for i, w in enumerate(_XLMR_VOCAB)], unk_id=3))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").unlink()  # tokenizer.json alone, as a Hugging Face download has it
    return folder, cfg, tensors, prefix


_REC = {"question": "màu gì ?", "passage": "Hà Nội có màu đỏ.", "answer_starts": [0], "answer_ends": [6]}


@pytest.mark.parametrize("family, layout", [
    ("bert", ["[CLS]", "màu", "gì", "?", "[SEP]", "Hà", "Nội", "có", "màu", "đỏ", ".", "[SEP]"]),
    ("xlm-roberta", ["<s>", "▁màu", "▁gì", "▁?", "</s>", "</s>", "▁Hà", "▁Nội", "▁có", "▁màu", "▁đỏ", "▁.", "</s>"]),
])
def test_checkpoint_tokenizer_lays_out_its_family_pair(tmp_path, family, layout):
    """``[CLS] q [SEP] p [SEP]`` for BERT, ``<s> q </s></s> p </s>`` for XLM-R; the passage read cased, each token
    mapped back to its own characters; the answer's label on its tokens."""
    from openvivqa_jax.reading.pretrained import CheckpointReaderTokenizer

    folder, *_ = _folder(tmp_path, family)
    tok = CheckpointReaderTokenizer(str(folder))
    w = feats.make_windows(tok, [_REC], max_seq_len=16, max_question_len=8, doc_stride=4, train=True)
    n = int(w.input_mask[0].sum())
    assert [tok.id_to_piece(i) for i in w.input_ids[0, :n]] == layout
    assert np.all(w.input_ids[0, n:] == tok.pad_id)
    p0 = layout.index("Hà" if family == "bert" else "▁Hà")
    assert (w.start_positions[0], w.end_positions[0]) == (p0, p0 + 1) and w.passage_mask[0].sum() == 6
    pt = w.passages[0]
    assert [feats.span_text(pt, k, k)[0] for k in range(len(pt))] == ["Hà", "Nội", "có", "màu", "đỏ", "."]
    # Exact-match features reach a checkpoint's tokens too ("màu" is in the question).
    assert w.token_features[0, p0 + 3, 0] == 1 and w.token_features[0, p0, 0] == 0


@pytest.mark.parametrize("family", ["bert", "xlm-roberta"])
def test_pretrained_encoder_loads_the_folder_and_matches_numpy(tmp_path, family):
    """The reader's encoder holds the file's tensors; XLM-R reads one token type and positions from pad + 1 (the
    numpy BERT of test_pretrained.py on the same ids); BERT reads the segments as token types."""
    from openvivqa_jax.reading.model import build_reader
    from openvivqa_jax.reading.pretrained import CheckpointReaderTokenizer

    folder, cfg, tensors, prefix = _folder(tmp_path, family)
    tok = CheckpointReaderTokenizer(str(folder))
    w = feats.make_windows(tok, [_REC], max_seq_len=16, max_question_len=8, doc_stride=4, train=True)
    m = ml_collections.ConfigDict(dict(encoder="pretrained", pretrained_path=str(folder), d_model=8))
    reader = build_reader(m, tok.vocab_size)
    line = reader.encoder.load_pretrained()
    assert "tensors loaded" in line
    np.testing.assert_array_equal(np.asarray(reader.encoder.bert.word_embeddings.embedding[...]),
                                  tensors[prefix + "embeddings.word_embeddings.weight"])
    ids, seg, mask = (jnp.asarray(getattr(w, k)) for k in ("input_ids", "segment_ids", "input_mask"))
    out = np.asarray(reader.encoder(ids, seg, mask))
    zero = np.asarray(reader.encoder(ids, jnp.zeros_like(seg), mask))
    mk = np.asarray(mask)
    if family == "xlm-roberta":
        np.testing.assert_array_equal(out, zero)  # one token type: the segments are not read
        positions = np.where(mk, np.cumsum(mk, 1) + 1, 1)
        ref = _np_bert(np.asarray(ids), mk, tensors, cfg, prefix, 2, positions)
        np.testing.assert_allclose(out[mk], ref[mk], rtol=1e-4, atol=1e-4)
    else:
        assert not np.allclose(out[mk], zero[mk])  # the passage is token type 1
        np.testing.assert_array_equal(out, np.asarray(reader.encoder.bert(ids, mask, seg)))
        positions = np.broadcast_to(np.arange(16), ids.shape)  # with all types 0: the numpy reference
        ref = _np_bert(np.asarray(ids), mk, tensors, cfg, prefix, 2, positions)
        np.testing.assert_allclose(zero[mk], ref[mk], rtol=1e-4, atol=1e-4)
    s, e = reader({"input_ids": ids, "segment_ids": seg, "input_mask": mask,
                   "passage_mask": jnp.asarray(w.passage_mask)})
    assert s.shape == (1, 16) and reader.span_head.kernel.shape == (8, 2)


def test_pretrained_reader_without_a_folder_says_which_flag():
    from openvivqa_jax.models.bert import BertCheckpointError
    from openvivqa_jax.reading.model import build_reader

    with pytest.raises(BertCheckpointError, match=r"--config\.model\.pretrained_path="):
        build_reader(ml_collections.ConfigDict(dict(encoder="pretrained", pretrained_path="", d_model=8)), 10)


# ------------------------------------------------------------------------------------------- training


def _train_records(run):
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["drqa", "qanet"])
def test_tiny_reader_trains_resumes_exactly_and_speaks_once(tmp_path, reader):
    """A tiny DrQA / QANet trains 6 steps on the synthetic set; stopped at step 4 and resumed, it logs the same
    losses and scores the same dev/test EM/F1 as the run that was not stopped. Each log step is one line; the end
    prints the paper's table."""
    tiny = json.dumps({"name": "synthetic_tiny", "synthetic": True,
                       "synthetic_sizes": {"train": 12, "dev": 3, "test": 3}})
    common = ["--config", f"configs/viquad/reader.py:{reader}_synthetic",
              f"--config.data.data_dir={tmp_path / 'tfds'}", f"--config.data.builder_config={tiny}",
              "--config.model.word_dim=8", "--config.model.char_channels=4", "--config.model.char_dim=4",
              "--config.model.num_layers=1", "--config.model.max_seq_len=96", "--config.train.batch_size=4",
              "--config.train.log_every_steps=2", "--config.train.checkpoint_every_steps=2",
              "--config.train.eval_every_steps=4", "--config.eval.batch_size=8", "--config.train.warmup_steps=2"]
    common += ["--config.model.hidden=4"] if reader == "drqa" else ["--config.model.d_model=8",
                                                                     "--config.model.num_heads=2"]
    whole = run_main_cli(*common, "--workdir", tmp_path / "whole", "--config.train.num_train_steps=6")
    assert whole.returncode == 0, whole.stderr[-3000:]
    first = run_main_cli(*common, "--workdir", tmp_path / "cut", "--config.train.num_train_steps=4")
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_main_cli(*common, "--workdir", tmp_path / "cut", "--config.train.num_train_steps=6")
    assert again.returncode == 0 and "Resumed from step 4 " in again.stderr, again.stderr[-3000:]
    a, b = _train_records(tmp_path / "whole"), _train_records(tmp_path / "cut")
    pick = lambda recs, kind: [(r["step"], r.get("loss")) for r in recs if r["kind"] == kind]  # noqa: E731
    assert pick(a, "train") == pick(b, "train") and len(pick(a, "train")) == 3
    final = lambda recs: [{k: v for k, v in r.items() if k != "time"} for r in recs if r["kind"] == "final"]  # noqa: E731
    assert final(a) == final(b)[-2:]
    # One voice: each log step once (no second writer repeating the scalars), then the table beside the paper's.
    lines = re.findall(r"step (\d+)/6 loss", whole.stderr)
    assert lines == ["2", "4", "6"] and "logging_writer" not in whole.stderr
    assert re.search(rf"this run \({reader}, step \d\)", whole.stdout) and "DrQA + FastText" in whole.stdout


@pytest.mark.slow
def test_vectors_trained_on_the_train_passages_start_a_reader(tmp_path):
    """``fasttext_train`` reads a reading config (``path:variant`` and ``--config.*`` as the main entry point
    takes them), writes vectors of the reader's width from the train passages and questions only, and a reader
    started from them logs how many of its syllables they cover; a field the config lacks is one error line."""
    import subprocess
    import sys

    from conftest import ROOT, message_lines, subprocess_env
    from gensim.models.fasttext import load_facebook_vectors

    tiny = json.dumps({"name": "synthetic_tiny", "synthetic": True,
                       "synthetic_sizes": {"train": 12, "dev": 3, "test": 3}})
    data = [f"--config.data.data_dir={tmp_path / 'tfds'}", f"--config.data.builder_config={tiny}",
            "--config.model.word_dim=8"]
    out = tmp_path / "v.bin"

    def vectors(*extra):
        return subprocess.run([sys.executable, "-m", "openvivqa_jax.text.fasttext_train", "--config",
                               "configs/viquad/reader.py:drqa_synthetic", *data, "--out", str(out), "--epochs", "2",
                               "--bucket", "1000", *extra], cwd=ROOT, env=subprocess_env(), capture_output=True,
                              text=True, timeout=600)

    bad = vectors("--config.model.word_dimm=8")
    assert bad.returncode == 2 and not out.exists()
    assert message_lines(bad.stderr) == ["error: ConfigError: --config.model.word_dimm: the config has no field "
                                         "'model.word_dimm'; did you mean \"word_dim\" instead of \"word_dimm\"?"]
    variant = subprocess.run([sys.executable, "-m", "openvivqa_jax.text.fasttext_train", "--config",
                              "configs/viquad/reader.py:drqa_cpuu", "--out", str(out)], cwd=ROOT,
                             env=subprocess_env(), capture_output=True, text=True, timeout=600)
    lines = message_lines(variant.stderr)
    assert variant.returncode == 2 and len(lines) == 1 and "Traceback" not in variant.stderr
    assert lines[0].startswith("error: ConfigError: config file configs/viquad/reader.py:drqa_cpuu did not load: "
                               "ValueError: unknown variant 'drqa_cpuu'")
    made = vectors()
    assert made.returncode == 0, made.stderr[-3000:]
    assert re.search(r"wrote .*v\.bin: \d+ words from \d+ sentences of \d+ train records, dim 8", made.stdout)
    assert "EPOCH" not in made.stderr  # gensim's per-epoch progress stays out of the log
    assert load_facebook_vectors(str(out)).vector_size == 8
    run = run_main_cli("--config", "configs/viquad/reader.py:drqa_synthetic", *data, "--workdir", tmp_path / "run",
                       f"--config.model.fasttext.path={out}", "--config.model.char_channels=4",
                       "--config.model.char_dim=4", "--config.model.hidden=4", "--config.model.num_layers=1",
                       "--config.model.max_seq_len=96", "--config.train.batch_size=4",
                       "--config.train.num_train_steps=2", "--config.train.eval_every_steps=2",
                       "--config.eval.batch_size=8")
    assert run.returncode == 0, run.stderr[-3000:]
    words = json.loads((tmp_path / "run" / "words.json").read_text())["words"]
    got = re.search(r"word embedding: (\d+) of (\d+) syllables from fastText", run.stderr)
    assert got and int(got.group(2)) == len(words) and int(got.group(1)) == len(words) - 4  # all but the specials

    # In one command: train_here trains them in the workdir first, and a resumed run reuses them.
    here = ["--config", "configs/viquad/reader.py:drqa_synthetic", *data, "--workdir", tmp_path / "here",
            "--config.model.fasttext.train_here=True", "--config.model.fasttext.epochs=2",
            "--config.model.char_channels=0", "--config.model.hidden=4", "--config.model.num_layers=1",
            "--config.model.max_seq_len=96", "--config.train.batch_size=4", "--config.train.eval_every_steps=2",
            "--config.eval.batch_size=8"]
    first = run_main_cli(*here, "--config.train.num_train_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    vec = tmp_path / "here" / "fasttext_train.vec"
    n_words, dim = map(int, vec.read_text(encoding="utf-8").splitlines()[0].split())
    assert dim == 8 and re.search(rf"fastText vectors trained here \(skip-gram, dim 8, 2 epochs, seed 0\) on the "
                                  rf"train split's \d+ passages and \d+ questions: {n_words} words", first.stderr)
    assert re.search(rf"word embedding: {n_words} of \d+ syllables from fastText {re.escape(str(vec))}", first.stderr)
    again = run_main_cli(*here, "--config.train.num_train_steps=4")
    assert again.returncode == 0 and "fastText vectors trained here earlier" in again.stderr, again.stderr[-3000:]
    assert "Resumed from step 2 " in again.stderr
