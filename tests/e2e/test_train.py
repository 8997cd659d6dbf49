"""The train loop end to end on the tiny synthetic config: outputs, resume after SIGKILL, 1 vs 8 devices,
the real OpenViVQA sample, compilation counts."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import ROOT, SHARED, read_jsonl, subprocess_env

PY = sys.executable


def _main_cmd(workdir, data_dir, *overrides, config="configs/tiny.py"):
    return [PY, "-m", "openvivqa_jax.main", f"--config={config}", f"--workdir={workdir}",
            f"--config.data.data_dir={data_dir}", *overrides]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A module-wide TFDS data dir (the tiny synthetic set is built on first use)."""
    return str(tmp_path_factory.mktemp("tfds"))


def _train_losses(workdir):
    """step -> last logged training loss (a resumed run logs a step again after restart)."""
    out = {}
    for rec in read_jsonl(os.path.join(workdir, "metrics.jsonl")):
        if rec["kind"] == "train":
            out[rec["step"]] = rec["loss"]
    return out


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted(tmp_path, data_dir):
    steps = ["--config.train.num_train_steps=30", "--config.train.checkpoint_every_steps=5",
             "--config.train.eval_every_steps=15", "--config.train.log_every_steps=5"]
    full = tmp_path / "full"
    subprocess.run(_main_cmd(full, data_dir, *steps), cwd=ROOT, env=subprocess_env(), check=True, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_main_cmd(killed, data_dir, *steps), cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    ckpt = killed / "checkpoints"
    # Kill once a mid-run checkpoint exists (step 15 or 20), i.e. mid-training.
    while time.time() < deadline:
        done = sorted(int(p) for p in os.listdir(ckpt) if p.isdigit()) if ckpt.exists() else []
        if any(s in done for s in (15, 20)) or proc.poll() is not None:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed; raise num_train_steps"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "eval" / "test_metrics.json").exists()
    subprocess.run(_main_cmd(killed, data_dir, *steps), cwd=ROOT, env=subprocess_env(), check=True, capture_output=True)

    a, b = _train_losses(full), _train_losses(killed)
    assert sorted(a) == sorted(b) == [5, 10, 15, 20, 25, 30]
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=1e-5, abs=1e-6), (s, a[s], b[s])
    ma = json.loads((full / "eval" / "test_metrics.json").read_text())
    mb = json.loads((killed / "eval" / "test_metrics.json").read_text())
    assert ma["overall"] == pytest.approx(mb["overall"], rel=1e-6)
    pa = json.loads((full / "eval" / "test_predictions.json").read_text())
    pb = json.loads((killed / "eval" / "test_predictions.json").read_text())
    assert [r["prediction"] for r in pa] == [r["prediction"] for r in pb]


@pytest.mark.slow
def test_region_counter_run_logs_its_stream_and_resumes_exactly(tmp_path, data_dir):
    """The region counter (proposals, model-ready records): its loss and exact share are logged from its stream of
    counting questions, and a run stopped at step 6 and resumed logs what the uninterrupted run logged."""
    over = ["--config.model.vision.kind=proposals", "--config.model.vision.num_regions=16",
            "--config.model.counter.weight=1.0", "--config.model.counter.batch_size=4",
            "--config.data.model_ready=True", "--config.train.checkpoint_every_steps=3",
            "--config.train.eval_every_steps=0", "--config.train.log_every_steps=3"]
    full, part = tmp_path / "full", tmp_path / "part"
    subprocess.run(_main_cmd(full, data_dir, *over, "--config.train.num_train_steps=12"), cwd=ROOT,
                   env=subprocess_env(), check=True, capture_output=True)
    subprocess.run(_main_cmd(part, data_dir, *over, "--config.train.num_train_steps=6"), cwd=ROOT,
                   env=subprocess_env(), check=True, capture_output=True)
    out = subprocess.run(_main_cmd(part, data_dir, *over, "--config.train.num_train_steps=12"), cwd=ROOT,
                         env=subprocess_env(), check=True, capture_output=True, text=True)
    assert "Resumed from step 6" in out.stderr
    assert "Region counter: input statistics" not in out.stderr  # set once, restored with the checkpoint
    ra = [r for r in read_jsonl(os.path.join(full, "metrics.jsonl")) if r["kind"] == "train"]
    rb = [r for r in read_jsonl(os.path.join(part, "metrics.jsonl")) if r["kind"] == "train"]
    assert [r["step"] for r in ra] == [3, 6, 9, 12] and [r["step"] for r in rb] == [3, 6, 9, 12]
    for x, y in zip(ra, rb):
        assert 0 <= x["counting_exact"] <= 1 and x["counting_loss"] > 0
        for k in ("counting_loss", "counting_exact", "loss"):
            assert y[k] == pytest.approx(x[k], rel=1e-5, abs=1e-6), (x["step"], k)


@pytest.mark.slow
def test_workdir_contents_and_predictions(tmp_path, data_dir):
    wd = tmp_path / "run"
    out = subprocess.run(_main_cmd(wd, data_dir, "--config.train.num_train_steps=10",
                                   "--config.train.eval_every_steps=10"),
                         cwd=ROOT, env=subprocess_env(), check=True, capture_output=True, text=True)
    assert "example answers" in out.stdout and "CIDEr" in out.stdout
    for f in ["config.json", "spm.model", "metrics.jsonl", "eval/test_metrics.json", "eval/test_predictions.json",
              "eval/dev_metrics.json", "eval/test_no_ocr_metrics.json"]:
        assert (wd / f).exists(), f
    assert any(p.startswith("events.out.tfevents") for p in os.listdir(wd))
    preds = json.loads((wd / "eval" / "test_predictions.json").read_text())
    import tensorflow_datasets as tfds
    import tfds_builders.synthetic_openvivqa  # noqa: F401
    src = tfds.builder("synthetic_openvivqa/tiny", data_dir=data_dir).as_data_source("test")
    assert len(preds) == len(src)
    assert [p["question_id"] for p in preds] == [src[i]["question_id"].decode() for i in range(len(src))]
    assert set(preds[0]) >= {"question_id", "question", "prediction", "references", "qa_type", "kind"}
    # Scores per template kind of question (the synthetic set's kind feature) in the metrics file.
    from tfds_builders.synthetic_openvivqa.generator import NON_TEXT_KINDS, TEXT_KINDS

    assert {p["kind"] for p in preds} <= set(TEXT_KINDS + NON_TEXT_KINDS)
    by_kind = json.loads((wd / "eval" / "test_metrics.json").read_text())["by_field"]["kind"]
    assert {k: v["num_questions"] for k, v in by_kind.items()} == dict(
        sorted(collections.Counter(p["kind"] for p in preds).items()))
    # The first step (compilation, the input pipeline's start) is said once and kept out of the first rate.
    assert re.search(r"step 1: compiled and started in \d+\.\d s \(left out of the steps/s\)", out.stderr)
    assert re.search(r"Training inputs cut: \d+\.\d% of questions at model.max_question_len=\d+, \d+\.\d% of "
                     r"answers at model.max_answer_len=\d+", out.stderr), out.stderr[-2000:]
    # Each metrics file says how its predictions were made; a later --mode evaluate with other decoding
    # settings rewrites the files and says so (configs/tiny.py: beam 2, alpha 0; best checkpoint: step 10).
    def decoding(tag):
        return json.loads((wd / "eval" / f"{tag}_metrics.json").read_text())["decoding"]

    assert decoding("test") == {"method": "beam", "beam_size": 2, "alpha": 0.0, "ocr_masked": False, "step": 10}
    assert decoding("test_no_ocr")["ocr_masked"] is True
    def records(kind):
        return [r for r in read_jsonl(str(wd / "metrics.jsonl")) if r["kind"] == kind]

    final = records("final")
    assert {k for r in final for k in r if "/" in k} >= {"dev/CIDEr", "test/CIDEr", "test_no_ocr/CIDEr"}
    # Every periodic dev evaluation also logs exact match per template kind (a curve per kind).
    periodic = records("eval")
    assert periodic and all(r["step"] % 10 == 0 for r in periodic)
    kinds = {k.split("/")[2] for r in periodic for k in r if k.startswith("dev/kind/")}
    assert kinds and kinds <= set(TEXT_KINDS + NON_TEXT_KINDS)
    assert all(0.0 <= r[k] <= 1.0 for r in periodic for k in r if k.endswith("/exact_match"))
    assert re.search(r"step 10 dev exact match by kind: \w+ \d+\.\d%", out.stderr), out.stderr[-2000:]
    subprocess.run(_main_cmd(wd, data_dir, "--mode=evaluate", "--config.eval.decoding=greedy",
                             "--config.eval.ocr_ablation=False"), cwd=ROOT, env=subprocess_env(), check=True,
                   capture_output=True, text=True)
    assert decoding("test") == {"method": "greedy", "beam_size": 1, "alpha": 0.0, "ocr_masked": False, "step": 10}
    # The re-scoring is logged as its own records; the training's final records are left as they were.
    assert records("final") == final
    rescored = {k: v for r in records("evaluate") for k, v in r.items() if "/" in k}
    test_cider = json.loads((wd / "eval" / "test_metrics.json").read_text())["overall"]["CIDEr"]
    assert rescored["test/CIDEr"] == pytest.approx(test_cider) and not any(k.startswith("test_no_ocr/")
                                                                            for k in rescored)


_DEVICE_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax, numpy as np
    sys.path.insert(0, {root!r}); sys.path.insert(0, os.path.join({root!r}, "tests"))
    from conftest import load_config, train_steps_on_one_batch
    out = {{}}
    batch = None
    for shape in [(1, 1), (4, 2)]:
        cfg = load_config("configs/tiny.py")
        cfg.data.data_dir = {data_dir!r}
        cfg.mesh.shape = shape
        _, state, step, batch, losses = train_steps_on_one_batch(cfg, os.path.join({workdir!r}, str(shape[0])), batch)
        specs = {{}}
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.params):
            from openvivqa_jax.training.sharding import path_str
            specs[path_str(path).removesuffix("/value")] = [a for a in leaf.sharding.spec]
        out[str(shape)] = {{"losses": losses, "specs": specs, "cache": step._cache_size()}}
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_same_loss_on_one_and_eight_devices(tmp_path, data_dir):
    script = _DEVICE_SCRIPT.format(root=ROOT, data_dir=data_dir, workdir=str(tmp_path))
    res = subprocess.run([PY, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         env=subprocess_env(8))
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    one, eight = out["(1, 1)"], out["(4, 2)"]
    np.testing.assert_allclose(one["losses"], eight["losses"], rtol=2e-5)
    assert one["losses"][2] < one["losses"][0]  # it trains
    # The sharding rules put the large matrices along 'model' on the (4, 2) mesh.
    specs = eight["specs"]
    q = next(k for k in specs if k.endswith("self_attn/query/kernel"))
    assert specs[q] == [None, "model"]
    assert specs[next(k for k in specs if k.endswith("ffn/wi/kernel"))] == [None, "model"]
    assert specs[next(k for k in specs if k.endswith("ffn/wo/kernel"))] == ["model", None]
    assert specs[next(k for k in specs if k.endswith("vocab_head/kernel"))] == [None, "model"]
    # No recompilation after the first step.
    assert one["cache"] == eight["cache"] == 1


@pytest.mark.slow
def test_real_openvivqa_sample_with_tesseract(tmp_path):
    sample = os.path.join(SHARED, "data", "openvivqa_examples")
    if not os.path.isdir(sample):
        pytest.skip(f"real sample not found at {sample}")
    wd = tmp_path / "real"
    cmd = _main_cmd(wd, str(tmp_path / "tfds"), f"--config.data.manual_dir={sample}",
                    "--config.data.eval_split=train", "--config.data.test_split=train",
                    "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.ffn_dim=64",
                    "--config.model.num_fusion_layers=1", "--config.model.num_decoder_layers=1",
                    "--config.model.vision.cnn_channels=(8, 16, 32)", "--config.data.image_size=(96, 72)",
                    "--config.tokenizer.vocab_size=400", "--config.train.batch_size=4",
                    "--config.train.num_train_steps=4", "--config.train.eval_every_steps=4",
                    "--config.train.checkpoint_every_steps=4", "--config.eval.batch_size=4",
                    config="configs/openvivqa/mlpag.py")
    res = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    preds = json.loads((wd / "eval" / "test_predictions.json").read_text())  # one split as dev and test: "test"
    with open(os.path.join(sample, "examples_data.json"), encoding="utf-8") as f:
        raw = json.load(f)
    assert sorted(p["question_id"] for p in preds) == sorted(str(k) for k in raw["annotations"])
    assert all(isinstance(p["prediction"], str) for p in preds)
    from openvivqa_jax.text.normalize import normalize_text
    by_id = {p["question_id"]: p for p in preds}
    for qid, ann in raw["annotations"].items():
        assert by_id[str(qid)]["references"] == [normalize_text(ann["answer"])]
