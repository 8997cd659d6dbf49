"""Benchmark: answers per second of jitted greedy and beam search, beside a plain full-recompute loop.

Usage::

    python benchmarks/decode.py [--models mlpag,m4c,qumlag] [--batch 64] [--beam_size 3] [--repeats 3]
                                [--reference_repeats 1] [--no_reference] [--smoke]

Models are the ``benchmark`` variants of ``configs/openvivqa/<name>.py`` (docs/design.md §10 shapes: batch 64, 50
regions x 1024 with boxes, question 20, answer 20 steps, 50 OCR tokens with det 256 / rec 256 / fastText
300 features and boxes, vocabulary 4,000), randomly initialized, on random inputs
(:func:`benchmarks.common.model_inputs`). For each model, each in a fresh process (peak RSS per
measurement):

* ``greedy`` and ``beam``: :func:`openvivqa_jax.vqa.decoding.make_decode_fn` (one jitted ``lax.while_loop``,
  KV cache, cross-attention keys/values and M4C's prefix computed once; with ``--share_memory`` the beams
  of an example read one copy of the memory's keys/values instead of one each); compile time
  (``fn.lower(...).compile()``), then the median of ``--repeats`` calls after one warm-up call.
* ``reference``: the reference PyTorch implementation's decoding, in JAX: a plain Python loop, not jitted,
  that at every step runs the model's full teacher-forced forward (encoder included) on the growing
  prefix, takes the argmax of the last position (PAD/UNK/BOS banned, as ours) on the host, and stops when
  every answer has produced EOS. One untimed warm-up loop (JAX's per-op dispatch compiles each op shape
  once; a long evaluation would run warm; ``--reference_warmup``), then ``--reference_repeats`` timed loops.

Answers per second are ``batch / seconds``. With random weights EOS is rare, so every answer runs all
``max_answer_len`` steps (reported as ``steps``). ``reference_agreement`` is the fraction of answers on
which the full-recompute loop and the cached greedy search emit identical ids (cached decoding must give
the full recompute's logits, docs/design.md §7). Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

MODELS = ("mlpag", "m4c", "qumlag", "fst")
MODES = ("greedy", "beam", "reference")


def _setup(name: str, smoke: bool, batch: int | None, dtype: str | None = None):
    from flax import nnx

    from openvivqa_jax.models import build_model

    cfg = common.load_config(name)
    if smoke:
        cfg = common.shrink_for_smoke(cfg)
    if dtype:
        cfg.model.dtype = dtype
    b = batch or cfg.train.batch_size
    vocab = int(cfg.tokenizer.vocab_size)
    model = build_model(cfg.model, vocab, seed=cfg.seed)
    inputs = {k: jnp.asarray(v) for k, v in common.model_inputs(cfg, vocab, b).items()}
    return cfg, model, inputs, b, vocab, nnx


def reference_greedy(model, batch: dict, *, max_len: int, bos_id: int = 2, eos_id: int = 3, pad_id: int = 0,
                     banned=(0, 1, 2)) -> tuple[np.ndarray, int]:
    """Greedy decoding by full recompute, un-jitted (the reference implementation's loop).

    Step ``t`` calls ``model(batch with decoder_in = [BOS, y_1 .. y_t])`` (the teacher-forced forward of
    the whole model, ``(batch, t + 1, V + N)`` logits), bans PAD/UNK/BOS, takes the argmax of the last
    position on the host; finished answers feed PAD, as :func:`openvivqa_jax.vqa.decoding.greedy_search`.

    Returns:
      ``(ids (batch, max_len) int32 with PAD after EOS, number of steps run)``.
    """
    from openvivqa_jax.models.layers import NEG_INF

    b = batch["question"].shape[0]
    prefix = np.full((b, 1), bos_id, np.int32)
    out = np.full((b, max_len), pad_id, np.int32)
    done = np.zeros((b,), bool)
    steps = 0
    for t in range(max_len):
        logits = model(dict(batch, decoder_in=jnp.asarray(prefix)))[:, -1]
        logits = logits.at[:, jnp.asarray(banned)].set(NEG_INF)
        nxt = np.asarray(jnp.argmax(logits, -1)).astype(np.int32)  # host sync every step
        nxt = np.where(done, pad_id, nxt)
        out[:, t] = nxt
        done |= nxt == eos_id
        steps = t + 1
        if done.all():
            break
        prefix = np.concatenate([prefix, nxt[:, None]], 1)
    return out, steps


def worker(args) -> dict:
    """One model, one mode, in this process."""
    name, mode = args.worker.split(":")
    t0 = time.perf_counter()
    cfg, model, inputs, b, vocab, nnx = _setup(name, args.smoke, args.batch, args.dtype)
    max_len = int(cfg.model.max_answer_len)
    res = {"model": name, "mode": mode, "batch": b, "max_len": max_len, "vocab_size": vocab,
           "dtype": cfg.model.dtype, "setup_s": time.perf_counter() - t0}
    if mode == "reference":
        t1 = time.perf_counter()
        for _ in range(args.reference_warmup):
            common.log(f"[{name}] reference loop (full recompute, un-jitted): warm-up")
            reference_greedy(model, inputs, max_len=max_len)
        res["warmup_s"] = time.perf_counter() - t1
        secs = []
        for r in range(args.reference_repeats):
            t1 = time.perf_counter()
            ids, steps = reference_greedy(model, inputs, max_len=max_len)
            secs.append(time.perf_counter() - t1)
            common.log(f"[{name}] reference repeat {r}: {secs[-1]:.2f} s")
        res["steps"] = steps
    else:
        from openvivqa_jax.vqa import decoding

        graphdef, params = nnx.split(model, nnx.Param)
        del model
        fn = decoding.make_decode_fn(graphdef, max_len=max_len, beam_size=args.beam_size, alpha=0.0,
                                     method="greedy" if mode == "greedy" else "beam", share_memory=args.share_memory)
        t1 = time.perf_counter()
        compiled = fn.lower(params, inputs).compile()
        res["compile_s"] = time.perf_counter() - t1
        res["peak_rss_after_compile_mb"] = common.peak_rss_mb()
        out = {}

        def call():
            out["ids"] = compiled(params, inputs)[0]
            return out["ids"]

        secs = common.time_calls(call, args.repeats)
        ids = np.asarray(out["ids"])
        res["steps"] = int((ids != 0).sum(1).max())
        if mode == "beam":
            res["beam_size"] = args.beam_size
            res["share_memory"] = args.share_memory
    if args.ids_out:
        np.save(args.ids_out, ids)
    res["seconds_median"] = statistics.median(secs)
    res["seconds_all"] = secs
    res["answers_per_s"] = b / res["seconds_median"]
    res["peak_rss_mb"] = common.peak_rss_mb()
    common.log(f"[{name}] {mode}: {res['answers_per_s']:.2f} answers/s, peak RSS {res['peak_rss_mb']:.0f} MiB")
    return res


#: The path flags (openvivqa_jax.paths), checked before anything is measured: ``--ids_out`` is where a worker
#: writes its decoded ids.
PATH_FLAGS = {"--ids_out": common.paths.OUTPUT_FILE}


def main(argv=None) -> dict:
    """Parses flags, runs the workers, prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="mlpag,m4c,qumlag", help=f"comma-separated subset of {MODELS}")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the config's, 64)")
    p.add_argument("--beam_size", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="timed calls of the jitted decoders (median)")
    p.add_argument("--reference_repeats", type=int, default=1, help="timed full-recompute loops (median)")
    p.add_argument("--reference_warmup", type=int, default=1, help="untimed full-recompute loops first")
    p.add_argument("--no_reference", action="store_true", help="skip the full-recompute reference loop")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                   help="compute dtype (model.dtype; parameters stay float32); default: the config's, float32")
    p.add_argument("--share_memory", action="store_true",
                   help="beam search keeps the memory's cross-attention keys/values once per example "
                        "(decoding.beam_search(share_memory=True); float results may differ by ~1e-7)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests)")
    p.add_argument("--ids_out", default=None, help=argparse.SUPPRESS)
    args, res = common.parse_flags(p, argv, worker, PATH_FLAGS)
    if args.worker:
        return res
    models = common.parse_models(args.models, MODELS)
    result = {"benchmark": "decode", "machine": common.machine_info(), "smoke": args.smoke,
              "beam_size": args.beam_size, "repeats": args.repeats, "models": {}}
    script = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            entry = {}
            for mode in MODES:
                if mode == "reference" and args.no_reference:
                    continue
                common.log(f"[{name}] {mode} ...")
                wargs = [f"--worker={name}:{mode}", f"--beam_size={args.beam_size}", f"--repeats={args.repeats}",
                         f"--reference_repeats={args.reference_repeats}",
                         f"--reference_warmup={args.reference_warmup}",
                         f"--ids_out={os.path.join(tmp, f'{name}_{mode}.npy')}"]
                if args.batch:
                    wargs.append(f"--batch={args.batch}")
                if args.dtype:
                    wargs.append(f"--dtype={args.dtype}")
                if args.smoke:
                    wargs.append("--smoke")
                if args.share_memory:
                    wargs.append("--share_memory")
                r = common.run_worker(script, wargs)
                entry[mode] = {k: v for k, v in r.items() if k not in ("model", "mode")}
            if "reference" in entry:
                ref = entry["reference"]["answers_per_s"]
                entry["speedup_greedy_vs_reference"] = entry["greedy"]["answers_per_s"] / ref
                entry["speedup_beam_vs_reference"] = entry["beam"]["answers_per_s"] / ref
                g = np.load(os.path.join(tmp, f"{name}_greedy.npy"))
                rf = np.load(os.path.join(tmp, f"{name}_reference.npy"))
                entry["reference_agreement"] = float((g == rf).all(1).mean())
            entry["peak_rss_mb"] = max(v["peak_rss_mb"] for v in entry.values() if isinstance(v, dict))
            result["models"][name] = entry
    common.emit(result)
    return result


if __name__ == "__main__":
    sys.exit(common.run_script(main))
