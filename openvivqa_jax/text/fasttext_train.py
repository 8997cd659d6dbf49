"""Trains fastText vectors on a config's train split and writes them in Facebook's ``.bin`` format.

A stand-in for the published ``cc.vi.300.bin`` where it is not at hand (the synthetic set's measurement in
docs/pretrained.md), or vectors of one's own corpus. The corpus is the train split only, normalized as everywhere,
split on whitespace into syllables as the paper tokenizes Vietnamese:

- a VQA config (:func:`train_sentences`): questions, every reference answer, and each image's OCR token texts
  once per question;
- a reading config (``task = "reading"``, :func:`reading_sentences`): each distinct train passage once, split
  into words and normalized as the reader's word tokenizer reads it, and each train question, so that every
  syllable of the reader's vocabulary is a word of the file.

Training is gensim's FastText (skip-gram with subword n-grams, Bojanowski et al. 2017);
:func:`gensim.models.fasttext.save_facebook_model` writes the ``.bin`` that :mod:`openvivqa_jax.text.word_vectors`
reads. The width is ``--dim``, by default the config's word embedding width (``model.word_dim``; a transformer
reader's ``model.d_model``; 300 otherwise).

Usage::

    python -m openvivqa_jax.text.fasttext_train --config configs/default.py --out runs/fasttext/synthetic.bin
    python -m openvivqa_jax.text.fasttext_train --config configs/viquad/reader.py:drqa_cpu \
        --config.data.manual_dir=../shared/data/real/viquad --out runs/fasttext/viquad_train.bin
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from openvivqa_jax import paths
from openvivqa_jax.cli import run_main
from openvivqa_jax.config_files import apply_overrides, load_config_spec, split_config_spec
from openvivqa_jax.errors import ConfigError

__all__ = ["train_sentences", "reading_sentences", "default_dim", "train_fasttext", "main", "PATH_FLAGS"]

#: The path flags (:mod:`openvivqa_jax.paths`), checked before the config is loaded.
PATH_FLAGS = {"--config": paths.INPUT_FILE, "--out": paths.OUTPUT_FILE}


def train_sentences(records) -> list[list[str]]:
    """The corpus of ``records`` (train split :class:`~openvivqa_jax.data.pipeline.Record` s): per record its
    question, each answer, and its OCR tokens joined, each as a list of syllables."""
    out = []
    for r in records:
        out.append(r.question.split())
        out.extend(a.split() for a in r.answers)
        if r.ocr_texts:
            out.append(" ".join(r.ocr_texts).split())
    return [s for s in out if s]


def reading_sentences(records) -> list[list[str]]:
    """The corpus of a reading config's train ``records`` (``{passage, question, ...}`` dicts of
    :func:`openvivqa_jax.reading.data.read_split`): each distinct passage once, in first-seen order, as the
    reader's word tokenizer splits and normalizes it, then each question's whitespace tokens (the builder stores
    questions normalized)."""
    from openvivqa_jax.reading.data import word_text

    passages = dict.fromkeys(r["passage"] for r in records)
    out = [word_text(p).split() for p in passages] + [r["question"].split() for r in records]
    return [s for s in out if s]


def default_dim(cfg) -> int:
    """The vector width the config's model embeds words at: ``model.word_dim`` (DrQA, QANet, the VQA models'
    fastText question embedding), a transformer reader's ``model.d_model``, else 300 (cc.vi.300's)."""
    m = cfg.get("model") or {}
    if m.get("word_dim"):
        return int(m["word_dim"])
    if cfg.get("task") == "reading" and m.get("encoder", "transformer") == "transformer":
        return int(m["d_model"])
    return 300


def train_fasttext(sentences: list[list[str]], out_path: str, *, dim: int = 300, min_n: int = 3, max_n: int = 6,
                   bucket: int = 200_000, epochs: int = 10, min_count: int = 1, seed: int = 0, workers: int = 1):
    """Trains skip-gram fastText on ``sentences`` and writes ``out_path``: Facebook's ``.bin`` (the words and
    their character n-grams), or, for a ``.vec`` path, the text format of the trained words' vectors only (what
    a reader whose vocabulary is those words needs, a tenth of the size). Written to a temporary file and renamed,
    so a failed write leaves an existing file as it was. With one worker the vectors are the same for the same
    corpus and seed.

    Args:
      sentences: lists of words. dim: vector width (cc.vi.300: 300). min_n, max_n: character n-gram lengths
        (fastText's defaults 3..6). bucket: n-gram hash buckets (fastText's default 2,000,000; fewer for a small
        corpus). epochs, min_count, seed, workers: gensim's.

    Returns:
      The trained gensim model.
    """
    from gensim.models import FastText  # heavy, optional: only to train vectors
    from gensim.models.fasttext import save_facebook_model

    # gensim logs every epoch's progress at INFO through the root logger; the caller logs one summary line.
    logging.getLogger("gensim").setLevel(max(logging.WARNING, logging.getLogger("gensim").level))
    model = FastText(vector_size=dim, sg=1, min_count=min_count, min_n=min_n, max_n=max_n, bucket=bucket,
                     seed=seed, workers=workers, epochs=epochs)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=epochs)
    out_path = os.path.abspath(out_path)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    tmp = f"{out_path}.tmp{os.getpid()}"
    try:
        if out_path.endswith(".vec"):
            model.wv.save_word2vec_format(tmp)
        else:
            save_facebook_model(model, tmp)
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return model


def main(argv=None) -> int:
    """Command line (module doc); a path that cannot serve or another user's error: one ``error:`` line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="config file, path[:variant] (its data.* and train split are "
                   "read); --config.<field>=<value> arguments override its fields as for the main entry point")
    p.add_argument("--out", required=True, help="the .bin to write (a .vec path: the words' vectors only, as text)")
    p.add_argument("--dim", type=int, default=0, help="vector width (0: the config's, see default_dim)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--bucket", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    args, rest = p.parse_known_args(argv)
    bad = [a for a in rest if not a.startswith("--config.")]
    if bad:
        p.error(f"unrecognized arguments: {' '.join(bad)}")
    # The path alone for the path check; the whole spec for the loader.
    args.spec = args.config
    args.config = split_config_spec(args.config)[0]
    args.overrides = rest
    # A config that does not load or a field that does not exist is a usage error, as for the main entry point.
    return run_main(lambda: _train(args), sigterm=False, exit_codes={ConfigError: 2})


def _train(args: argparse.Namespace) -> int:
    """Checks the paths, reads the train split, trains and writes the vectors."""
    paths.check_args(args, PATH_FLAGS)
    from openvivqa_jax.data.datasets import DataSplits  # heavy (JAX, grain, TFDS): once the paths are checked

    cfg = apply_overrides(load_config_spec(args.spec), args.overrides)
    if cfg.get("task") == "reading":
        from openvivqa_jax.data.datasets import load_builder
        from openvivqa_jax.reading.data import read_split

        records = read_split(load_builder(cfg.data), cfg.data.train_split)
        sentences = reading_sentences(records)
    else:
        records = DataSplits(cfg.data).records(cfg.data.train_split)
        sentences = train_sentences(records)
    dim = args.dim or default_dim(cfg)
    model = train_fasttext(sentences, args.out, dim=dim, epochs=args.epochs, bucket=args.bucket, seed=args.seed)
    print(f"wrote {args.out}: {len(model.wv.key_to_index)} words from {len(sentences)} sentences of "
          f"{len(records)} train records, dim {dim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
