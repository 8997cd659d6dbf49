"""Benchmark: training-step throughput, compile time, FLOPs and peak memory; optional op-type profile.

Usage::

    python benchmarks/train_step.py [--models mlpag,m4c,qumlag,fst] [--batch 64] [--repeats 5] [--smoke]
    python benchmarks/train_step.py --models default --profile      # where the default step's time goes

Models: ``default`` (``configs/synthetic/base.py``, the synthetic-data MLPAG with the pixel CNN,
batch 32) or the ``benchmark`` variants
of ``configs/openvivqa/<name>.py`` (docs/design.md §10 shapes, batch 64, vocabulary 4,000), randomly initialized, on
random inputs (:func:`benchmarks.common.model_inputs`). Each model runs in a fresh process. The step is the
trainer's own (:func:`openvivqa_jax.vqa.train.make_train_step`: forward, loss, gradients, optimizer update,
donated state, dropout on) over the state of :func:`benchmarks.common.bench_state`.

Reported per model:

* ``compile_s``: ``step.lower(state, batch).compile()``;
* ``step_s_median`` (median of ``--repeats`` steps after one warm-up step) and ``examples_per_s``;
* ``flops_per_example``: XLA's cost analysis of the compiled step (``cost_analysis()['flops']``) / batch;
* ``achieved_flops_per_s`` and ``fraction_of_matmul_peak``: against the median FLOP/s of a 2048 x 2048
  float32 ``jnp.dot`` measured in the same process right after the steps (:func:`common.matmul_peak`);
* ``peak_rss_mb`` of the process (``peak_rss_after_compile_mb``: the peak before the first step, i.e. the
  model, the train state, the inputs and XLA's compilation); ``num_params``.

With ``--profile`` the steps also run under ``jax.profiler.trace``; the CPU thunks of the trace are matched
to the instructions of the compiled HLO and their time summed by op type (``profile`` in the JSON).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from openvivqa_jax.training import sharding  # noqa: E402

MODELS = ("default", "main") + common.PAPER_MODELS
#: Number of most expensive instructions listed in ``profile.top_ops``.
TOP_OPS = 15

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([\w\-]+)\((.*)$")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def _hlo_index(hlo_text: str) -> tuple[dict, dict]:
    """``(instructions, computations)``: name -> (opcode, called computation) and computation -> the opcodes
    in it and, transitively, in the computations it calls (a ``call`` of JAX's threefry holds fusions of
    xor/shift ops)."""
    instrs, comps, calls = {}, collections.defaultdict(list), collections.defaultdict(set)
    current = None
    for line in hlo_text.splitlines():
        m = _COMP.match(line.strip()) if not line.startswith(" ") else None
        if m:
            current = m.group(1)
            continue
        m = _INSTR.match(line)
        if m:
            name, _, opcode, rest = m.groups()
            c = _CALLS.findall(rest)
            instrs[name] = (opcode, c[0] if c else None)
            if current:
                comps[current].append(opcode)
                calls[current].update(c)

    def closure(comp, seen):
        ops = list(comps.get(comp, ()))
        for sub in calls.get(comp, ()):
            if sub not in seen:
                seen.add(sub)
                ops += closure(sub, seen)
        return ops

    return instrs, {c: closure(c, {c}) for c in list(comps)}


def _category(name: str, instrs: dict, comps: dict) -> str:
    """Op type of thunk ``name`` (an HLO instruction name): matmul, convolution, reduction, data movement..."""
    base = name
    if base not in instrs:
        base = re.sub(r"\.\d+$", "", name)  # thunk names may drop or change a numeric suffix
    opcode, called = instrs.get(name) or instrs.get(base) or (None, None)
    ops = set(comps.get(called, ())) if called else set()
    if opcode is None:
        low = name.lower()
        if "ynn" in low or "dot" in low or "gemm" in low or "matmul" in low:
            return "matmul (dot)"
        return "other"
    if opcode in ("dot",) or "dot" in ops or (opcode == "fusion" and "ynn" in name and "convolution" not in ops):
        return "matmul (dot)"
    if opcode == "convolution" or "convolution" in ops:
        return "convolution"
    if opcode in ("reduce", "reduce-window", "select-and-scatter") or ops & {"reduce", "reduce-window"}:
        return "reduction (softmax/LayerNorm/loss sums)"
    if opcode in ("scatter", "gather", "dynamic-slice", "dynamic-update-slice") or ops & {"scatter", "gather"}:
        return "gather/scatter (embeddings)"
    if opcode in ("copy", "transpose", "concatenate", "pad", "slice", "broadcast", "reshape", "bitcast"):
        return "data movement (copy/transpose/concat)"
    if opcode == "rng-bit-generator" or "rng-bit-generator" in ops or "xor" in ops:  # threefry rounds
        return "random bits (dropout masks)"
    if opcode == "fusion":
        return "elementwise fusion"
    if opcode in ("while", "conditional", "call", "custom-call"):
        return opcode
    return "other: " + opcode


def profile_steps(compiled, state, batch, steps: int, hlo_text: str) -> tuple[dict, object]:
    """Runs ``steps`` steps under ``jax.profiler.trace`` and sums the CPU thunk time by op type.

    Returns:
      ``(profile, state)``: profile ``{"by_category": {category: {"ms_per_step", "share"}}, "top_ops":
      [[name, category, ms_per_step], ...], "thunk_ms_per_step", "wall_ms_per_step"}`` (thunks may run
      on several threads, so thunk time can exceed wall time).
    """
    instrs, comps = _hlo_index(hlo_text)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(steps):
                state, m = compiled(state, batch)
                jax.block_until_ready(m)
        wall = (time.perf_counter() - t0) / steps
        files = glob.glob(os.path.join(tmp, "**", "*.trace.json.gz"), recursive=True)
        if not files:
            return {"error": "jax.profiler.trace wrote no perfetto trace"}, state
        with gzip.open(files[0], "rt") as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    skip = ("$", "PjitFunction", "CommonPjRt", "ThunkExecutor", "Thread", "end:", "Allocate", "Handle", "Parse",
            "PythonRefManager", "Wait for", "Await", "Execute")
    by_op = collections.Counter()
    for e in events:
        if e.get("ph") != "X" or not e.get("name") or e["name"].startswith(skip):
            continue
        if e["name"] in instrs or re.sub(r"\.\d+$", "", e["name"]) in instrs or "fusion" in e["name"]:
            by_op[e["name"]] += float(e.get("dur", 0.0)) / 1000.0  # microseconds -> ms
    total = sum(by_op.values())
    cats = collections.Counter()
    for name, ms in by_op.items():
        cats[_category(name, instrs, comps)] += ms
    return {
        "wall_ms_per_step": wall * 1000.0,
        "thunk_ms_per_step": total / steps,
        "by_category": {c: {"ms_per_step": ms / steps, "share": ms / max(total, 1e-9)} for c, ms in cats.most_common()},
        "top_ops": [[n, _category(n, instrs, comps), ms / steps] for n, ms in by_op.most_common(TOP_OPS)],
        "hlo_op_counts": dict(collections.Counter(op for op, _ in instrs.values()).most_common(12)),
    }, state


def worker(args) -> dict:
    """One model in this process."""
    name = args.worker
    cfg = common.load_config(name)
    if args.smoke:
        cfg = common.shrink_for_smoke(cfg)
    if args.dtype:
        cfg.model.dtype = args.dtype
    for item in args.set:
        common.set_field(cfg, item)
    b = args.batch or int(cfg.train.batch_size)
    vocab = int(cfg.tokenizer.vocab_size)
    t0 = time.perf_counter()
    from openvivqa_jax.data.pipeline import to_global
    from openvivqa_jax.vqa.train import make_train_step
    spec, state = common.bench_state(cfg, vocab)
    batch = to_global(common.model_inputs(cfg, vocab, b), spec.batch_sharding)
    res = {"model": name, "batch": b, "vocab_size": vocab, "dtype": cfg.model.dtype, "num_params": spec.num_params,
           "setup_s": time.perf_counter() - t0}
    step = make_train_step(spec)
    t1 = time.perf_counter()
    with sharding.mesh_context(spec.mesh):
        compiled = step.lower(state, batch).compile()
    res["compile_s"] = time.perf_counter() - t1
    res["peak_rss_after_compile_mb"] = common.peak_rss_mb()  # model, state, inputs and XLA's compilation
    flops = common.cost_flops(compiled)
    box = {"state": state}
    del state

    def call():
        box["state"], m = compiled(box["state"], batch)
        return m

    secs = common.time_calls(call, args.repeats, warmup=1)
    loss = float(call()["loss"])
    med = statistics.median(secs)
    res.update(step_s_median=med, step_s_all=secs, examples_per_s=b / med, loss_finite=bool(np.isfinite(loss)))
    common.log(f"[{name}] {b / med:.2f} examples/s ({med * 1000:.0f} ms/step), compile {res['compile_s']:.1f} s")
    peak = common.matmul_peak(n=args.matmul_n)
    res["matmul_peak"] = peak
    if flops is not None:
        res["flops_per_example"] = flops / b
        res["achieved_flops_per_s"] = flops / med
        res["fraction_of_matmul_peak"] = flops / med / peak["flops_per_s"]
    if args.profile:
        prof, box["state"] = profile_steps(compiled, box["state"], batch, args.profile_steps, compiled.as_text())
        res["profile"] = prof
    res["peak_rss_mb"] = common.peak_rss_mb()
    return res


def main(argv=None) -> dict:
    """Parses flags, runs one worker per model, prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="mlpag,m4c,qumlag,fst", help=f"comma-separated subset of {MODELS}")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the config's)")
    p.add_argument("--repeats", type=int, default=5, help="timed steps (median)")
    p.add_argument("--matmul_n", type=int, default=2048, help="size of the peak-FLOP/s matmul")
    p.add_argument("--profile", action="store_true", help="also profile the step by op type")
    p.add_argument("--profile_steps", type=int, default=3)
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                   help="compute dtype (model.dtype; parameters stay float32); default: the config's, float32")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field, e.g. --set model.dropout=0.0 (repeatable; VALUE as a Python literal)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests)")
    args, res = common.parse_flags(p, argv, worker)
    if args.worker:
        return res
    models = common.parse_models(args.models, MODELS)
    result = {"benchmark": "train_step", "machine": common.machine_info(), "smoke": args.smoke,
              "repeats": args.repeats, "overrides": args.set, "models": {}}
    for name in models:
        common.log(f"[{name}] ...")
        wargs = [f"--worker={name}", f"--repeats={args.repeats}", f"--matmul_n={args.matmul_n}",
                 f"--profile_steps={args.profile_steps}"]
        wargs += [f"--batch={args.batch}"] if args.batch else []
        wargs += [f"--dtype={args.dtype}"] if args.dtype else []
        wargs += ["--smoke"] if args.smoke else []
        wargs += ["--profile"] if args.profile else []
        wargs += [f"--set={item}" for item in args.set]
        r = common.run_worker(os.path.abspath(__file__), wargs)
        result["models"][name] = {k: v for k, v in r.items() if k != "model"}
    common.emit(result)
    return result


if __name__ == "__main__":
    sys.exit(common.run_script(main))
