"""Multi-controller training (docs/design.md §8): two processes x 4 fake CPU devices against one process x 8,
per-process input shares, eval scored exactly once, a (4, 2)-mesh FSDP checkpoint decoded on 1 device,
FSDP shardings, bfloat16 compute with float32 master weights, and gradient accumulation.

The multi-process runs go through ``openvivqa_jax.main._init_distributed`` (``jax.distributed.initialize``
with a coordinator on ``127.0.0.1:<free port>``; jax 0.12's CPU collectives default to gloo, the config's
``distributed.cpu_collectives`` sets it explicitly) and ``vqa.train.train_and_evaluate``. Every subprocess
runs under a deadline and is killed past it, so a hung collective fails the test instead of hanging CI.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import types
from unittest import mock

import numpy as np
import pytest

from openvivqa_jax.training import sharding
from openvivqa_jax.vqa import train

from conftest import ROOT, all_eqns, build_tiny_tfds, load_config, read_jsonl, subprocess_env

PY = sys.executable
#: Seconds any one subprocess may run (a hung collective is killed after this).
DEADLINE_S = 480


def _env(devices: int | None) -> dict:
    return subprocess_env(devices, {"JAX_PLATFORMS": "cpu"})


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_all(cmds: list[tuple[list[str], dict]], log_dir: str, deadline_s: float = DEADLINE_S) -> None:
    """Starts every ``(argv, env)`` at once, waits for all under one deadline, kills all on timeout or on
    the first failure, and fails with the log tails. Logs go to files (no pipe can fill and block)."""
    procs = []
    for i, (argv, env) in enumerate(cmds):
        log = open(os.path.join(log_dir, f"proc{i}.log"), "w", encoding="utf-8")
        procs.append((subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    end = time.time() + deadline_s
    failed = None
    try:
        while any(p.poll() is None for p, _ in procs):
            if time.time() > end:
                failed = f"timed out after {deadline_s:.0f} s"
                break
            bad = [i for i, (p, _) in enumerate(procs) if p.poll() not in (None, 0)]
            if bad:
                failed = f"process {bad[0]} exited with {procs[bad[0]][0].returncode}"
                break
            time.sleep(0.2)
        if failed is None:
            bad = [i for i, (p, _) in enumerate(procs) if p.returncode != 0]
            if bad:
                failed = f"process {bad[0]} exited with {procs[bad[0]][0].returncode}"
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
            log.close()
    if failed:
        tails = []
        for i in range(len(procs)):
            with open(os.path.join(log_dir, f"proc{i}.log"), encoding="utf-8", errors="replace") as f:
                tails.append(f"--- process {i} ---\n" + f.read()[-3000:])
        pytest.fail(failed + "\n" + "\n".join(tails))


#: Trains the tiny config with ``train_and_evaluate`` (optionally as one of several processes), then
#: records: how often each dev example appears in a valid row of the gathered global eval batches, how
#: many valid rows this process fed, and this process's rows of the first training batches.
_RUN_SCRIPT = textwrap.dedent("""
    import collections, json, os, sys
    args = json.loads(sys.argv[1])
    sys.path.insert(0, args["root"]); sys.path.insert(0, os.path.join(args["root"], "tests"))
    from conftest import load_config
    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = args["data_dir"]
    for key, value in args["overrides"].items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = tuple(value) if isinstance(value, list) else value
    from openvivqa_jax import main as entry
    entry._init_distributed(cfg)
    import jax
    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.training import sharding
    from openvivqa_jax.vqa import evals, train
    from openvivqa_jax.text.tokenizer import Tokenizer
    train.train_and_evaluate(cfg, args["workdir"])

    mesh = sharding.create_mesh(cfg.mesh.shape, cfg.mesh.axes)
    bsh = sharding.batch_sharding(mesh)
    builder = datasets.load_builder(cfg.data, prepare=False)
    pre = pipeline.Preprocessor(cfg, Tokenizer(os.path.join(args["workdir"], "spm.model")))
    pc = jax.process_count()
    counts, local_valid = collections.Counter(), 0
    src = pipeline.load_source(builder, cfg.data.eval_split)
    for local in pipeline.eval_batches(src, pre, batch_size=cfg.eval.batch_size // pc):
        local_valid += int(local["valid"].sum())
        g = pipeline.to_global(local, bsh)
        for i, v in zip(evals._gather(g["index"]), evals._gather(g["valid"])):
            if v:
                counts[int(i)] += 1
    it = pipeline.train_iterator(pipeline.load_source(builder, cfg.data.train_split), pre,
                                 batch_size=cfg.train.batch_size // pc, seed=cfg.seed)
    share = [next(it)["index"].tolist() for _ in range(3)]
    out = dict(process_index=jax.process_index(), process_count=pc, local_devices=jax.local_device_count(),
               global_devices=jax.device_count(), eval_counts=dict(counts), eval_size=len(src),
               local_valid=local_valid, train_share=share)
    with open(args["out"], "w") as f:
        json.dump(out, f)
    if pc > 1:
        jax.distributed.shutdown()
""")

#: Shared by the 1 x 8 and 2 x 4 runs: model axis 2, FSDP over data 4, a mid-run checkpoint, an eval.
_OVERRIDES = {"train.num_train_steps": 6, "train.log_every_steps": 1, "train.eval_every_steps": 6,
              "train.checkpoint_every_steps": 3, "eval.ocr_ablation": False, "mesh.shape": [4, 2],
              "fsdp": True}


def _run_cmd(data_dir, workdir, out, overrides, distributed=None) -> list[str]:
    ov = dict(overrides)
    if distributed:
        ov.update({f"distributed.{k}": v for k, v in distributed.items()})
    args = dict(root=ROOT, data_dir=data_dir, workdir=str(workdir), out=str(out), overrides=ov)
    return [PY, "-c", _RUN_SCRIPT, json.dumps(args)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The tiny synthetic set, built here once before any subprocess starts (no build race)."""
    return build_tiny_tfds(tmp_path_factory)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """One process with 8 devices, then two processes with 4 devices each (same config and seed)."""
    root = tmp_path_factory.mktemp("runs")
    one = root / "one_x8"
    one.mkdir()
    _run_all([(_run_cmd(data_dir, one / "work", one / "out0.json", _OVERRIDES), _env(8))], str(one))
    two = root / "two_x4"
    two.mkdir()
    port = _free_port()
    cmds = []
    for pid in range(2):
        dist = {"initialize": True, "coordinator_address": f"127.0.0.1:{port}", "num_processes": 2,
                "process_id": pid, "cpu_collectives": "gloo"}
        cmds.append((_run_cmd(data_dir, two / "work", two / f"out{pid}.json", _OVERRIDES, dist), _env(4)))
    _run_all(cmds, str(two))
    return {"one": one, "two": two}


def _losses(workdir) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r["kind"] == "train"}


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_process_shares_form_the_same_global_batches(data_dir):
    """Each process's train iterator yields only its rows, and the rows of processes 0 and 1 (in that
    order) are exactly the single-process batch, across an epoch boundary (163 examples, 25 x 8 read)."""
    import jax

    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.text.tokenizer import train_sentencepiece, Tokenizer

    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = data_dir
    src = pipeline.load_source(datasets.load_builder(cfg.data, prepare=False), "train")
    recs = pipeline.read_records(src)
    spm = os.path.join(data_dir, "share_test_spm.model")
    train_sentencepiece([r.question for r in recs] + [a for r in recs for a in r.answers], spm,
                        cfg.tokenizer.vocab_size)
    pre = pipeline.Preprocessor(cfg, Tokenizer(spm))
    it = pipeline.train_iterator(src, pre, batch_size=8, seed=3)
    full = [next(it) for _ in range(25)]
    parts = []
    for pi in range(2):
        with mock.patch.object(jax, "process_index", lambda pi=pi: pi), \
                mock.patch.object(jax, "process_count", lambda: 2):
            it = pipeline.train_iterator(src, pre, batch_size=4, seed=3)
            parts.append([next(it) for _ in range(25)])
    for g in range(25):
        for k in full[g]:
            np.testing.assert_array_equal(full[g][k], np.concatenate([parts[0][g][k], parts[1][g][k]]), err_msg=k)
    seen = [int(i) for b in full for i in b["index"]]
    assert sorted(seen[:163]) == list(range(163))  # the first epoch is a permutation of the split


@pytest.mark.slow
def test_two_processes_match_one_process_of_eight_devices(runs):
    one, two = runs["one"], runs["two"]
    o = _read(one / "out0.json")
    t = [_read(two / f"out{i}.json") for i in range(2)]
    assert (o["process_count"], o["local_devices"], o["global_devices"]) == (1, 8, 8)
    assert [(x["process_index"], x["process_count"], x["local_devices"], x["global_devices"]) for x in t] == \
        [(0, 2, 4, 8), (1, 2, 4, 8)]
    # Same loss curve, step by step (the global batches and dropout keys are the same).
    lo, lt = _losses(one / "work"), _losses(two / "work")
    assert sorted(lo) == sorted(lt) == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose([lt[s] for s in sorted(lt)], [lo[s] for s in sorted(lo)], rtol=1e-5, atol=1e-6)
    assert lo[6] < lo[1]
    # Each process read only its half of every global batch; together they are the 1-process batch.
    for g in range(3):
        assert not set(t[0]["train_share"][g]) & set(t[1]["train_share"][g])
        assert t[0]["train_share"][g] + t[1]["train_share"][g] == o["train_share"][g]
    # Evaluation: every dev example in exactly one valid row of the global batches; 41 = 21 + 20 local rows.
    n = o["eval_size"]
    assert n == 41
    for x in (o, *t):
        assert {int(k): v for k, v in x["eval_counts"].items()} == {i: 1 for i in range(n)}
    assert [x["local_valid"] for x in t] == [21, 20] and o["local_valid"] == n
    # The end-of-run evaluation wrote one prediction per test question, in split order, and the same
    # predictions as the single process.
    po = _read(one / "work" / "eval" / "test_predictions.json")
    pt = _read(two / "work" / "eval" / "test_predictions.json")
    assert len(pt) == len({p["question_id"] for p in pt}) == 40
    assert [p["question_id"] for p in pt] == [p["question_id"] for p in po]
    assert [p["prediction"] for p in pt] == [p["prediction"] for p in po]
    mo = _read(one / "work" / "eval" / "dev_metrics.json")["overall"]
    mt = _read(two / "work" / "eval" / "dev_metrics.json")["overall"]
    assert mt == pytest.approx(mo, rel=1e-6, abs=1e-9)
    # A checkpoint was written mid-run by both processes together.
    assert {"3", "6"} <= set(os.listdir(two / "work" / "checkpoints"))


_RESTORE_SCRIPT = textwrap.dedent("""
    import json, os, sys
    args = json.loads(sys.argv[1])
    sys.path.insert(0, args["root"]); sys.path.insert(0, os.path.join(args["root"], "tests"))
    import jax
    from conftest import load_config
    from openvivqa_jax.training import checkpoints
    from openvivqa_jax.vqa import evals, experiment
    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = args["data_dir"]
    cfg.eval.ocr_ablation = False
    exp, _ = experiment.create_experiment(cfg, args["workdir"], initialize=False)
    params, step = checkpoints.restore_params(exp.workdir, exp.spec.abstract_state.params, "best")
    preds = evals.predict_split(exp, params, "test")
    devices = {str(d) for leaf in jax.tree.leaves(params) for d in leaf.sharding.device_set}
    print(json.dumps(dict(step=step, num_devices=jax.device_count(), mesh=dict(exp.spec.mesh.shape),
                          param_devices=sorted(devices), predictions=[p["prediction"] for p in preds])))
""")


@pytest.mark.slow
def test_restore_a_4x2_fsdp_checkpoint_on_one_device(runs, data_dir):
    """Trained on a (4, 2) mesh with FSDP over 8 devices; restored and decoded on 1 device."""
    work = runs["one"] / "work"
    args = json.dumps(dict(root=ROOT, data_dir=data_dir, workdir=str(work)))
    try:
        res = subprocess.run([PY, "-c", _RESTORE_SCRIPT, args], cwd=ROOT, env=_env(None), capture_output=True,
                             text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"restore on one device timed out after {DEADLINE_S} s")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["num_devices"] == 1 and out["mesh"] == {"data": 1, "model": 1}
    assert len(out["param_devices"]) == 1
    assert out["step"] == 6
    expected = _read(work / "eval" / "test_predictions.json")
    assert out["predictions"] == [p["prediction"] for p in expected]


_FSDP_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax, numpy as np
    args = json.loads(sys.argv[1])
    sys.path.insert(0, args["root"]); sys.path.insert(0, os.path.join(args["root"], "tests"))
    from conftest import load_config, train_steps_on_one_batch
    from openvivqa_jax.training.sharding import path_str
    out, batch = {}, None
    for shape, fsdp in [((1, 1), False), ((4, 2), True)]:
        cfg = load_config("configs/tiny.py")
        cfg.data.data_dir = args["data_dir"]
        cfg.mesh.shape = shape
        cfg.fsdp = fsdp
        _, state, _, batch, losses = train_steps_on_one_batch(cfg, os.path.join(args["workdir"], str(shape[0])), batch)
        spec = lambda x: [a if a is None or isinstance(a, str) else list(a) for a in x.sharding.spec]
        specs = {path_str(p): spec(x) for p, x in jax.tree_util.tree_leaves_with_path(state.params)}
        mu = state.opt_state[1][0].mu  # chain(clip, adam): adam's ScaleByAdamState
        mu_specs = {path_str(p): spec(x) for p, x in jax.tree_util.tree_leaves_with_path(mu)}
        leaves = jax.tree.leaves(state.params)
        total = sum(x.nbytes for x in leaves)
        per_device = sum(x.addressable_shards[0].data.nbytes for x in leaves)
        out[str(shape)] = dict(losses=losses, specs=specs, mu_specs=mu_specs, total=total, per_device=per_device)
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_fsdp_shards_params_and_optimizer_state_and_matches_one_device(tmp_path, data_dir):
    args = json.dumps(dict(root=ROOT, data_dir=data_dir, workdir=str(tmp_path)))
    try:
        res = subprocess.run([PY, "-c", _FSDP_SCRIPT, args], cwd=ROOT, env=_env(8), capture_output=True, text=True,
                             timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"FSDP check timed out after {DEADLINE_S} s")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    one, eight = out["(1, 1)"], out["(4, 2)"]
    np.testing.assert_allclose(eight["losses"], one["losses"], rtol=2e-5)
    specs = eight["specs"]
    q = next(k for k in specs if "self_attn/query/kernel" in k)  # (32, 32): d_in on data, heads on model
    assert specs[q] == ["data", "model"]
    wo = next(k for k in specs if "ffn/wo/kernel" in k)  # (64, 32)
    assert specs[wo] == ["model", "data"]
    vh = next(k for k in specs if "vocab_head/kernel" in k)  # (32, 400)
    assert specs[vh] == ["data", "model"]
    # Adam's moments are laid out like the parameters.
    assert eight["mu_specs"] == specs
    # A device holds well under half the parameters (everything big is split 8 or 4 ways).
    assert eight["total"] == one["total"]
    assert eight["per_device"] < 0.3 * one["total"]


# ----------------------------------------------------------------------------- bf16 and accumulation
def _trainer(data_dir, workdir, **model_train):
    """``configs/tiny.py`` with ``section__name=value`` overrides: the experiment and its (mutable) state."""
    from openvivqa_jax.vqa import experiment

    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = data_dir
    for k, v in model_train.items():
        sec, name = k.split("__")
        cfg[sec][name] = v
    exp, state = experiment.create_experiment(cfg, str(workdir))
    return types.SimpleNamespace(exp=exp, spec=exp.spec, state=state)


def _batch(tr, n=8):
    from openvivqa_jax.data import pipeline

    return next(pipeline.train_iterator(tr.exp.data.source("train"), tr.exp.inputs.pre, batch_size=n, seed=0))


@pytest.mark.slow
def test_bfloat16_compute_trains_with_float32_master_weights(tmp_path, data_dir):
    import jax
    import jax.numpy as jnp

    from openvivqa_jax.data import pipeline

    f32 = _trainer(data_dir, tmp_path / "f32")
    bf16 = _trainer(data_dir, tmp_path / "bf16", model__dtype="bfloat16")
    local = _batch(f32)
    batch = pipeline.to_global(local, bf16.spec.batch_sharding)
    key = jax.random.key(0)
    # Same float32 initial weights.
    for a, b in zip(jax.tree.leaves(f32.state.params), jax.tree.leaves(bf16.state.params)):
        assert a.dtype == b.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The matmuls and convolutions run in bfloat16: (almost) all of them take bfloat16 operands.
    jaxpr = jax.make_jaxpr(lambda p: train.make_loss_fn(bf16.spec)(p, batch, key)[0])(bf16.state.params)
    dots = [e for e in all_eqns(jaxpr.jaxpr) if e.primitive.name in ("dot_general", "conv_general_dilated")]
    assert dots, "no matmuls found in the loss"
    bf = [e for e in dots if all(v.aval.dtype == jnp.bfloat16 for v in e.invars)]
    assert len(bf) >= 0.8 * len(dots), (len(bf), len(dots))
    # The bfloat16 loss is the float32 loss to bfloat16 precision (~3 significant digits), not identical.
    fwd = {name: float(jax.jit(lambda p, b, tr=tr: train.make_loss_fn(tr.spec)(p, b, key, deterministic=True)[0])(
        tr.state.params, batch)) for name, tr in (("f32", f32), ("bf16", bf16))}
    assert fwd["bf16"] == pytest.approx(fwd["f32"], rel=2e-2) and fwd["bf16"] != fwd["f32"], fwd
    step = train.make_train_step(bf16.spec)
    losses = []
    for _ in range(8):
        with sharding.mesh_context(bf16.spec.mesh):
            bf16.state, m = step(bf16.state, pipeline.to_global(local, bf16.spec.batch_sharding))
        losses.append(float(m["loss"]))
    assert np.isfinite(losses).all() and losses[-1] < 0.9 * losses[0], losses
    # Master weights and optimizer state stay float32, and they moved.
    floats = [x for x in jax.tree.leaves((bf16.state.params, bf16.state.opt_state))
              if jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats and all(x.dtype == jnp.float32 for x in floats)
    moved = [not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(bf16.state.params), jax.tree.leaves(f32.state.params))]
    assert sum(moved) > 0.8 * len(moved)


@pytest.mark.slow
def test_grad_accumulation_over_two_half_batches_equals_one_full_batch(tmp_path, data_dir):
    """optax.MultiSteps averages the micro-batch gradients; the loss is a mean over counted answer
    tokens, so both halves are given the same token count (the first ``m`` counted positions of every
    example) and the average of the half-batch gradients is the full-batch gradient."""
    import jax

    from openvivqa_jax.data import pipeline

    full = _trainer(data_dir, tmp_path / "full", model__dropout=0.0)
    acc = _trainer(data_dir, tmp_path / "acc", model__dropout=0.0, train__grad_accum_steps=2)
    b = _batch(full)
    counted = b["target_mask"] & ((b["target_vocab"] >= 0) | b["target_ocr"].any(-1))
    m = int(counted.sum(1).min())
    assert m >= 1
    b["target_mask"] = counted & (np.cumsum(counted, 1) <= m)
    assert (b["target_mask"].sum(1) == m).all()
    halves = [{k: v[:4] for k, v in b.items()}, {k: v[4:] for k, v in b.items()}]
    init = jax.tree.map(lambda x: np.array(x, copy=True), full.state.params)
    np.testing.assert_array_equal(jax.tree.leaves(init)[0], np.asarray(jax.tree.leaves(acc.state.params)[0]))

    with sharding.mesh_context(full.spec.mesh):
        full.state, mf = train.make_train_step(full.spec)(full.state,
                                                          pipeline.to_global(b, full.spec.batch_sharding))
    step = train.make_train_step(acc.spec)
    with sharding.mesh_context(acc.spec.mesh):
        acc.state, m1 = step(acc.state, pipeline.to_global(halves[0], acc.spec.batch_sharding))
        after_first = jax.tree.map(lambda x: np.array(x, copy=True), acc.state.params)
        acc.state, m2 = step(acc.state, pipeline.to_global(halves[1], acc.spec.batch_sharding))
    # The first micro-step only accumulates.
    for a, b0 in zip(jax.tree.leaves(after_first), jax.tree.leaves(init)):
        np.testing.assert_array_equal(a, b0)
    # Mean of the half-batch losses is the full-batch loss (equal token counts).
    assert (float(m1["loss"]) + float(m2["loss"])) / 2 == pytest.approx(float(mf["loss"]), rel=1e-5)
    # Adam's moments after the one real update are linear (mu) and quadratic (nu) in the clipped
    # gradient: they match the full batch's to float tolerance, leaf by leaf. The absolute tolerance is
    # float32 rounding at the scale of the whole gradient (1e-6 of the largest |mu|): leaves whose gradient
    # is zero mathematically (conv biases before GroupNorm, attention key biases) hold only rounding
    # noise of that size, different in the two runs.
    adam_full = full.state.opt_state[1][0]
    adam_acc = acc.state.opt_state.inner_opt_state[1][0]
    assert int(acc.state.opt_state.gradient_step) == 1 and int(adam_acc.count) == int(adam_full.count) == 1
    mu_scale = max(float(np.abs(np.asarray(y)).max()) for y in jax.tree.leaves(adam_full.mu))
    assert mu_scale > 1e-4, mu_scale
    for x, y in zip(jax.tree.leaves(adam_acc.mu), jax.tree.leaves(adam_full.mu)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6 * mu_scale)
    for x, y in zip(jax.tree.leaves(adam_acc.nu), jax.tree.leaves(adam_full.nu)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-3, atol=(1e-6 * mu_scale) ** 2 * 100)
    # The parameters match wherever the gradient is above float noise. Adam's first step is
    # lr * g / (|g| + 1e-9): where |g| is at rounding level (attention key biases, whose gradient is zero
    # mathematically since softmax is shift-invariant; conv biases before GroupNorm; stray entries)
    # either run moves by up to lr in a noise-chosen direction, so those entries are only bounded.
    # Noam at update 0 (tiny: lr_scale 0.3, d_model 32, warmup 10); both micro-steps log the rate of
    # the update they belong to.
    lr = 0.3 * 32 ** -0.5 * min(1.0, 1.0 * 10 ** -1.5)
    assert float(mf["learning_rate"]) == float(m1["learning_rate"]) == float(m2["learning_rate"]) == \
        pytest.approx(lr, rel=1e-6)
    n_sig = n_noise = 0
    for x, f, mu, b0 in zip(jax.tree.leaves(acc.state.params), jax.tree.leaves(full.state.params),
                            jax.tree.leaves(adam_full.mu), jax.tree.leaves(init)):
        x, f, mu = np.asarray(x), np.asarray(f), np.asarray(mu)
        zero = mu == 0  # e.g. embedding rows of pieces absent from the batch: no step (the sum of the
        np.testing.assert_array_equal(f[zero], b0[zero])  # half-batch gradients may leave noise there)
        sig = np.abs(mu) > 1e-7  # |g| > 1e-6 (mu = 0.1 g after one update)
        np.testing.assert_allclose(x[sig], f[sig], rtol=1e-4, atol=1e-6)
        assert np.all(np.abs(f[sig] - b0[sig]) > 0.5 * lr)  # a real update of about lr happened there
        assert np.abs(x - f).max() <= 2.0 * lr * (1 + 1e-3)
        n_sig, n_noise = n_sig + int(sig.sum()), n_noise + int((~sig & ~zero).sum())
    assert n_noise < 0.05 * n_sig, (n_noise, n_sig)


# ----------------------------------------------------------------------------- environment and launchers
_SLURM_SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, os.environ["ROOT"]); sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests"))
    from conftest import load_config
    cfg = load_config("configs/tiny.py")
    cfg.distributed.initialize = True  # nothing else: coordinator, count and id come from SLURM_*
    from openvivqa_jax import main as entry
    entry._init_distributed(cfg)
    import jax, numpy as np
    from jax.experimental import multihost_utils
    ids = multihost_utils.process_allgather(np.int32(jax.process_index()))
    print(json.dumps(dict(index=jax.process_index(), count=jax.process_count(), devices=jax.device_count(),
                          local=jax.local_device_count(), gathered=np.asarray(ids).tolist())))
    jax.distributed.shutdown()
""")


def _free_port_in(lo: int, hi: int) -> int:
    for port in range(lo, hi):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{lo}, {hi})")


@pytest.mark.slow
def test_jax_distributed_initialize_reads_slurm_environment(tmp_path):
    """``distributed.initialize=True`` alone: jax finds the coordinator (first host of the node list, port
    ``SLURM_JOB_ID % 4096 + 61440``), the process count and id from SLURM's variables, as under srun."""
    import random

    port = _free_port_in(61440 + random.randrange(0, 3000), 65536)
    cmds = []
    for pid in range(2):
        env = _env(2)
        env.update(ROOT=ROOT, SLURM_JOB_ID=str(port - 61440), SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="2",
                   SLURM_PROCID=str(pid), SLURM_LOCALID=str(pid), SLURM_STEP_NUM_NODES="1")
        cmds.append(([PY, "-c", _SLURM_SCRIPT], env))
    _run_all(cmds, str(tmp_path), deadline_s=240)
    outs = []
    for i in range(2):
        with open(tmp_path / f"proc{i}.log", encoding="utf-8") as f:
            outs.append(json.loads([ln for ln in f.read().splitlines() if ln.startswith("{")][-1]))
    assert [(o["index"], o["count"], o["devices"], o["local"]) for o in outs] == [(0, 2, 4, 2), (1, 2, 4, 2)]
    assert outs[0]["gathered"] == outs[1]["gathered"] == [0, 1]


def test_tpu_pod_script_runs_one_command_on_all_workers(tmp_path):
    script = os.path.join(ROOT, "launch", "tpu_pod.sh")
    subprocess.run(["bash", "-n", script], check=True)
    tarball = tmp_path / "src.tar.gz"
    env = dict(os.environ, TPU_NAME="vqa-pod", ZONE="us-west4-a", DRY_RUN="1", TARBALL=str(tarball))
    out = subprocess.run(["bash", script, "all", "configs/openvivqa/mlpag.py", "/mnt/shared/runs/mlpag",
                          "--config.mesh.shape=(-1,4)", "--config.data.manual_dir=/mnt/shared/openvivqa"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert len(out) == 4  # scp, install, prepare, train
    # The archive that setup copies holds the sources and nothing git ignores (virtual environments such
    # as the quick start's .venv or CI's .ci-venv, run folders, caches), nor .git.
    import tarfile

    with tarfile.open(tarball) as tf:
        names = {n.removeprefix("./") for n in tf.getnames()}
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True).stdout.split()
    assert {"setup.py", "openvivqa_jax/vqa/train.py", "launch/tpu_pod.sh"} <= names
    assert {t for t in tracked if os.path.exists(os.path.join(ROOT, t))} <= names
    top = {n.split("/")[0] for n in names}
    assert not top & {".git", ".venv", "venv", ".ci-venv", "runs", ".pytest_cache"}, top
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert out[0].startswith("gcloud compute tpus tpu-vm scp ") and "--worker=all" in out[0]
    ssh = out[1:]
    assert all(x.startswith("gcloud compute tpus tpu-vm ssh vqa-pod --zone us-west4-a --worker=all --command ")
               for x in ssh)
    # The remote commands, unquoted as the worker's shell will see them.
    import shlex

    remote = [shlex.split(x)[-1] for x in ssh]
    assert "python3 -m pip install -q -e '.[tpu]'" in remote[0]  # the package's TPU extra (jax[tpu], libtpu)
    assert "openvivqa_jax.main --mode=prepare" in remote[1]
    assert "--config.data.manual_dir=/mnt/shared/openvivqa" in remote[1]
    assert "--config.mesh.shape" not in remote[1]  # only data overrides go to the prepare step
    # The prepare command works as a worker would run it (here: from this checkout, the tiny config).
    prep = subprocess.run(["bash", script, "prepare", "configs/tiny.py", f"--config.data.data_dir={tmp_path}"],
                          env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    cmd = shlex.split(prep)[-1].replace("cd ~/openvivqa_jax", f"cd {shlex.quote(ROOT)}")
    cmd = cmd.replace("python3 -m", f"{shlex.quote(PY)} -m")
    ran = subprocess.run(["bash", "-c", cmd], env=_env(None), capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "synthetic_openvivqa/tiny/1.2.0 {'train': 163, 'validation': 41, 'test': 40}" in ran.stdout
    train_argv = shlex.split(remote[2].split("&&", 1)[1].split("2>&1")[0])
    assert train_argv == ["python3", "-m", "openvivqa_jax.main", "--config=configs/openvivqa/mlpag.py",
                          "--workdir=/mnt/shared/runs/mlpag", "--config.distributed.initialize=True",
                          "--config.mesh.shape=(-1,4)", "--config.data.manual_dir=/mnt/shared/openvivqa"]
    bad = subprocess.run(["bash", script, "train", "c.py", "w"], env=dict(os.environ, DRY_RUN="1"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "TPU_NAME" in bad.stderr


@pytest.mark.slow
def test_slurm_script_prepares_once_per_node_then_srun_trains(tmp_path):
    """``launch/gpu_slurm.sbatch`` under a fake ``srun`` that logs its arguments, really runs the dataset
    step (the tiny set is built) and skips the training step."""
    script = os.path.join(ROOT, "launch", "gpu_slurm.sbatch")
    subprocess.run(["bash", "-n", script], check=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text(textwrap.dedent("""\
        #!/usr/bin/env bash
        python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$SRUN_LOG"
        args=("$@")
        while [[ "${args[0]}" == --* ]]; do args=("${args[@]:1}"); done
        if [[ " ${args[*]} " == *" --mode=prepare "* ]]; then exec "${args[@]}"; fi
    """))
    (fake / "python").write_text(f"#!/usr/bin/env bash\nexec {PY} \"$@\"\n")
    for f in ("srun", "python"):
        os.chmod(fake / f, 0o755)
    log = tmp_path / "srun.jsonl"
    data = tmp_path / "tfds"
    env = _env(None)
    env.update(PATH=f"{fake}{os.pathsep}{env['PATH']}", SRUN_LOG=str(log), SLURM_NNODES="2", SLURM_NTASKS="16",
               SLURM_JOB_ID="123", SLURM_SUBMIT_DIR=ROOT, DATA_DIR=str(data))
    res = subprocess.run(["bash", script, "configs/tiny.py", str(tmp_path / "run"), "--config.train.batch_size=16"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2
    prep, train_call = calls
    assert prep[:2] == ["--ntasks-per-node=1", "--ntasks=2"]
    assert prep[2:6] == ["python", "-m", "openvivqa_jax.main", "--mode=prepare"]
    assert "synthetic_openvivqa/tiny" in res.stdout  # the dataset step ran and printed the splits
    assert os.path.isdir(data / "synthetic_openvivqa" / "tiny")
    assert train_call == ["--kill-on-bad-exit=1", "python", "-m", "openvivqa_jax.main", "--config=configs/tiny.py",
                          f"--workdir={tmp_path / 'run'}", "--config.distributed.initialize=True",
                          f"--config.data.data_dir={data}", "--config.train.batch_size=16"]
    bad = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


@pytest.mark.slow
def test_dropout_prng_changes_only_the_dropout_masks(data_dir, tmp_path):
    """``train.dropout_prng``: rbg draws other dropout masks than threefry for the same seed and batch (other
    losses); with dropout off both give the same loss, so nothing else depends on it; unknown names fail."""
    from openvivqa_jax.data import pipeline

    losses = {}
    batch = None
    for impl in ("threefry2x32", "rbg"):
        for rate in (0.1, 0.0):
            tr = _trainer(data_dir, tmp_path / f"{impl}_{rate}", model__dropout=rate, train__dropout_prng=impl)
            batch = _batch(tr) if batch is None else batch
            with sharding.mesh_context(tr.spec.mesh):
                _, m = train.make_train_step(tr.spec)(tr.state, pipeline.to_global(batch, tr.spec.batch_sharding))
            losses[impl, rate] = float(m["loss"])
    assert losses["threefry2x32", 0.0] == losses["rbg", 0.0]
    assert losses["threefry2x32", 0.1] != losses["rbg", 0.1]
    assert all(np.isfinite(v) for v in losses.values())
    bad = _trainer(data_dir, tmp_path / "bad", train__dropout_prng="philox")
    with pytest.raises(ValueError, match="dropout_prng must be 'threefry2x32', 'rbg' or 'unsafe_rbg', got 'philox'"):
        train.make_train_step(bad.spec)
