"""The throughput benchmarks (benchmarks/decode.py, train_step.py, input_pipeline.py) at ``--smoke`` sizes:
each prints one JSON object with the documented keys and self-consistent, physically sane values."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest

from conftest import ROOT, subprocess_env

PY = sys.executable


def _run(script: str, *args: str, timeout: int = 600) -> dict:
    proc = subprocess.run([PY, os.path.join(ROOT, "benchmarks", script), "--smoke", *args], cwd=ROOT,
                          env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)  # stdout holds exactly one JSON object (progress goes to stderr)


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _sane_rss(mb) -> bool:
    return 50 < mb < 16_000  # a JAX process holds at least ~100 MiB; smoke sizes stay far below 16 GiB


@pytest.mark.slow
def test_decode_smoke():
    out = _run("decode.py", "--models=mlpag", "--repeats=2", "--reference_warmup=0")
    assert out["benchmark"] == "decode" and out["smoke"] is True and out["beam_size"] == 3
    assert {"cpu_count", "load_average", "jax", "backend"} <= set(out["machine"])
    m = out["models"]["mlpag"]
    for mode in ("greedy", "beam", "reference"):
        r = m[mode]
        assert r["batch"] == 2 and r["max_len"] == 5
        assert 1 <= r["steps"] <= r["max_len"]
        assert _positive(r["seconds_median"]) and _positive(r["answers_per_s"])
        assert r["answers_per_s"] == pytest.approx(r["batch"] / r["seconds_median"])
        assert r["seconds_median"] == pytest.approx(statistics.median(r["seconds_all"]))
        assert _sane_rss(r["peak_rss_mb"])
    assert _positive(m["greedy"]["compile_s"]) and _positive(m["beam"]["compile_s"])
    assert m["speedup_greedy_vs_reference"] == pytest.approx(
        m["greedy"]["answers_per_s"] / m["reference"]["answers_per_s"])
    assert m["speedup_beam_vs_reference"] == pytest.approx(
        m["beam"]["answers_per_s"] / m["reference"]["answers_per_s"])
    # The full-recompute loop and the cached jitted greedy search emit the same answers (docs/design.md §7).
    assert m["reference_agreement"] == 1.0
    assert m["peak_rss_mb"] == max(m[k]["peak_rss_mb"] for k in ("greedy", "beam", "reference"))


@pytest.mark.slow
def test_train_step_smoke():
    out = _run("train_step.py", "--models=mlpag", "--repeats=2", "--matmul_n=256")
    assert out["benchmark"] == "train_step"
    r = out["models"]["mlpag"]
    assert r["batch"] == 2 and r["vocab_size"] == 50
    assert _positive(r["compile_s"]) and _positive(r["step_s_median"]) and r["loss_finite"]
    assert r["examples_per_s"] == pytest.approx(r["batch"] / r["step_s_median"])
    peak = r["matmul_peak"]
    assert peak["n"] == 256 and peak["flops_per_s"] == pytest.approx(2 * 256 ** 3 / peak["seconds_median"])
    # Cost analysis counts forward + backward + Adam: far more FLOPs than parameters per example.
    assert r["flops_per_example"] > r["num_params"]
    assert r["achieved_flops_per_s"] == pytest.approx(r["flops_per_example"] * r["batch"] / r["step_s_median"])
    assert r["fraction_of_matmul_peak"] == pytest.approx(r["achieved_flops_per_s"] / peak["flops_per_s"])
    assert 0 < r["fraction_of_matmul_peak"] < 5
    assert _sane_rss(r["peak_rss_mb"])


@pytest.mark.slow
def test_train_step_profile_smoke():
    out = _run("train_step.py", "--models=qumlag", "--repeats=1", "--matmul_n=128", "--profile",
               "--profile_steps=1")
    prof = out["models"]["qumlag"]["profile"]
    assert _positive(prof["thunk_ms_per_step"]) and _positive(prof["wall_ms_per_step"])
    shares = [c["share"] for c in prof["by_category"].values()]
    assert sum(shares) == pytest.approx(1.0)
    assert "matmul (dot)" in prof["by_category"]
    assert prof["hlo_op_counts"].get("dot", 0) + prof["hlo_op_counts"].get("fusion", 0) > 0


@pytest.mark.slow
def test_input_pipeline_smoke(tmp_path):
    out = _run("input_pipeline.py", f"--data_dir={tmp_path / 'tfds'}", "--batches=4", "--warmup=1", "--repeats=2",
               timeout=900)
    assert out["benchmark"] == "input_pipeline"
    d, p = out["configs"]["default"], out["configs"]["paper"]
    assert d["builder"] == "synthetic_openvivqa/tiny" and d["batch"] == 4
    assert d["batch_shapes"]["image"] == [4, 48, 64, 3]
    assert p["batch_shapes"]["image"] == [4, 72, 96, 3] and p["num_ocr"] == 50
    assert p["batch_shapes"]["ocr_phoc"][:2] == [4, 50] and p["batch_shapes"]["decoder_in"] == [4, 20]
    for r in (d, p):
        assert _positive(r["batches_per_s"]) and _positive(r["batches_per_s_warm_cache"])
        assert r["examples_per_s"] == pytest.approx(r["batches_per_s"] * r["batch"])
        assert _sane_rss(r["peak_rss_mb"])
    step = d["train_step"]
    assert step["batch"] == 4 and step["steps_per_s"] == pytest.approx(1 / step["step_s_median"])
    assert d["pipeline_to_step_ratio"] == pytest.approx(d["batches_per_s"] / step["steps_per_s"])
    assert "train_step" not in p


def test_set_field_overrides_one_config_field():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import common

    cfg = common.load_config("mlpag")
    assert cfg.model.dropout == 0.1
    common.set_field(cfg, "model.dropout=0.0")
    common.set_field(cfg, "train.optimizer=adamw")  # not a Python literal: kept as a string
    assert (cfg.model.dropout, cfg.train.optimizer) == (0.0, "adamw")
    with pytest.raises(ValueError, match="no field 'model.bogus'"):
        common.set_field(cfg, "model.bogus=1")
    with pytest.raises(ValueError, match="expected FIELD=VALUE"):
        common.set_field(cfg, "model.dropout")


def _accelerator(*args: str, timeout: int = 900) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run([os.path.join(ROOT, "benchmarks", "accelerator.sh"), "--smoke", "--models=mlpag",
                           "--dtypes=float32", "--repeats=2", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), time.monotonic() - t0


def _check_accelerator_run(r: dict) -> None:
    tr, dec = r["train"], r["decode_beam3"]
    assert r["platform"] == "cpu" and r["dtype"] == "float32"
    assert tr["batch"] == 2 and tr["examples_per_s"] == pytest.approx(2 / tr["step_s_median"])
    peak = r["peak"]
    assert peak["chip"] == "this CPU" and peak["source"].startswith("measured")
    assert tr["mfu"] == pytest.approx(tr["flops_per_step"] / tr["step_s_median"] / (peak["tflops"] * 1e12))
    assert tr["achieved_tflops"] == pytest.approx(tr["flops_per_step"] / tr["step_s_median"] / 1e12)
    assert 0 < tr["mfu"] < 5
    assert dec["batch"] == 2 and dec["answers_per_s"] == pytest.approx(2 / dec["seconds_median"])
    assert r["peak_device_memory_mb"] is None and _sane_rss(r["peak_rss_mb"])  # CPU reports no device memory


@pytest.mark.slow
def test_accelerator_script_keeps_its_one_minute_budget():
    """benchmarks/accelerator.sh on CPU, tiny shapes, 60 s budget: it ends within the budget (a job that
    overruns its share is killed and reported, not dropped) and prints one JSON object."""
    out, wall = _accelerator("--budget_s=60")
    assert out["benchmark"] == "accelerator" and out["budget_s"] == 60
    assert out["wall_s"] < 60 + 5 and wall < 60 + 120  # + the parent's own start-up and exit (slow when loaded)
    r = out["runs"]["mlpag:float32"]
    if "error" in r:  # a loaded 2-core machine: the job did not fit its share
        assert "budget" in r["error"]
    else:
        _check_accelerator_run(r)


@pytest.mark.slow
def test_accelerator_script_values_in_process():
    """The same run in one process with a budget it fits in: train examples/s, MFU against the named peak,
    beam-3 answers/s, device memory (none on CPU)."""
    out, _ = _accelerator("--budget_s=600", "--in_process")
    _check_accelerator_run(out["runs"]["mlpag:float32"])


def test_accelerator_published_peaks():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import accelerator

    h100 = accelerator.chip_peak("NVIDIA H100 80GB HBM3", "gpu", "bfloat16")
    assert (h100["chip"], h100["precision"], h100["tflops"]) == ("NVIDIA H100 SXM5", "bf16", 989.4)
    f32 = accelerator.chip_peak("NVIDIA H100 80GB HBM3", "gpu", "float32")
    assert (f32["precision"], f32["tflops"], f32["fp32_tflops"]) == ("tf32", 494.7, 66.9)
    assert accelerator.chip_peak("NVIDIA H100 PCIe", "gpu", "bfloat16")["tflops"] == 756.0
    assert accelerator.chip_peak("NVIDIA A100-SXM4-80GB", "gpu", "float32")["tflops"] == 156.0
    tpu = accelerator.chip_peak("TPU v5 lite", "tpu", "float32")  # float32 dots: one bf16 pass on TPU
    assert (tpu["chip"], tpu["precision"], tpu["tflops"]) == ("Google TPU v5e", "bf16", 197.0)
    assert accelerator.chip_peak("cpu", "cpu", "float32") is None


def test_main_job_phases_from_log_stamps():
    """benchmarks/main_job.py's phases, from absl stamps of a process that started at 23:59:50 and passed
    midnight: training from its start line to the input-count line, the rest before and after it."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import datetime

    import main_job

    start = datetime.datetime(2026, 12, 3, 23, 59, 50)
    end = datetime.datetime(2026, 12, 4, 0, 2, 0)  # 130 s in all
    lines = ["I1203 23:59:58.000000 1 model_ready.py:244] Model-ready records of x/train: 4 questions, 2 images, "
             "2 OCR sets in 7.5 s (2 workers) -> /w\n",
             "I1204 00:00:05.500000 1 train.py:303] No checkpoint in /w/checkpoints: training starts at step 0\n",
             "I1204 00:01:45.500000 1 records.py:69] Training input counts (truncated/skipped): {}\n",
             "I1204 00:01:46.000000 1 model_ready.py:390] Model-ready records of x/test: 3 questions, 1 images, "
             "1 OCR sets in 0.5 s (2 workers) -> /w\n",
             "an unstamped line\n"]
    got = main_job.phases(lines, start, end)
    assert got == pytest.approx({"before_training": 15.5, "model_ready_train": 7.5, "training": 100.0,
                                 "after_training": 14.5})
    assert main_job.phases(lines[:1], start, end)["training"] is None
    reused = ["I1203 23:59:58.000000 1 model_ready.py:390] Model-ready records of x/train: reusing /r/train "
              "(built in 140.4 s)\n"]
    assert main_job.phases(reused, start, end)["model_ready_train"] is None


@pytest.mark.slow
def test_main_job_benchmark_on_the_tiny_set(tmp_path):
    """The main-job benchmark on configs/tiny.py for 6 steps: its JSON agrees with the run's own files."""
    wd = tmp_path / "run"
    proc = subprocess.run([PY, os.path.join(ROOT, "benchmarks", "main_job.py"), "--workdir", str(wd),
                           "--config", "configs/tiny.py", "--data_dir", str(tmp_path / "tfds"),
                           "--set", "train.num_train_steps=6", "--set", "train.log_every_steps=2",
                           "--set", "eval.decoding=greedy"],
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["benchmark"] == "main_job" and out["machine"]["backend"] == "cpu"
    ph = out["phases_s"]
    assert all(_positive(ph[k]) for k in ("before_training", "training", "after_training"))
    assert ph["model_ready_train"] is None  # configs/tiny.py encodes each example as it is read
    tr = out["training"]
    recs = [json.loads(x) for x in (wd / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    assert tr["logged_intervals"] == len(train) == 3
    assert tr["steps_per_sec_median"] == pytest.approx(statistics.median(r["steps_per_sec"] for r in train))
    assert 0 <= tr["input_wait_mean"] <= 1 and tr["peak_device_memory_mib"] is None  # CPU: no device memory
    test = json.loads((wd / "eval" / "test_metrics.json").read_text(encoding="utf-8"))
    kinds = test["by_field"]["kind"]
    assert out["test"]["exact_match_by_kind"] == {k: round(100 * v["exact_match"], 1) for k, v in kinds.items()}
    assert out["test"]["CIDEr"] == pytest.approx(test["overall"]["CIDEr"])
