"""Trains fastText vectors on a config's train split and writes them in Facebook's ``.bin`` format.

A stand-in for the published ``cc.vi.300.bin`` where it is not at hand (the synthetic set's measurement in
docs/pretrained.md), or vectors of one's own corpus. The corpus is the train split only, normalized as everywhere
(questions, every reference answer, and each image's OCR token texts once per question), one sentence per line,
split on whitespace into syllables as the paper tokenizes Vietnamese. Training is gensim's FastText (skip-gram
with subword n-grams, Bojanowski et al. 2017); :func:`gensim.models.fasttext.save_facebook_model` writes the
``.bin`` that :mod:`openvivqa_jax.text.word_vectors` reads.

Usage::

    python -m openvivqa_jax.text.fasttext_train --config configs/default.py --out runs/fasttext/synthetic.bin
"""

from __future__ import annotations

import argparse
import os
import sys

from openvivqa_jax import paths
from openvivqa_jax.cli import run_main
from openvivqa_jax.config_files import load_config

__all__ = ["train_sentences", "train_fasttext", "main", "PATH_FLAGS"]

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


def train_fasttext(sentences: list[list[str]], out_path: str, *, dim: int = 300, min_n: int = 3, max_n: int = 6,
                   bucket: int = 200_000, epochs: int = 10, min_count: int = 1, seed: int = 0, workers: int = 1):
    """Trains skip-gram fastText on ``sentences`` and writes the ``.bin`` ``out_path``.

    Args:
      sentences: lists of words. dim: vector width (cc.vi.300: 300). min_n, max_n: character n-gram lengths
        (fastText's defaults 3..6). bucket: n-gram hash buckets (fastText's default 2,000,000; fewer for a small
        corpus). epochs, min_count, seed, workers: gensim's.

    Returns:
      The trained gensim model.
    """
    from gensim.models import FastText  # heavy, optional: only to train vectors
    from gensim.models.fasttext import save_facebook_model

    model = FastText(vector_size=dim, sg=1, min_count=min_count, min_n=min_n, max_n=max_n, bucket=bucket,
                     seed=seed, workers=workers, epochs=epochs)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=epochs)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    save_facebook_model(model, out_path)
    return model


def main(argv=None) -> int:
    """Command line (module doc); a path that cannot serve or another user's error: one ``error:`` line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="config file (its data.* and train split are read)")
    p.add_argument("--out", required=True, help="the .bin to write")
    p.add_argument("--dim", type=int, default=300)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--bucket", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    return run_main(lambda: _train(args), sigterm=False)


def _train(args: argparse.Namespace) -> int:
    """Checks the paths, reads the train split, trains and writes the vectors."""
    paths.check_args(args, PATH_FLAGS)
    from openvivqa_jax.data.datasets import DataSplits  # heavy (JAX, grain, TFDS): once the paths are checked

    cfg = load_config(args.config)
    records = DataSplits(cfg.data).records(cfg.data.train_split)
    sentences = train_sentences(records)
    model = train_fasttext(sentences, args.out, dim=args.dim, epochs=args.epochs, bucket=args.bucket, seed=args.seed)
    print(f"wrote {args.out}: {len(model.wv.key_to_index)} words from {len(sentences)} sentences of "
          f"{len(records)} train records, dim {args.dim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
