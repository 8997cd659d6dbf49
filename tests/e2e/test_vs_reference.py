"""benchmarks/vs_reference.py (ours beside a plain PyTorch implementation) and benchmarks/torch_reference.py.

The PyTorch side needs an interpreter with torch: ``$OPENVIVQA_TORCH_PYTHON``, else ``.venv-torch/bin/python``
in the checkout (the README's setup). Without one, the torch tests skip with that reason and the quick run
checks our side and the JSON schema with the reference skipped.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

TORCH_PY = os.environ.get("OPENVIVQA_TORCH_PYTHON") or os.path.join(ROOT, ".venv-torch", "bin", "python")


def _torch_reason() -> str | None:
    import vs_reference

    return vs_reference.torch_available(TORCH_PY if os.path.exists(TORCH_PY) else None)


def test_reference_shapes_follow_the_benchmark_configs():
    import common
    import vs_reference

    s = vs_reference.reference_shapes(common.load_config("m4c"), 64)
    # configs/openvivqa/m4c.py:benchmark (docs/design.md §10 shapes): width 768, 12 heads, 12 text + 4 MMT layers.
    assert (s["batch"], s["d"], s["heads"], s["ffn"], s["num_text_layers"], s["num_mmt_layers"]) == (
        64, 768, 12, 3072, 12, 4)
    assert (s["vocab"], s["num_ocr"], s["ans_len"], s["q_len"], s["num_regions"], s["region_dim"]) == (
        4000, 50, 20, 20, 50, 1024)
    assert s["ocr_extra"] == {"ocr_det": 256, "ocr_fasttext": 300, "ocr_rec": 256}
    assert s["grad_clip_norm"] == 0.25 and s["dropout"] == 0.1
    q = vs_reference.reference_shapes(common.load_config("qumlag"), 64)
    assert (q["d"], q["num_fusion_layers"], q["num_decoder_layers"], q["word_dim"]) == (512, 3, 3, 300)


def test_reference_shapes_reject_what_the_reference_lacks():
    import common
    import vs_reference

    cfg = common.load_config("mlpag")
    cfg.model.ocr_features = ("phoc",)
    with pytest.raises(ValueError, match="pieces/phoc/appearance"):
        vs_reference.reference_shapes(cfg, 64)


def test_torch_available_names_the_reason(tmp_path):
    import vs_reference

    assert vs_reference.torch_available(None) == "no --torch_python given"
    reason = vs_reference.torch_available(_fake_python(tmp_path))
    assert reason.endswith("cannot import torch: ModuleNotFoundError: No module named torch")


def _fake_python(tmp_path) -> str:
    """An 'interpreter' whose ``import torch`` fails."""
    p = tmp_path / "py"
    p.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    p.chmod(0o755)
    return str(p)


def test_torch_models_have_our_parameter_counts():
    """The PyTorch models are the same architecture as ours: at the smoke shapes, their parameter counts equal
    our models' (QuMLAG: plus torch's second LSTM bias vector, 4 * d)."""
    reason = _torch_reason()
    if reason:
        pytest.skip(f"PyTorch reference not runnable: {reason}")
    import common
    import jax
    import vs_reference
    from flax import nnx

    from openvivqa_jax.models import build_model

    for name in ("mlpag", "qumlag", "m4c"):
        cfg = common.shrink_for_smoke(common.load_config(name))
        shapes = vs_reference.reference_shapes(cfg, 2)
        ours = sum(x.size for x in jax.tree.leaves(nnx.state(build_model(cfg.model, shapes["vocab"], seed=0),
                                                              nnx.Param)))
        code = ("import json,sys; sys.path.insert(0, 'benchmarks'); import torch_reference as t; "
                f"m = t.MODELS[{name!r}](json.loads({json.dumps(json.dumps(shapes))})); "
                "print(sum(p.numel() for p in m.parameters()))")
        out = subprocess.run([TORCH_PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        extra = 4 * shapes["d"] if name == "qumlag" else 0
        assert int(out.stdout.strip()) == ours + extra, name


@pytest.mark.slow
def test_vs_reference_quick_prints_paired_ratios():
    reason = _torch_reason()
    args = ["--quick"] + ([f"--torch_python={TORCH_PY}"] if not reason else [])
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "vs_reference.py"), *args], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["benchmark"] == "vs_reference" and out["quick"] is True and out["rounds"] == 1
    assert {"cpu_model", "cpu_count", "load_average", "load_average_end", "jax"} <= set(out["machine"])
    assert out["reference_decode"] == {"mlpag": "greedy", "qumlag": "beam-3", "m4c": "greedy"}
    assert set(out["models"]) == {"mlpag", "qumlag", "m4c"}
    for name, m in out["models"].items():
        for mode, key in (("train", "examples_per_s"), ("decode", "answers_per_s")):
            r = m[mode]
            ours = r[f"ours_{key}"]
            assert math.isfinite(ours) and ours > 0 and r[f"ours_{key}_per_round"] == [ours]
            if reason:
                assert out["reference_skipped"] == reason
                assert r[f"theirs_{key}"] is None and r["ratio_median"] is None and r["ratio_per_round"] == []
            else:
                assert out["reference_skipped"] is None
                theirs = r[f"theirs_{key}"]
                assert math.isfinite(theirs) and theirs > 0
                assert r["ratio_median"] == pytest.approx(ours / theirs) and r["ratio_per_round"] == [
                    pytest.approx(ours / theirs)]
                assert r["rounds"][0]["theirs"]["batch"] == r["rounds"][0]["ours"]["batch"]
        assert m["train"]["rounds"][0]["ours"]["batch"] == 2 and m["decode"]["rounds"][0]["ours"]["batch"] == 2
        assert m["matmul_peak_gflops_ours"] > 0
        if not reason:
            assert m["matmul_peak_gflops_theirs"] > 0
            assert 1 <= m["decode"]["rounds"][0]["theirs"]["steps"] <= m["shapes"]["ans_len"] == 5
