"""Benchmark: this project's train step and beam-3 decode beside a plain PyTorch implementation, side by side.

Usage (the lead's full run, about 8 minutes per round on a quiet 2-core CPU; see ``--rounds``)::

    python benchmarks/vs_reference.py --torch_python .venv-torch/bin/python [--models mlpag,qumlag,m4c]
        [--rounds 2] [--steps 2] [--decode_batch 16] [--threads 2]
    python benchmarks/vs_reference.py --quick [--torch_python ...]     # tiny shapes, seconds (tests)

For each round, model and mode (``train``, ``decode``) it runs two **whole processes** one after the other,
ours and the reference, alternating the order between rounds (ours first in even rounds, the reference first
in odd ones), so that both see the same machine state:

* **ours, train**: ``benchmarks/train_step.py``'s worker (the trainer's jitted step: forward, loss,
  gradients, optimizer update, dropout on) at the ``benchmark`` config's shapes (``configs/openvivqa/<name>.py``:
  batch 64, float32), ``--steps`` timed steps (median) after compilation and one warm-up step, then the 2048²
  float32 ``jnp.dot`` peak in the same process. XLA's default threading.
* **ours, decode**: ``benchmarks/decode.py``'s worker, our beam search of width 3 (KV cache, jitted loop) on
  ``--decode_batch`` examples, ``--decode_repeats`` timed calls after compilation and one warm-up call.
* **reference** (``benchmarks/torch_reference.py``, run by ``--torch_python``): the same architecture,
  layer counts and shapes written in plain PyTorch from the papers, ``torch.set_num_threads(--threads)``;
  train: forward, loss, backward, Adam, ``--steps`` timed steps after one warm-up step; decode: the
  evaluation loop a straightforward PyTorch implementation has, with **the whole decoder recomputed at
  every step** (no KV cache): beam 3 for QuMLAG (its authors evaluate it with beam 3), greedy for MLPAG and
  M4C; then the 2048² float32 ``torch.mm`` peak in the same process.

Both sides draw random inputs of the same shapes (the reference passes no data through this project's
pipeline). Throughputs: train ``examples_per_s = batch / median step seconds``; decode ``answers_per_s =
decode_batch / median call seconds``; with random weights EOS is rare, so every answer runs
``max_answer_len`` steps on both sides.

Printed (one JSON object on stdout): per model, for train and decode, the throughput of each side per round
and their medians, ``ratio_per_round`` (ours / theirs of the same round) and ``ratio_median`` (the median of
the paired ratios); the matmul peak of each framework (median over its train processes, GFLOP/s) and
``fraction_of_matmul_peak`` of our step (XLA cost-analysis FLOPs / step time / JAX's peak); the machine
(CPU model, cores, load averages at start and end). Without ``--torch_python``, or when that interpreter
cannot import torch, the reference is skipped with the reason in ``reference_skipped`` and ratios are null.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

MODELS = ("mlpag", "qumlag", "m4c")
HERE = os.path.dirname(os.path.abspath(__file__))
#: The reference decodes QuMLAG with beam 3 (as its authors evaluate it), the others greedily.
REFERENCE_DECODE = {"mlpag": "greedy", "qumlag": "beam-3", "m4c": "greedy"}


def reference_shapes(cfg, batch: int) -> dict:
    """The sizes the PyTorch reference is built with, read from an experiment config (``benchmark`` variant,
    or its ``--quick`` shrink): widths, layer counts, sequence lengths, feature widths, vocabulary, batch.

    Raises:
      ValueError: if the config's OCR feature groups are not ``pieces``, ``phoc`` and ``appearance`` (the
        only ones the reference implements) or its vision kind is not ``region``.
    """
    m = cfg.model
    if set(m.ocr_features) != {"pieces", "phoc", "appearance"} or m.vision.kind != "region":
        raise ValueError(f"vs_reference: the PyTorch reference implements region features and the OCR groups "
                         f"pieces/phoc/appearance; config {m.name} has vision {m.vision.kind!r}, OCR "
                         f"{tuple(m.ocr_features)}")
    get = lambda k, default=0: int(m.get(k, default) or default)  # noqa: E731
    return {"batch": batch, "d": int(m.d_model), "heads": int(m.num_heads), "ffn": int(m.ffn_dim),
            "dropout": float(m.dropout), "vocab": int(cfg.tokenizer.vocab_size), "num_ocr": int(m.num_ocr),
            "ans_len": int(m.max_answer_len), "q_len": int(m.max_question_len),
            "num_regions": int(m.vision.num_regions), "region_dim": int(m.vision.region_dim),
            "ocr_pieces": int(cfg.data.max_ocr_pieces), "phoc_dim": int(m.phoc_dim),
            "ocr_extra": {k: int(v) for k, v in sorted(dict(m.get("ocr_extra_features", {}) or {}).items())},
            "num_fusion_layers": get("num_fusion_layers"), "num_decoder_layers": get("num_decoder_layers"),
            "word_dim": get("word_dim", 300), "num_text_layers": get("num_text_layers"),
            "num_mmt_layers": get("num_mmt_layers"), "grad_clip_norm": float(cfg.train.grad_clip_norm or 0.0)}


def torch_available(python: str | None) -> str | None:
    """None if ``python`` can import torch, else the reason (one line)."""
    if not python:
        return "no --torch_python given"
    try:
        proc = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python}: {e}"
    if proc.returncode:
        return f"{python} cannot import torch: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def _run_json(cmd: list[str], timeout: float) -> dict:
    """Runs ``cmd`` (cwd: the repository root) and returns the last JSON object it printed.

    Raises:
      RuntimeError: non-zero exit or no JSON (with the stderr tail).
    """
    env = dict(os.environ, PYTHONPATH=common.ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=common.ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited with {proc.returncode}: {proc.stderr[-2000:]}")
    text = proc.stdout.strip()
    start = text.find("{")
    if start < 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... printed no JSON: {text[-500:]!r}")
    return json.loads(text[start:])


def ours(name: str, mode: str, args) -> dict:
    """One whole-process measurement of our side (``train_step.py`` or ``decode.py`` worker)."""
    smoke = ["--smoke"] if args.quick else []
    if mode == "train":
        cmd = [sys.executable, os.path.join(HERE, "train_step.py"), f"--worker={name}", f"--repeats={args.steps}",
               f"--matmul_n={args.matmul_n}"] + smoke
        r = _run_json(cmd, args.timeout_s)
        out = {"examples_per_s": r["examples_per_s"], "step_s_all": r["step_s_all"], "batch": r["batch"],
               "compile_s": r["compile_s"], "matmul_peak_gflops": r["matmul_peak"]["flops_per_s"] / 1e9}
        if r.get("fraction_of_matmul_peak") is not None:
            out["fraction_of_matmul_peak"] = r["fraction_of_matmul_peak"]
            out["flops_per_example"] = r["flops_per_example"]
        return out
    cmd = [sys.executable, os.path.join(HERE, "decode.py"), f"--worker={name}:beam", "--beam_size=3",
           f"--repeats={args.decode_repeats}", f"--batch={args.decode_batch}"] + smoke
    cmd += ["--share_memory"] if args.share_memory else []
    r = _run_json(cmd, args.timeout_s)
    return {"answers_per_s": r["answers_per_s"], "seconds_all": r["seconds_all"], "batch": r["batch"],
            "steps": r["steps"], "compile_s": r["compile_s"], "method": "beam-3"}


def theirs(name: str, mode: str, shapes: dict, args) -> dict:
    """One whole-process measurement of the PyTorch reference (``torch_reference.py``)."""
    cmd = [args.torch_python, os.path.join(HERE, "torch_reference.py"), f"--model={name}", f"--mode={mode}",
           f"--shapes={json.dumps(shapes)}", f"--steps={args.steps}", f"--decode_batch={args.decode_batch}",
           f"--decode_repeats={args.decode_repeats}", f"--threads={args.threads}", f"--matmul_n={args.matmul_n}"]
    r = _run_json(cmd, args.timeout_s)
    key = "examples_per_s" if mode == "train" else "answers_per_s"
    out = {key: r[key], "batch": r["batch"], "torch": r["torch"], "threads": r["threads"],
           "matmul_peak_gflops": r["matmul_peak"]["flops_per_s"] / 1e9}
    out["step_s_all" if mode == "train" else "seconds_all"] = r["step_s_all" if mode == "train" else "seconds_all"]
    if mode == "decode":
        out.update(method=REFERENCE_DECODE[name], steps=r["steps"])
    return out


def cpu_model() -> str:
    """``model name`` of the first CPU in ``/proc/cpuinfo`` (``unknown`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def summarize(rounds: list[dict], key: str) -> dict:
    """Medians over rounds of one (model, mode): ``{ours, theirs, ratio_per_round, ratio_median}``."""
    o = [r["ours"][key] for r in rounds]
    t = [r["theirs"][key] for r in rounds if "theirs" in r]
    ratios = [r["ours"][key] / r["theirs"][key] for r in rounds if "theirs" in r]
    return {f"ours_{key}": statistics.median(o), f"ours_{key}_per_round": o,
            f"theirs_{key}": statistics.median(t) if t else None, f"theirs_{key}_per_round": t,
            "ratio_per_round": ratios, "ratio_median": statistics.median(ratios) if ratios else None}


#: The path flags (openvivqa_jax.paths), checked before anything is measured.
PATH_FLAGS = {"--torch_python": common.paths.PROGRAM}


def main(argv=None) -> dict:
    """Parses flags, runs the alternated rounds, prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--torch_python", default=None, help="an interpreter that can import torch (the reference)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {MODELS}")
    p.add_argument("--modes", default="train,decode", help="comma-separated subset of train,decode")
    p.add_argument("--rounds", type=int, default=2, help="alternated rounds (ratios are their median)")
    p.add_argument("--steps", type=int, default=2, help="timed train steps per process (median)")
    p.add_argument("--decode_batch", type=int, default=16, help="examples decoded per call, both sides")
    p.add_argument("--decode_repeats", type=int, default=1, help="timed decode calls per process (median)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads of the reference")
    p.add_argument("--matmul_n", type=int, default=2048, help="size of the peak-FLOP/s matmul")
    p.add_argument("--timeout_s", type=float, default=1800, help="limit per process")
    p.add_argument("--share_memory", action="store_true",
                   help="our beam search reads one copy of the memory's keys/values per example (off by default)")
    p.add_argument("--quick", action="store_true", help="tiny shapes (benchmarks' --smoke), 1 round, 1 step")
    args = p.parse_args(argv)
    common.paths.check_args(args, PATH_FLAGS)
    models = common.parse_models(args.models, MODELS)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"train", "decode"}:
        raise common.FlagError(f"--modes {args.modes!r}: expected a comma-separated subset of train,decode")
    if args.quick:
        args.rounds, args.steps, args.matmul_n, args.decode_batch = 1, 1, 256, 2
    skipped = torch_available(args.torch_python)
    if skipped:
        common.log(f"reference skipped: {skipped}")
    t_start = time.time()
    result = {"benchmark": "vs_reference", "quick": args.quick, "rounds": args.rounds, "steps": args.steps,
              "decode_batch": args.decode_batch, "threads_reference": args.threads,
              "machine": dict(common.machine_info(), cpu_model=cpu_model()),
              "reference_skipped": skipped, "reference_decode": {m: REFERENCE_DECODE[m] for m in models},
              "ours_decode": "beam-3", "ours_share_memory": args.share_memory, "models": {}}
    shapes = {}
    for name in models:
        cfg = common.load_config(name)
        if args.quick:
            cfg = common.shrink_for_smoke(cfg)
        shapes[name] = reference_shapes(cfg, int(cfg.train.batch_size))
    runs = {(n, m): [] for n in models for m in modes}
    with tempfile.TemporaryDirectory() as cache:
        # Our later rounds load the compiled programs instead of recompiling (timed steps are unaffected).
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", cache)
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        for rnd in range(args.rounds):
            for name in models:
                for mode in modes:
                    entry = {}
                    order = ["ours", "theirs"] if rnd % 2 == 0 else ["theirs", "ours"]
                    for side in order:
                        if side == "theirs" and skipped:
                            continue
                        common.log(f"[round {rnd}] {name} {mode}: {side} ...")
                        entry[side] = ours(name, mode, args) if side == "ours" else theirs(name, mode, shapes[name],
                                                                                            args)
                    runs[(name, mode)].append(entry)
    for name in models:
        res = {"shapes": shapes[name]}
        for mode in modes:
            rs = runs[(name, mode)]
            res[mode] = summarize(rs, "examples_per_s" if mode == "train" else "answers_per_s")
            res[mode]["rounds"] = rs
        if "train" in modes:
            tr = runs[(name, "train")]
            res["matmul_peak_gflops_ours"] = statistics.median(r["ours"]["matmul_peak_gflops"] for r in tr)
            if not skipped:
                res["matmul_peak_gflops_theirs"] = statistics.median(r["theirs"]["matmul_peak_gflops"] for r in tr)
            fr = [r["ours"]["fraction_of_matmul_peak"] for r in tr if "fraction_of_matmul_peak" in r["ours"]]
            res["ours_fraction_of_matmul_peak"] = statistics.median(fr) if fr else None
        result["models"][name] = res
    result["machine"]["load_average_end"] = list(os.getloadavg())
    result["wall_s"] = time.time() - t_start
    common.emit(result)
    return result


if __name__ == "__main__":
    sys.exit(common.run_script(main))
