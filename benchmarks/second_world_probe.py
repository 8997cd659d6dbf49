"""What the second world's region proposals hold, and what a region scorer learns from them.

Usage::

    python benchmarks/second_world.py --out ~/second_world --seed 1 --train_images 4000 --dev_images 300
    python benchmarks/second_world_probe.py --world ~/second_world [--train_images 800] [--steps 8000] \\
        [--scorer film|words|transformer|exists] [--objects] [--kinds exist,count] [--language en] \\
        [--weight_decay 0.1] [--learning_rate 1e-3] [--max_regions 16] [--min_area 0.03] [--feature_noise 0.5] \\
        [--scorer exists --polarity rules|learned --kinds exist,verify_colour,verify_shape,verify_size]

Reads a folder written by ``benchmarks/second_world.py`` and computes, for every picture of its ``train`` and
``dev`` splits, the region proposals the folder config computes
(:func:`openvivqa_jax.data.proposals.padded_proposals` with ``configs/folder/mlpag.py``'s image size, region
count and segmentation settings). Then:

* **hand rule**: colour-existence questions (``is there a red shape ?``, ``có hình màu đỏ nào không ?``) answered
  "yes" exactly when some proposal of at least 0.1% of the picture (``sqrt(area) >= 0.03``) has a mean colour
  within 0.12 of the colour's RGB (every channel, in ``[0, 1]``): if this scores 100%, the proposals carry what
  the question asks;
* **region scorer**: a model trained alone on the proposals, with no decoder, that scores each region against the
  question, pools the scores over the regions by max and by sum, and classifies the answer with an MLP over
  ``[question bag of words; pooled scores; mean region]``. ``--scorer film``: a FiLM-conditioned MLP (Perez et
  al., AAAI 2018; the region counter's scorer, :mod:`openvivqa_jax.models.counting`), 16 score channels;
  ``--scorer words``: each question word its own linear detector over a shared 2-layer region embedding, a
  region's score the product of the detectors of the words a learned gate keeps (a soft AND), 4 channels;
  ``--scorer transformer``: no pooling, the question's words and the regions in one sequence behind a
  classification token, two self-attention blocks of width 96 (:func:`_transformer`); ``--scorer exists``, for
  the yes/no kinds: each word its own detector of a shared region embedding, the question's existence the
  noisy-OR of its regions' scores, added to the affirming answers' logits and taken from the denying ones'
  with the question's polarity, from the negation rules of :mod:`openvivqa_jax.text.polarity` (``--polarity
  rules``, the default) or learned from the words (``--polarity learned``) (:func:`_exists`). ``--objects``: each
  region's colour, area, shape and box only (27 values), without the pixels of its box and context. Adam
  at a constant ``--learning_rate`` (1e-3; ``--weight_decay``: AdamW's decoupled decay), batch 64, on the first
  ``--train_images`` training pictures' questions of every kind but ``verify_text`` (which needs the OCR
  tokens). Its dev exact match per kind is printed at each quarter of ``--steps``, beside
  its training loss: a loss near 0 with dev at the majority answer is memorization. ``--max_regions K`` and
  ``--min_area A`` leave out distractor regions: only the ``K`` largest proposals of a picture (0: all), and only
  those with ``sqrt(area) >= A`` (the area as a fraction of the picture; 0: all) are scored, on both splits.
  ``--feature_noise S`` adds Gaussian noise of ``S`` standard deviations to the training batches' region
  features (dev is scored without it).

Prints one JSON object: ``hand_rule`` (``{split: [correct, questions]}``), ``majority`` (per kind, the dev exact
match of the most frequent answer of the kind in the question's language among the ``--train_images``
pictures' questions), ``probe`` (a list of
``{step, train_loss, dev, kinds}``) and the sizes. CPU: about 2.5 minutes for 8,000 steps of 4,000 pictures'
questions on 2 cores.

Errors (exit 2, one ``error:`` line): ``--world`` has no ``train.csv`` or ``dev.csv``; a negative
``--max_regions``, ``--min_area`` or ``--feature_noise``.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.config_files import load_config  # noqa: E402
from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM, padded_proposals  # noqa: E402
from openvivqa_jax.errors import UsageError  # noqa: E402
from openvivqa_jax.text.polarity import answer_polarity  # noqa: E402
from openvivqa_jax.text.polarity import polarity as polarity_of  # noqa: E402
from second_world_questions import COLOUR_VI  # noqa: E402
from second_world_scene import COLOURS  # noqa: E402

__all__ = ["load_split", "colour_existence", "hand_rule", "region_mask", "train_probe", "main"]

PATH_FLAGS = {"--world": paths.INPUT_DIR}
#: The proposal features of ``--objects``: mean and standard deviation of the colour, area and shape (the first
#: 6 + 1 + 16 of :mod:`openvivqa_jax.data.proposals`' features, the ones ``model.vision.proposal_features =
#: "objects"`` embeds), to which the box is added.
OBJECT_FEATURES = OBJECT_FEATURE_DIM
_EN = re.compile(r"is there an? (\w+) shape \?")
_VI = re.compile(r"có hình màu (.+) nào không \?")
_VI_COLOUR = {v: k for k, v in COLOUR_VI.items()}


def load_split(world: str, split: str, vision) -> dict:
    """One split of a world folder: ``rows`` (the CSV's dicts), ``image`` ``(questions,)`` int index of each
    question's picture, and the pictures' ``features`` ``(pictures, R, F)``, ``boxes`` ``(pictures, R, 4)`` and
    ``mask`` ``(pictures, R)`` bool (proposals at the folder config's settings ``vision``)."""
    path = os.path.join(world, f"{split}.csv")
    if not os.path.isfile(path):
        raise UsageError(f"{world} has no {split}.csv: write the world with benchmarks/second_world.py")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    pictures = sorted({r["image"] for r in rows})
    index = {p: i for i, p in enumerate(pictures)}
    feats, boxes, mask = [], [], []
    for p in pictures:
        with open(os.path.join(world, p), "rb") as f:
            fe, bo, ma, _ = padded_proposals(f.read(), p, width=vision.width, height=vision.height,
                                             max_pixels=10 ** 8, num_regions=vision.num_regions,
                                             min_size=vision.min_size, scale=vision.scale)
        feats.append(fe), boxes.append(bo), mask.append(ma)
    return {"rows": rows, "image": np.array([index[r["image"]] for r in rows]), "features": np.stack(feats),
            "boxes": np.stack(boxes), "mask": np.stack(mask)}


def colour_existence(question: str) -> str | None:
    """The colour name (:data:`second_world_scene.COLOURS`) a colour-existence question asks about, or None for
    any other question."""
    m = _EN.fullmatch(question)
    if m and m.group(1) in COLOURS:
        return m.group(1)
    m = _VI.fullmatch(question)
    return _VI_COLOUR.get(m.group(1)) if m else None


def hand_rule(split: dict) -> tuple[int, int]:
    """``(correct, questions)`` of the hand rule (module doc) on a :func:`load_split` split's colour-existence
    questions."""
    correct = total = 0
    for row, pic in zip(split["rows"], split["image"]):
        colour = colour_existence(row["question"])
        if colour is None:
            continue
        f = split["features"][pic][split["mask"][pic]]
        near = np.abs(f[:, :3] - np.array(COLOURS[colour]) / 255.0).max(1) < 0.12
        present = bool(np.any(near & (f[:, 6] >= 0.03)))
        correct += present == (row["answer"] in ("yes", "có"))
        total += 1
    return correct, total


def _arrays(split: dict, keep: np.ndarray, words: dict, answers: dict, max_words: int = 24) -> dict:
    rows = [r for r, k in zip(split["rows"], keep) if k]
    q = np.zeros((len(rows), max_words), np.int32)
    for i, r in enumerate(rows):
        ids = [words.get(w, 0) for w in r["question"].split()][:max_words]
        q[i, :len(ids)] = ids
    return {"image": split["image"][keep], "question": q, "answer": np.array([answers[r["answer"]] for r in rows]),
            "kind": np.array([r["kind"] for r in rows]),
            "sign": np.array([polarity_of(r["question"], r.get("language") or None) for r in rows], np.float32)}


def _scorer(scorer: str, f: int, v: int, a: int, seed: int, affirms: np.ndarray | None = None,
            polarity: str = "rules"):
    """``(params, forward)`` of a region scorer (module doc) over ``f`` region features, ``v`` question words and
    ``a`` answers; ``forward(params, regions (batch, R, f), mask (batch, R), question (batch, words) int,
    sign (batch,) float) -> (batch, a)`` answer logits. ``sign`` is each question's polarity (+1, or -1 when
    negated), read by the ``exists`` scorer with ``polarity = "rules"`` only; ``affirms`` ``(a,)`` is each
    answer's polarity (+1 affirming, -1 denying, 0 other), read by ``exists`` only."""
    import jax
    import jax.numpy as jnp

    if scorer == "transformer":
        return _transformer(f, v, a, seed)
    if scorer == "exists":
        return _exists(f, v, a, seed, affirms, polarity)
    h, k = 128, 16 if scorer == "film" else 4
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 8))

    def normal(shape, scale=None):
        return jax.random.normal(next(keys), shape) * (scale or 1 / np.sqrt(shape[0]))

    params = {"emb": normal((v, h), 0.1), "m1": normal((h + 2 * k + f, 256)), "m2": normal((256, a)),
              "c2": jnp.zeros((a,))}
    if scorer == "film":
        params.update({"add": normal((v, h), 0.1), "mul": normal((v, h), 0.1), "w1": normal((f, h)),
                       "w2": normal((h, h)), "w3": normal((h, k)), "b3": jnp.full((k,), -2.0)})
    else:
        params.update({"r1": normal((f, 64)), "r2": normal((64, 64)), "det": normal((v, k, 64), 0.1),
                       "det_b": jnp.zeros((v, k)), "gate": jnp.zeros((v, k))})

    def region_scores(p, x, qm, q):
        """``(batch, R, k)`` scores in [0, 1] of each region against the question."""
        if scorer == "film":
            n = jnp.maximum(qm.sum(1), 1.0)
            add, mul = ((p[name][q] * qm).sum(1) / n for name in ("add", "mul"))
            hid = jax.nn.relu(x @ p["w1"] + add[:, None])
            return jax.nn.sigmoid(jax.nn.relu((hid @ p["w2"]) * (1.0 + mul[:, None])) @ p["w3"] + p["b3"])
        phi = jax.nn.relu(x @ p["r1"]) @ p["r2"]
        det = jnp.einsum("blkh,brh->blrk", p["det"][q], phi) + p["det_b"][q][:, :, None]
        gate = jax.nn.sigmoid(p["gate"][q]) * qm
        return jnp.exp(jnp.einsum("blk,blrk->brk", gate, jax.nn.log_sigmoid(det)))

    def forward(p, x, m, q, sign=None):
        qm = (q > 0)[..., None].astype(jnp.float32)
        bag = (p["emb"][q] * qm).sum(1) / jnp.maximum(qm.sum(1), 1.0)
        s = region_scores(p, x, qm, q) * m[..., None]
        mean = (x * m[..., None]).sum(1) / jnp.maximum(m.sum(1), 1.0)[:, None]
        z = jax.nn.relu(jnp.concatenate([bag, s.max(1), s.sum(1) / 8.0, mean], -1) @ p["m1"])
        return z @ p["m2"] + p["c2"]

    return params, forward


def _transformer(f: int, v: int, a: int, seed: int, d: int = 96, layers: int = 2, heads: int = 4):
    """``(params, forward)`` of the ``transformer`` scorer: the question's words (learned word and position
    embeddings) and the regions (a 2-layer projection of their features) in one sequence behind a classification
    token, ``layers`` pre-norm self-attention blocks of width ``d`` (Vaswani et al., NeurIPS 2017), the answer
    from the classification token; ``forward`` as :func:`_scorer`'s."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, keep):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads)(h, h, mask=keep[:, None, None, :])
            return x + nn.Dense(d)(nn.gelu(nn.Dense(2 * d)(nn.LayerNorm()(x))))

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, m, q):
            kind = nn.Embed(3, d)
            words = nn.Embed(v, d)(q) + nn.Embed(q.shape[1], d)(jnp.arange(q.shape[1]))[None] + kind(jnp.array(1))
            regions = nn.Dense(d)(nn.relu(nn.Dense(d)(x))) + kind(jnp.array(2))
            cls = jnp.broadcast_to(kind(jnp.array(0)), (q.shape[0], 1, d))
            seq = jnp.concatenate([cls, words, regions], 1)
            keep = jnp.concatenate([jnp.ones((q.shape[0], 1), bool), q > 0, m > 0], 1)
            for _ in range(layers):
                seq = Block()(seq, keep)
            return nn.Dense(a)(nn.LayerNorm()(seq[:, 0]))

    model = Model()
    params = model.init(jax.random.PRNGKey(seed), jnp.zeros((1, 2, f)), jnp.ones((1, 2)), jnp.ones((1, 24), jnp.int32))
    return params, lambda p, x, m, q, sign=None: model.apply(p, x, m, q)


def _exists(f: int, v: int, a: int, seed: int, affirms: np.ndarray, polarity: str, h: int = 32):
    """``(params, forward)`` of the ``exists`` scorer, for yes/no questions: a region's score is a detector,
    the mean of the question's words' own detector vectors (and biases), applied to a shared one-layer ReLU
    embedding of the region's features (width ``h``); the question's existence probability is the noisy-OR of
    its regions' scores, ``ex = 1 - prod_r (1 - s_r)``. Its logit, times the question's polarity, is added to the
    affirming answers' logits and subtracted from the denying ones' (half each), beside a per-question prior over
    the answers (the mean of its words' answer biases: which pair of answer words the template takes). The
    polarity is the ``sign`` argument (:mod:`openvivqa_jax.text.polarity`'s rules) when ``polarity = "rules"``,
    else learned: the mean of the question's words' learned weights (0 at the start). ``forward`` as
    :func:`_scorer`'s."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(seed), 2)
    params = {"w1": jax.random.normal(keys[0], (f, h)) / np.sqrt(f), "b1": jnp.zeros(h),
              "det": jnp.zeros((v, h)), "det_b": jnp.zeros(v), "sign": jnp.zeros(v), "prior": jnp.zeros((v, a)),
              "c": jnp.zeros(a)}
    affirms = jnp.asarray(affirms, jnp.float32)

    def forward(p, x, m, q, sign=None):
        qm = (q > 0).astype(jnp.float32)
        mean = qm / jnp.maximum(qm.sum(1, keepdims=True), 1.0)  # (batch, words)
        det = jnp.einsum("bl,blh->bh", mean, p["det"][q])
        # Starts at -3: a region matches nothing until its detector is learned, so that a picture's many
        # regions do not all vote for existence.
        bias = jnp.einsum("bl,bl->b", mean, p["det_b"][q]) - 3.0
        hid = jax.nn.relu(x @ p["w1"] + p["b1"])
        s = jax.nn.sigmoid(jnp.einsum("brh,bh->br", hid, det) + bias[:, None]) * m
        log_none = jnp.sum(jnp.log1p(-jnp.clip(s, 0.0, 1.0 - 1e-6)), 1)  # log prod (1 - s_r)
        ex = jnp.clip(1.0 - jnp.exp(log_none), 1e-6, 1.0 - 1e-6)
        logit = jnp.log(ex) - jnp.log1p(-ex)
        sgn = sign if polarity == "rules" else jnp.einsum("bl,bl->b", mean, p["sign"][q])
        prior = jnp.einsum("bl,bla->ba", mean, p["prior"][q]) + p["c"]
        return prior + 0.5 * (sgn * logit)[:, None] * affirms[None]

    return params, forward


def region_mask(split: dict, max_regions: int = 0, min_area: float = 0.0) -> np.ndarray:
    """``(pictures, R)`` bool: the proposals of a :func:`load_split` split that the scorer reads, its ``mask``
    less the regions past the ``max_regions`` largest (proposals are stored largest first; 0 keeps all) and those
    whose ``sqrt(area)`` feature (the fraction of the picture, :mod:`openvivqa_jax.data.proposals`) is below
    ``min_area``."""
    mask = split["mask"].astype(bool).copy()
    if max_regions > 0:
        mask[:, max_regions:] = False
    if min_area > 0:
        mask &= split["features"][..., 6] >= min_area
    return mask


def train_probe(train: dict, dev: dict, *, train_images: int, steps: int, seed: int, scorer: str = "film",
                kinds: tuple[str, ...] = (), language: str = "", objects: bool = False,
                weight_decay: float = 0.0, learning_rate: float = 1e-3, max_regions: int = 0,
                min_area: float = 0.0, feature_noise: float = 0.0, polarity: str = "rules") -> list[dict]:
    """Trains a region scorer (module doc) on the questions of ``kinds`` (all but ``verify_text`` when empty) in
    ``language`` (both when empty), with Adam at a constant ``learning_rate`` (AdamW when ``weight_decay`` > 0),
    over each picture's ``max_regions`` largest proposals (0: all) of ``sqrt(area) >= min_area``, with Gaussian
    noise of standard deviation ``feature_noise`` (in units of each feature's training standard deviation) added
    to the training batches' region features (0: none; dev is scored without it), with the ``exists`` scorer's
    question polarity from the negation rules (``polarity = "rules"``) or learned (``"learned"``), and returns
    its dev exact match on the same kinds and language at each quarter of ``steps``:
    ``[{step, train_loss, dev, kinds: {kind: exact match}}]`` (percentages)."""
    import jax
    import optax

    def asked(r):
        return (r["kind"] in kinds if kinds else r["kind"] != "verify_text") and language in ("", r["language"])

    keep_t = (train["image"] < train_images) & np.array([asked(r) for r in train["rows"]])
    keep_d = np.array([asked(r) for r in dev["rows"]])
    vocab = sorted({w for s, k in ((train, keep_t), (dev, keep_d)) for r, x in zip(s["rows"], k) if x
                    for w in r["question"].split()})
    words = {w: i + 1 for i, w in enumerate(vocab)}
    answers = {a: i for i, a in enumerate(sorted({r["answer"] for r in train["rows"] + dev["rows"]}))}
    t, d = _arrays(train, keep_t, words, answers), _arrays(dev, keep_d, words, answers)

    def regions(s):
        # objects: the segment's own colour, area and shape and its box (27 values), not the pixels of its box
        # and context, which also identify the picture a question was asked about.
        x = np.concatenate([s["features"][..., :OBJECT_FEATURES] if objects else s["features"], s["boxes"]], -1)
        return x, region_mask(s, max_regions, min_area).astype(np.float32)

    (xt, mt), (xd, md) = regions(train), regions(dev)
    valid = mt[..., None] > 0
    mu = np.where(valid, xt, 0).sum((0, 1)) / mt.sum()
    sd = np.sqrt(np.where(valid, (xt - mu) ** 2, 0).sum((0, 1)) / mt.sum()) + 1e-3
    xt, xd = (xt - mu) / sd * mt[..., None], (xd - mu) / sd * md[..., None]
    affirms = np.array([answer_polarity(x) for x in answers], np.float32)
    params, forward = _scorer(scorer, xt.shape[-1], len(words) + 1, len(answers), seed, affirms, polarity)
    # weight_decay 0 is plain Adam. AdamW's decoupled decay is offered because it is the usual remedy for a
    # plateau where a model memorizes its training pictures before it generalizes.
    opt = optax.adamw(learning_rate, weight_decay=weight_decay)

    @jax.jit
    def step(p, st, x, m, q, sg, y):
        loss, g = jax.value_and_grad(
            lambda p: optax.softmax_cross_entropy_with_integer_labels(forward(p, x, m, q, sg), y).mean())(p)
        u, st = opt.update(g, st, p)
        return optax.apply_updates(p, u), st, loss

    predict = jax.jit(lambda p, x, m, q, sg: forward(p, x, m, q, sg).argmax(-1))
    st, rng, out = opt.init(params), np.random.default_rng(seed), []
    # Its own generator, so that the batches drawn are the same with and without the noise.
    noise_rng = np.random.default_rng([seed, 1])
    for i in range(1, steps + 1):
        idx = rng.integers(0, len(t["answer"]), 64)
        pic = t["image"][idx]
        x = xt[pic]
        if feature_noise > 0:
            x = x + feature_noise * noise_rng.standard_normal(x.shape, np.float32) * mt[pic][..., None]
        params, st, loss = step(params, st, x, mt[pic], t["question"][idx], t["sign"][idx], t["answer"][idx])
        if i % max(steps // 4, 1) == 0 or i == steps:
            ok = np.asarray(predict(params, xd[d["image"]], md[d["image"]], d["question"], d["sign"])) == d["answer"]
            out.append({"step": i, "train_loss": round(float(loss), 4), "dev": round(100 * ok.mean(), 1),
                        "kinds": {kd: round(100 * ok[d["kind"] == kd].mean(), 1) for kd in sorted(set(d["kind"]))}})
            print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    return out


def majority(train_rows: list[dict], dev_rows: list[dict]) -> dict:
    """Per kind, the dev exact match (%) of the most frequent training answer of the kind in the question's
    language (the majority-answer baseline of ``about/summary.json``; a tie goes to the answer first in
    sorted order)."""
    top = {}
    counts = collections.Counter((r["kind"], r["language"], r["answer"]) for r in train_rows)
    for key in sorted(counts, key=lambda k: (-counts[k], k[2])):  # ties: the answer first in sorted order
        top.setdefault(key[:2], key[2])
    best = {}
    for kind in sorted({r["kind"] for r in dev_rows}):
        dev = [r["answer"] == top.get((kind, r["language"])) for r in dev_rows if r["kind"] == kind]
        best[kind] = round(100 * float(np.mean(dev)), 1)
    return best


def main(argv: list[str] | None = None) -> dict:
    """The command line (module doc); prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", required=True, help="a folder written by benchmarks/second_world.py")
    p.add_argument("--train_images", type=int, default=800, help="train the scorer on the first N pictures")
    p.add_argument("--steps", type=int, default=8000, help="region scorer steps (0: the hand rule only)")
    p.add_argument("--scorer", choices=("film", "words", "transformer", "exists"), default="film")
    p.add_argument("--polarity", choices=("rules", "learned"), default="rules",
                   help="exists: each question's negation from openvivqa_jax.text.polarity's rules, or learned")
    p.add_argument("--objects", action="store_true", help="the regions' colour, area, shape and box only")
    p.add_argument("--kinds", default="", help="comma-separated kinds to train and score (default: all but "
                                                 "verify_text)")
    p.add_argument("--language", choices=("", "en", "vi"), default="", help="only this language's questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight_decay", type=float, default=0.0, help="AdamW's decoupled weight decay (0: Adam)")
    p.add_argument("--learning_rate", type=float, default=1e-3, help="Adam's constant learning rate")
    p.add_argument("--max_regions", type=int, default=0, help="score only each picture's N largest proposals "
                                                                "(0: all)")
    p.add_argument("--feature_noise", type=float, default=0.0, help="Gaussian noise (in standard deviations of "
                                                                      "each feature) on the training regions")
    p.add_argument("--min_area", type=float, default=0.0, help="score only proposals with sqrt(area) >= A, the "
                                                                 "area a fraction of the picture (0: all)")
    a = p.parse_args(argv)
    paths.check_args(a, PATH_FLAGS)
    if a.max_regions < 0 or a.min_area < 0 or a.feature_noise < 0:
        raise UsageError(f"--max_regions ({a.max_regions}), --min_area ({a.min_area}) and --feature_noise "
                         f"({a.feature_noise}) must be >= 0 (0: off)")
    world = os.path.expanduser(a.world)
    cfg = load_config("../configs/folder/mlpag.py", relative_to=__file__)
    vis = cfg.model.vision
    setting = argparse.Namespace(width=int(cfg.data.image_size[0]), height=int(cfg.data.image_size[1]),
                                 num_regions=int(vis.num_regions), min_size=int(vis.proposal_min_size),
                                 scale=float(vis.proposal_scale))
    train, dev = load_split(world, "train", setting), load_split(world, "dev", setting)
    pictures = {"train": int(train["image"].max()) + 1, "dev": int(dev["image"].max()) + 1}
    result = {"world": world, "pictures": pictures,
              "train_images": a.train_images,
              "hand_rule": {"train": list(hand_rule(train)), "dev": list(hand_rule(dev))},
              "majority": majority([r for r, i in zip(train["rows"], train["image"]) if i < a.train_images],
                                   dev["rows"])}
    if a.steps > 0:
        result["scorer"], result["objects"] = a.scorer, a.objects
        result["probe"] = train_probe(train, dev, train_images=a.train_images, steps=a.steps, seed=a.seed,
                                      scorer=a.scorer, kinds=tuple(k for k in a.kinds.split(",") if k),
                                      language=a.language, objects=a.objects,
                                      weight_decay=a.weight_decay, learning_rate=a.learning_rate,
                                      max_regions=a.max_regions, min_area=a.min_area,
                                      feature_noise=a.feature_noise, polarity=a.polarity)
        result.update(polarity=a.polarity, weight_decay=a.weight_decay, learning_rate=a.learning_rate,
                      max_regions=a.max_regions, min_area=a.min_area, feature_noise=a.feature_noise)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    sys.exit(run_script(main))
