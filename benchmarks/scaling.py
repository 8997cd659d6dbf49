"""Benchmark: data-parallel step time on 1, 2, 4 and 8 fake CPU devices, and a per-step estimate for the
paper's MLPAG and M4C on a TPU v5e-8 and on 8 H100s from XLA's FLOP count.

Usage::

    python benchmarks/scaling.py [--devices 1,2,4,8] [--repeats 10] [--models mlpag,m4c]
                                 [--mfu 0.3] [--global_batch 64] [--smoke]

Part 1, measured (``scaling``): for each device count K a fresh process runs with
``XLA_FLAGS=--xla_force_host_platform_device_count=K`` and times the trainer's own step
(:func:`openvivqa_jax.vqa.train.make_train_step` over :func:`benchmarks.common.bench_state`: forward, loss,
gradients, Adam, donated state) at ``configs/synthetic/base.py``'s shapes (global batch 32, mesh ``(-1, 1)``, i.e. the
batch split K ways along ``data``) on random inputs (:func:`benchmarks.common.model_inputs`). Reported: the
compile time and the median of ``--repeats`` steps after one warm-up step. The K fake devices are threads of
one process on the same CPU cores, so this measures what partitioning costs (per-device overhead,
all-reduces of the gradients), not a speed-up: the same program on K real chips would divide the per-device
work by K.

Part 2, estimated (``estimates``): for each paper model (``configs/openvivqa/<name>.py:benchmark``, docs/design.md §10
shapes: batch 64, 50 regions x 1024, 50 OCR tokens with det/rec/fastText features, question 20, answer 20,
vocabulary 4,000) the training step is lowered and compiled on one CPU device from abstract values only
(``jax.eval_shape`` of the model, parameters, optimizer state and batch; nothing is initialized or run)
and XLA's ``cost_analysis()['flops']`` gives the FLOPs of one step (forward, backward, optimizer). Then::

    step_seconds = flops_per_example * global_batch / (chips * peak_bf16_flops_per_chip * MFU)

with the peaks in :data:`ACCELERATORS` (vendor dense bf16 numbers, no sparsity) and ``--mfu`` the assumed
model-FLOPs utilization. Every assumption is repeated in the JSON.

Prints one JSON object on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

import jax  # noqa: E402

from openvivqa_jax.training import sharding  # noqa: E402

#: Dense bfloat16 peak per chip (FLOP/s) and the bandwidth one chip can send into a ring all-reduce
#: (bytes/s), from the vendors' data sheets.
ACCELERATORS = {
    "tpu_v5e_8": {"chips": 8, "peak_bf16_flops_per_chip": 197e12, "allreduce_bytes_per_s_per_chip": 200e9,
                  "source": "Cloud TPU v5e data sheet: 197 TFLOP/s bf16 and 1,600 Gbit/s ICI per chip"},
    "8x_h100_sxm": {"chips": 8, "peak_bf16_flops_per_chip": 989e12, "allreduce_bytes_per_s_per_chip": 450e9,
                    "source": "NVIDIA H100 SXM: 989 TFLOP/s dense bf16 (1,979 with sparsity); NVLink 4 "
                              "900 GB/s bidirectional, i.e. 450 GB/s each way"},
}

PAPER = ("mlpag", "m4c")


def _measure(k: int, repeats: int, smoke: bool) -> dict:
    """Worker: times the default config's train step on this process's ``k`` (fake) devices."""
    if jax.device_count() != k:
        raise RuntimeError(f"expected {k} devices, found {jax.device_count()} (XLA_FLAGS not applied?)")
    cfg = common.load_config("default")
    if smoke:
        cfg = common.shrink_for_smoke(cfg)
        cfg.train.batch_size = 8
    cfg.mesh.shape = (-1, 1)
    vocab = cfg.tokenizer.vocab_size
    from openvivqa_jax.data.pipeline import to_global
    from openvivqa_jax.vqa.train import make_train_step
    spec, state = common.bench_state(cfg, vocab)
    batch = to_global(common.model_inputs(cfg, vocab, batch=cfg.train.batch_size), spec.batch_sharding)
    step = make_train_step(spec)
    t0 = time.perf_counter()
    with sharding.mesh_context(spec.mesh):
        compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t0
    holder = {"state": state}
    del state

    def one():
        with sharding.mesh_context(spec.mesh):
            holder["state"], m = compiled(holder["state"], batch)
        return m["loss"]

    secs = common.time_calls(one, repeats, warmup=1)
    return {"devices": k, "mesh": dict(spec.mesh.shape), "global_batch": cfg.train.batch_size,
            "per_device_batch": cfg.train.batch_size // k, "compile_s": round(compile_s, 2),
            "step_s_median": statistics.median(secs), "step_s_min": min(secs),
            "examples_per_s": cfg.train.batch_size / statistics.median(secs), "num_params": spec.num_params}


def _flops(name: str, smoke: bool) -> dict:
    """Worker: FLOPs of one training step of paper model ``name`` from lowering only."""
    cfg = common.load_config(name)
    if smoke:
        cfg = common.shrink_for_smoke(cfg)
    batch_size = cfg.train.batch_size
    vocab = cfg.tokenizer.vocab_size
    from openvivqa_jax.vqa.train import make_train_step

    spec, _ = common.bench_state(cfg, vocab, abstract=True)
    inputs = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=spec.batch_sharding)
              for k, v in common.model_inputs(cfg, vocab, batch=batch_size).items()}
    t0 = time.perf_counter()
    with sharding.mesh_context(spec.mesh):
        compiled = make_train_step(spec).lower(spec.abstract_state, inputs).compile()
    flops = common.cost_flops(compiled)
    return {"model": name, "config": f"configs/openvivqa/{name}.py:benchmark", "num_params": spec.num_params,
            "batch": batch_size, "step_flops": flops, "flops_per_example": flops / batch_size if flops else None,
            "compile_s": round(time.perf_counter() - t0, 2), "dtype": cfg.model.dtype}


def _estimates(flops_rows: list[dict], mfu: float, global_batch: int, grad_bytes: int = 4) -> dict:
    """Per model and accelerator: compute time at the assumed MFU, the ring all-reduce of the gradients
    (``2 (n - 1) / n * grad_bytes * num_params / bandwidth``; float32 gradients of float32 master
    weights), and the step between full overlap (max) and none (sum)."""
    out = {}
    for row in flops_rows:
        per = {}
        for acc, spec in ACCELERATORS.items():
            n = spec["chips"]
            compute = row["flops_per_example"] * global_batch / (n * spec["peak_bf16_flops_per_chip"] * mfu)
            comm = 2.0 * (n - 1) / n * grad_bytes * row["num_params"] / spec["allreduce_bytes_per_s_per_chip"]
            per[acc] = {"compute_ms": compute * 1e3, "allreduce_ms": comm * 1e3,
                        "step_ms_overlapped": max(compute, comm) * 1e3, "step_ms_serial": (compute + comm) * 1e3,
                        "examples_per_s_range": [global_batch / (compute + comm), global_batch / max(compute, comm)],
                        "per_chip_batch": global_batch / n}
        out[row["model"]] = per
    return out


#: The path flags (openvivqa_jax.paths), checked before anything is measured.
PATH_FLAGS = {"--reuse": common.paths.INPUT_FILE}


def main(argv=None) -> None:
    """Command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="1,2,4,8")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--models", default=",".join(PAPER))
    p.add_argument("--mfu", type=float, default=0.3, help="assumed model-FLOPs utilization")
    p.add_argument("--global_batch", type=int, default=64, help="global batch of the estimates")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests only)")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--reuse", default="", help="recompute the estimates from this earlier output (no measuring)")
    a = p.parse_args(argv)
    common.paths.check_args(a, PATH_FLAGS)
    if a.worker:
        kind, arg = a.worker.split(":")
        res = _measure(int(arg), a.repeats, a.smoke) if kind == "measure" else _flops(arg, a.smoke)
        common.emit(res)
        return
    script = os.path.abspath(__file__)
    smoke = ["--smoke"] if a.smoke else []
    if a.reuse:
        with open(a.reuse, encoding="utf-8") as f:
            old = json.load(f)
        old["estimates"] = _estimate_block(old["flops"], a)
        common.emit(old)
        return
    rows = []
    for k in [int(x) for x in a.devices.split(",") if x.strip()]:
        common.log(f"scaling: {k} device(s)")
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={k}"
        os.environ["JAX_PLATFORMS"] = "cpu"
        rows.append(common.run_worker(script, ["--worker", f"measure:{k}", "--repeats", str(a.repeats), *smoke],
                                      timeout=a.timeout))
    base = rows[0]["step_s_median"] if rows else None
    for r in rows:
        r["relative_to_first"] = r["step_s_median"] / base
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    flops = []
    for name in common.parse_models(a.models, PAPER):
        common.log(f"flops: {name} (lowering only)")
        flops.append(common.run_worker(script, ["--worker", f"flops:{name}", *smoke], timeout=a.timeout))
    common.emit({
        "benchmark": "scaling",
        "machine": common.machine_info(),
        "scaling": {"config": "configs/synthetic/base.py", "note": "K fake CPU devices share this machine's cores: "
                    "the step time measures partitioning overhead, not a speed-up", "rows": rows},
        "flops": flops,
        "estimates": _estimate_block(flops, a),
    })


def _estimate_block(flops: list[dict], a) -> dict:
    return {"assumptions": {"mfu": a.mfu, "global_batch": a.global_batch, "accelerators": ACCELERATORS,
                            "gradient_dtype": "float32",
                            "compute": "flops_per_example * global_batch / (chips * peak_bf16 * mfu)",
                            "allreduce": "2 (chips - 1) / chips * 4 bytes * num_params / per-chip bandwidth",
                            "step": "between max(compute, allreduce) (overlapped) and their sum; host "
                                    "dispatch and input overheads not included"},
            "per_model": _estimates(flops, a.mfu, a.global_batch)}


if __name__ == "__main__":
    sys.exit(common.run_script(main))
