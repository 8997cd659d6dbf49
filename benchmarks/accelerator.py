"""Benchmark for a GPU/TPU machine: train examples/s and MFU, beam-3 decode answers/s, peak device memory.

Usage (``benchmarks/accelerator.sh`` wraps it)::

    python benchmarks/accelerator.py [--budget_s 480] [--models mlpag,m4c,qumlag] [--dtypes bfloat16,float32]
                                     [--peak_tflops X] [--smoke]

For each model (the ``benchmark`` variants of ``configs/openvivqa/<name>.py``, batch 64) and each compute dtype
(``bfloat16`` with float32 master weights, then ``float32``), one fresh process runs:

* the trainer's own train step (``benchmarks/train_step.py``'s worker: compile, one warm-up step, the median
  of ``--repeats`` steps): ``examples_per_s``, ``flops_per_step`` from XLA's cost analysis of the compiled
  step, and ``mfu = flops_per_step / step_s / peak``;
* beam-3 decoding (``benchmarks/decode.py``'s worker, :func:`openvivqa_jax.vqa.decoding.make_decode_fn`):
  ``answers_per_s``;
* ``peak_device_memory_mb``: the device's ``memory_stats()['peak_bytes_in_use']`` after both (``null`` where
  the backend reports none, e.g. CPU; ``peak_rss_mb`` is the host process's).

The peak is the chip's published dense peak for the dtype's matmul precision (:data:`PUBLISHED_PEAKS`,
matched on ``jax.devices()[0].device_kind``): bfloat16 tensor-core/MXU FLOP/s for bfloat16; for float32,
the peak of JAX's default float32 dot precision (TF32 tensor cores on Ampere and later NVIDIA GPUs, one
bfloat16 pass on TPUs) and, on GPUs, also the plain FP32 peak. The output names the peak it used.
``--peak_tflops`` overrides it; on a CPU (tests) the matmul peak measured in the same process stands in and
is named so.

The whole run stays within ``--budget_s`` (default 480 s = 8 minutes): each process gets the remaining time
divided by the processes left; a process that overruns is killed and reported as ``{"error": ...}``, never
dropped. ``--in_process`` runs the jobs in one process instead (the CPU test: a fresh JAX process costs
seconds there), starting a job only while the time left covers the longest job so far. Prints one JSON
object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

MODELS = ("mlpag", "m4c", "qumlag")
DTYPES = ("bfloat16", "float32")

#: Published dense (no sparsity) peak TFLOP/s per chip, from the vendors' datasheets: ``(device_kind
#: substring (lower case), name, {precision: TFLOP/s})``; the first match wins (more specific first).
PUBLISHED_PEAKS = (
    ("h100 pcie", "NVIDIA H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("h100", "NVIDIA H100 SXM5", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("h200", "NVIDIA H200 SXM", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("a100", "NVIDIA A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("l40s", "NVIDIA L40S", {"bf16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    ("l4", "NVIDIA L4", {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("tpu v6 lite", "Google TPU v6e (Trillium)", {"bf16": 918.0}),
    ("tpu v5 lite", "Google TPU v5e", {"bf16": 197.0}),
    ("tpu v5", "Google TPU v5p", {"bf16": 459.0}),
    ("tpu v4", "Google TPU v4", {"bf16": 275.0}),
)


def chip_peak(device_kind: str, platform: str, dtype: str) -> dict | None:
    """``{"chip", "precision", "tflops", "source"}`` of the published peak that ``dtype``'s matmuls run at on
    ``device_kind``, or ``None`` for an unknown chip."""
    kind = device_kind.lower()
    for key, chip, peaks in PUBLISHED_PEAKS:
        if key in kind:
            if dtype == "bfloat16":
                prec = "bf16"
            else:  # JAX's default float32 dot precision: TF32 on NVIDIA tensor cores, one bf16 pass on TPU
                prec = "tf32" if platform == "gpu" else "bf16"
            out = {"chip": chip, "precision": prec, "tflops": peaks[prec], "source": "vendor datasheet, dense"}
            if "fp32" in peaks and dtype == "float32":
                out["fp32_tflops"] = peaks["fp32"]
            return out
    return None


def worker(args) -> dict:
    """Train step, then beam decoding, of one model in one dtype, in this process."""
    import argparse as ap

    import jax

    import decode
    import train_step

    name, dtype = args.worker.split(":")
    dev = jax.devices()[0]
    res = {"model": name, "dtype": dtype, "device_kind": dev.device_kind, "platform": dev.platform}
    tr = train_step.worker(ap.Namespace(worker=name, smoke=args.smoke, dtype=dtype, set=[], batch=None,
                                        repeats=args.repeats, matmul_n=256 if args.smoke else 2048,
                                        profile=False, profile_steps=0))
    train = {k: tr[k] for k in ("batch", "compile_s", "step_s_median", "step_s_all", "examples_per_s",
                                "num_params", "loss_finite") if k in tr}
    train["flops_per_step"] = tr.get("flops_per_example", 0.0) * tr["batch"] if "flops_per_example" in tr else None
    peak = {"tflops": args.peak_tflops, "chip": dev.device_kind, "precision": "given",
            "source": "--peak_tflops"} if args.peak_tflops else chip_peak(dev.device_kind, dev.platform, dtype)
    if peak is None and dev.platform == "cpu":
        peak = {"chip": "this CPU", "precision": "float32", "tflops": tr["matmul_peak"]["flops_per_s"] / 1e12,
                "source": f"measured: {tr['matmul_peak']['n']}^2 float32 jnp.dot in this process (no published peak)"}
    res["peak"] = peak
    if peak and train["flops_per_step"]:
        achieved = train["flops_per_step"] / train["step_s_median"]
        train["achieved_tflops"] = achieved / 1e12
        train["mfu"] = achieved / (peak["tflops"] * 1e12)
        if "fp32_tflops" in peak:
            train["mfu_vs_fp32_peak"] = achieved / (peak["fp32_tflops"] * 1e12)
    else:
        train["mfu"] = None
    res["train"] = train
    dec = decode.worker(ap.Namespace(worker=f"{name}:beam", smoke=args.smoke, batch=None, dtype=dtype,
                                     beam_size=3, repeats=args.repeats, ids_out=None, reference_warmup=0,
                                     reference_repeats=0, share_memory=False))
    res["decode_beam3"] = {k: dec[k] for k in ("batch", "max_len", "steps", "compile_s", "seconds_median",
                                               "answers_per_s")}
    stats = dev.memory_stats() or {}
    peak_bytes = stats.get("peak_bytes_in_use")
    res["peak_device_memory_mb"] = peak_bytes / 2 ** 20 if peak_bytes is not None else None
    res["peak_rss_mb"] = common.peak_rss_mb()
    return res


def _run_in_process(args, jobs, t0: float, result: dict) -> None:
    """The jobs in this process, one after another (no per-process start-up: the CPU test's 1-minute budget).
    A job starts only while the time left covers the longest job so far; the others are reported as not
    started. Peak device memory is then the process's peak over the jobs so far."""
    longest = 0.0
    for name, dtype in jobs:
        key = f"{name}:{dtype}"
        left = args.budget_s - (time.monotonic() - t0)
        if left < longest or left <= 0:
            result["runs"][key] = {"error": f"not started: {left:.0f} s of the budget left, the longest job took "
                                            f"{longest:.0f} s"}
            continue
        common.log(f"[{key}] ... (in process, {left:.0f} s left)")
        t1 = time.monotonic()
        result["runs"][key] = worker(argparse.Namespace(**{**vars(args), "worker": key}))
        longest = max(longest, time.monotonic() - t1)


def main(argv=None) -> dict:
    """Runs one worker process per (model, dtype) within the budget; prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {MODELS}")
    p.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma-separated subset of {DTYPES}")
    p.add_argument("--budget_s", type=float, default=480.0, help="wall-clock budget of the whole run, seconds")
    p.add_argument("--repeats", type=int, default=5, help="timed train steps / decode calls (median)")
    p.add_argument("--peak_tflops", type=float, default=None, help="override the chip's published peak")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (tests)")
    p.add_argument("--in_process", action="store_true",
                   help="run every job in this process (no fresh process per job; the CPU test)")
    args, res = common.parse_flags(p, argv, worker)
    if args.worker:
        return res
    t0 = time.monotonic()
    models = common.parse_models(args.models, MODELS)
    dtypes = common.parse_models(args.dtypes, DTYPES)
    jobs = [(m, d) for d in dtypes for m in models]
    result = {"benchmark": "accelerator", "machine": common.machine_info(), "smoke": args.smoke,
              "budget_s": args.budget_s, "repeats": args.repeats, "runs": {}}
    env = dict(os.environ)
    env["PYTHONPATH"] = common.ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if args.in_process:
        _run_in_process(args, jobs, t0, result)
        jobs = []
    for i, (name, dtype) in enumerate(jobs):
        left = args.budget_s - (time.monotonic() - t0)
        share = left / (len(jobs) - i)
        key = f"{name}:{dtype}"
        common.log(f"[{key}] ... ({share:.0f} s of {left:.0f} s left)")
        cmd = [sys.executable, os.path.abspath(__file__), f"--worker={key}", f"--repeats={args.repeats}"]
        cmd += ["--smoke"] if args.smoke else []
        cmd += [f"--peak_tflops={args.peak_tflops}"] if args.peak_tflops else []
        try:
            proc = subprocess.run(cmd, cwd=common.ROOT, env=env, capture_output=True, text=True,
                                  timeout=max(share, 1.0))
        except subprocess.TimeoutExpired:
            result["runs"][key] = {"error": f"killed after its {share:.0f} s share of the {args.budget_s:.0f} s budget"}
            continue
        text = proc.stdout.strip()
        if proc.returncode != 0 or "{" not in text:
            result["runs"][key] = {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-800:]}"}
            continue
        result["runs"][key] = json.loads(text[text.find("{"):])
    result["wall_s"] = time.monotonic() - t0
    common.emit(result)
    return result


if __name__ == "__main__":
    sys.exit(common.run_script(main))
