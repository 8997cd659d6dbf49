"""The relevance task's evaluation: text-to-image and image-to-text retrieval recall of the encoder on the dev
and test pairs (``eval/<split>_retrieval.json``, one printed table); what the train loop
(:mod:`openvivqa_jax.relevance.train`) calls down into, and ``--mode evaluate`` (:func:`evaluate`).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from flax import nnx

from openvivqa_jax import outputs
from openvivqa_jax.models.w2vvpp import cosine_matrix, recall_at_k
from openvivqa_jax.relevance import RelevanceModelError
from openvivqa_jax.relevance.data import encode_split, setup
from openvivqa_jax.relevance.model import MODEL_FILE, build, load_encoder

__all__ = ["retrieval", "encode_fn", "final_evaluation", "evaluate"]


def retrieval(encode_fn, ids, text_image, visual, ks) -> dict[str, float]:
    """Text-to-image and image-to-text recall at ``ks`` (and ``rsum``) of the texts ``ids`` encoded by
    ``encode_fn`` against the images' ``visual`` features (``text_image``: each text's image)."""
    proj = encode_fn(ids)
    sims = np.asarray(cosine_matrix(jnp.asarray(proj), jnp.asarray(visual)))
    return recall_at_k(sims, text_image, ks)


def encode_fn(graphdef, batch_size: int):
    """``run(params, ids (n, words)) -> (n, visual_dim)``: the jitted encoder of ``graphdef`` over batches of
    ``batch_size`` (the last padded: one compiled shape)."""
    fn = jax.jit(lambda p, ids: nnx.merge(graphdef, p)(ids))

    def run(params, ids: np.ndarray) -> np.ndarray:
        out = []
        for s in range(0, len(ids), batch_size):
            chunk = ids[s:s + batch_size]
            pad = batch_size - len(chunk)
            full = np.concatenate([chunk, np.zeros((pad, ids.shape[1]), np.int32)]) if pad else chunk
            out.append(np.asarray(fn(params, jnp.asarray(full)))[: len(chunk)])
        return np.concatenate(out)

    return run


def final_evaluation(cfg, workdir, data, vocab, meta, params_of_best, graphdef) -> dict:
    """Dev and test retrieval with ``params_of_best``: ``eval/<split>_retrieval.json``, one table printed and
    logged; returns ``{split: recalls}``."""
    ks = tuple(int(k) for k in cfg.eval.ks)
    run = encode_fn(graphdef, int(cfg.eval.batch_size))
    results = {}
    os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
    for split in (cfg.data.eval_split, cfg.data.test_split):
        ids, text_image, visual, _ = encode_split(data, vocab, split, int(cfg.model.max_words), meta)
        r = retrieval(lambda x: run(params_of_best, x), ids, text_image, visual, ks)
        r.update(num_texts=len(ids), num_images=len(visual))
        results[split] = r
        if jax.process_index() == 0:
            outputs.write_json(os.path.join(workdir, "eval", f"{split}_retrieval.json"), r, indent=2,
                               ensure_ascii=True)
    names = [f"t2i_R@{k}" for k in ks] + [f"i2t_R@{k}" for k in ks] + ["rsum"]
    lines = [f"{'':10s}" + "".join(f"{n:>10s}" for n in names) + f"{'texts':>8s}{'images':>8s}"]
    for split, r in results.items():
        lines.append(f"{split:10s}" + "".join(f"{r[n]:10.4f}" for n in names)
                     + f"{r['num_texts']:8d}{r['num_images']:8d}")
    table = "\n".join(lines)
    logging.info("retrieval (%s, best checkpoint):\n%s", meta["language"], table)
    print(f"Retrieval recall ({meta['language']}):\n{table}")
    return results


def evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Scores dev and test retrieval with the best checkpoint of ``workdir`` (``--mode evaluate``).

    Raises:
      RelevanceModelError: no trained model in ``workdir``.
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.exists(os.path.join(workdir, MODEL_FILE)):
        raise RelevanceModelError(f"relevance model {workdir} not found: no {MODEL_FILE} there")
    workdir, data, vocab, meta = setup(cfg, workdir)
    enc = load_encoder(workdir)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: build(meta)), nnx.Param)
    return final_evaluation(cfg, workdir, data, vocab, meta, enc._params, graphdef)
