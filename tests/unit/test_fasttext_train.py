"""fastText vectors trained on a config's train split (openvivqa_jax/text/fasttext_train.py): the reading corpus,
the vector width a config needs, the ``path:variant`` and ``--config.*`` arguments, and the written ``.bin`` read
back by the project's loader into a transformer reader's word embedding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.config_files import apply_overrides, load_config_spec, split_config_spec
from openvivqa_jax.errors import ConfigError
from openvivqa_jax.text.fasttext_train import default_dim, reading_sentences, train_fasttext

_RECORDS = [
    {"passage": "Hà Nội là Thủ đô, năm 1010.", "question": "thủ đô là gì ?"},
    {"passage": "Hà Nội là Thủ đô, năm 1010.", "question": "năm nào ?"},
    {"passage": "Giá 20.000đ (rẻ)!", "question": "giá bao nhiêu ?"},
]


def test_reading_corpus_is_each_passage_once_as_the_word_tokenizer_reads_it_then_the_questions():
    """Passages deduplicated in first-seen order, lowercased, punctuation its own word, a number's inner ``.``
    kept (features.split_words) and a price read by the Vietnamese text rules (``20.000đ`` -> ``20,000 đồng``);
    then every question's whitespace tokens."""
    assert reading_sentences(_RECORDS) == [
        ["hà", "nội", "là", "thủ", "đô", ",", "năm", "1010", "."],
        ["giá", "20,000", "đồng", "(", "rẻ", ")", "!"],
        ["thủ", "đô", "là", "gì", "?"], ["năm", "nào", "?"], ["giá", "bao", "nhiêu", "?"]]


def test_the_width_is_the_one_the_config_embeds_words_at():
    cfg = lambda **kw: ml_collections.ConfigDict(kw)  # noqa: E731
    assert default_dim(cfg(task="reading", model={"encoder": "drqa", "word_dim": 100, "d_model": 64})) == 100
    assert default_dim(cfg(task="reading", model={"encoder": "transformer", "d_model": 128})) == 128
    assert default_dim(cfg(model={"d_model": 256})) == 300  # a VQA model without word vectors: cc.vi.300's


def test_config_spec_names_a_variant_and_overrides_parse_as_each_fields_type(tmp_path):
    assert split_config_spec("configs/viquad/reader.py:drqa_cpu") == ("configs/viquad/reader.py", ("drqa_cpu",))
    assert split_config_spec("configs/default.py") == ("configs/default.py", ())
    odd = tmp_path / "a:b.py"  # a file whose own name holds a colon is not split
    odd.write_text("")
    assert split_config_spec(str(odd)) == (str(odd), ())
    c = ml_collections.ConfigDict({"data": {"manual_dir": "", "sizes": (1, 2)}, "train": {"steps": 5, "lr": 0.1},
                                   "flag": False})
    apply_overrides(c, ["--config.data.manual_dir=~/v", "--config.train.steps=7", "--config.train.lr=2e-3",
                        "--config.flag=true", "--config.data.sizes=(3, 4)"])
    assert (c.data.manual_dir, c.train.steps, c.train.lr, c.flag, c.data.sizes) == ("~/v", 7, 2e-3, True, (3, 4))
    with pytest.raises(ConfigError, match=r"--config.train.step: the config has no field 'train.step'; did you "
                                          r'mean "steps" instead of "step"\?'):
        apply_overrides(c, ["--config.train.step=3"])
    with pytest.raises(ConfigError, match=r"the config has no field 'nothing.at.all'$"):
        apply_overrides(c, ["--config.nothing.at.all=3"])
    with pytest.raises(ConfigError, match=r"--config.train.steps: bad value 'many'"):
        apply_overrides(c, ["--config.train.steps=many"])
    with pytest.raises(ConfigError, match="expected --config.<field>=<value>"):
        apply_overrides(c, ["--config.train.steps"])


def test_trained_vectors_start_a_transformer_readers_word_embedding_and_can_be_frozen(tmp_path):
    """The ``.bin`` written from the reading corpus gives every syllable of the reader's vocabulary its vector
    (gensim's own lookup, read independently here); the transformer's token embedding holds them, and the freeze
    regex keeps exactly that table (not the position or segment embeddings)."""
    import optax
    from gensim.models.fasttext import load_facebook_vectors

    from openvivqa_jax.reading.model import build_reader
    from openvivqa_jax.reading.pretrained import WORD_EMBEDDING, initialize_word_vectors
    from openvivqa_jax.reading.vocab import train_word_tokenizer
    from openvivqa_jax.training.state import freeze_params

    sentences = reading_sentences(_RECORDS)
    out = tmp_path / "v.bin"
    train_fasttext(sentences * 20, str(out), dim=16, bucket=1000, epochs=2, min_count=1)
    tok = train_word_tokenizer([" ".join(s) for s in sentences], str(tmp_path / "words.json"))
    m = ml_collections.ConfigDict(dict(encoder="transformer", d_model=16, num_heads=2, ffn_dim=16, num_layers=1,
                                       dropout=0.0, max_seq_len=24, max_question_len=6, dtype="float32",
                                       fasttext={"path": str(out), "freeze": True}))
    reader = build_reader(m, tok.vocab_size)
    pos_before = np.asarray(reader.encoder.pos_embedding.embedding[...]).copy()
    line = initialize_word_vectors(reader, m, tok)
    assert line.startswith(f"word embedding: {tok.vocab_size - 4} of {tok.vocab_size} syllables")
    wv = load_facebook_vectors(str(out))
    table = np.asarray(reader.encoder.embedding.embedding[...])
    for w in ("hà", "đồng", "?", "nhiêu"):
        np.testing.assert_allclose(table[tok.encode(w)[0]], wv[w], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(reader.encoder.pos_embedding.embedding[...]), pos_before)

    params = nnx.state(reader, nnx.Param)
    tx = freeze_params(optax.sgd(1.0), params, WORD_EMBEDDING)
    upd, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    frozen = [k for k, v in (("/".join(map(str, k)), v) for k, v in nnx.to_flat_state(upd))
              if not np.any(np.asarray(v[...]))]
    assert frozen == ["encoder/embedding/embedding"]


def test_vectors_of_another_width_name_the_field_to_change(tmp_path):
    from openvivqa_jax.reading.model import build_reader
    from openvivqa_jax.reading.pretrained import initialize_word_vectors
    from openvivqa_jax.reading.vocab import train_word_tokenizer
    from openvivqa_jax.text.word_vectors import WordVectorsError

    (tmp_path / "v.vec").write_text("1 4\nhà 1 2 3 4\n", encoding="utf-8")
    tok = train_word_tokenizer(["hà nội"], str(tmp_path / "words.json"))
    m = ml_collections.ConfigDict(dict(encoder="transformer", d_model=8, num_heads=2, ffn_dim=8, num_layers=1,
                                       dropout=0.0, max_seq_len=8, max_question_len=4, dtype="float32",
                                       fasttext={"path": str(tmp_path / "v.vec"), "freeze": False}))
    with pytest.raises(WordVectorsError, match=r"4-d vectors but the model's word embedding is 8-d; set "
                                               r"model.d_model=4, or use vectors of width 8 \(python -m "
                                               r"openvivqa_jax.text.fasttext_train --dim 8\)"):
        initialize_word_vectors(build_reader(m, tok.vocab_size), m, tok)


def test_a_config_that_raises_is_one_config_error_naming_the_spec(tmp_path):
    """An unknown variant (the config's own ValueError) and a config file that raises on import are one line;
    a missing file stays FileNotFoundError (the commands' path check names the flag)."""
    broken = tmp_path / "broken.py"
    broken.write_text("import ml_collections\nraise KeyError('no such field')\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^config file {broken} did not load: KeyError: 'no such field'$"):
        load_config_spec(str(broken))
    with pytest.raises(ConfigError, match=r"^config file configs/viquad/reader.py:drqa_cpuu did not load: "
                                          r"ValueError: unknown variant 'drqa_cpuu'"):
        load_config_spec("configs/viquad/reader.py:drqa_cpuu")
    assert load_config_spec("configs/viquad/reader.py:drqa_cpu").model.encoder == "drqa"
    with pytest.raises(FileNotFoundError):
        load_config_spec("configs/viquad/nope.py")
