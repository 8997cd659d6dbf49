"""Shared helpers of the throughput benchmarks (``benchmarks/decode.py``, ``train_step.py``, ``input_pipeline.py``).

* configs: ``default`` is ``configs/synthetic/base.py`` (the pixel-CNN MLPAG); ``mlpag``, ``m4c``, ``qumlag``,
  ``fst`` are ``configs/openvivqa/<name>.py:benchmark``, docs/design.md §10's shapes (batch 64, 50 regions x 1024
  with boxes, question 20, answer 20, 50 OCR tokens with det 256 / rec 256 / fastText 300 features and boxes,
  vocabulary 4,000). ``--smoke`` shrinks every size so that a benchmark runs in seconds (tests only).
* random model inputs: ``tests/conftest.py``'s ``random_batch`` plus the config's extra OCR features
  (``model.ocr_extra_features``, e.g. ``ocr_det`` ``(batch, N, 256)``), standard normal float32.
* timing: wall clock (``time.perf_counter``) around a call and ``jax.block_until_ready``; the median
  of ``repeats`` calls after compilation and one warm-up call.
* memory: peak resident set size of this process (``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
  KiB on Linux, reported in MiB). Each model runs in its own subprocess (:func:`run_worker`) so that the
  peak belongs to that model alone.
* machine peak: the median FLOP/s of a jitted ``2048 x 2048`` float32 ``jnp.dot``
  (``2 n^3`` FLOPs per product), measured in the same run as the benchmark it normalizes.

Every benchmark prints one JSON object on stdout and its progress on stderr. Its errors follow the command
lines' contract (:mod:`openvivqa_jax.cli`): its path flags are checked first (:mod:`openvivqa_jax.paths`), and
a user's error (a path that cannot serve, an unknown model name, a worker's own ``error:`` line) ends it with one
``error:`` line and exit status 2 (usage) or 1 (input); ``sys.exit(run_script(main))`` runs it. JAX is imported
only when a measurement starts, so that a refused command line costs no more than the process start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (ROOT, os.path.join(ROOT, "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.errors import UsageError, UserError  # noqa: E402

__all__ = ["PAPER_MODELS", "load_config", "model_inputs", "shrink_for_smoke", "peak_rss_mb", "matmul_peak",
           "time_calls", "log", "emit", "machine_info", "run_worker", "parse_flags", "parse_models", "bench_state",
           "cost_flops", "set_field", "run_script", "paths", "FlagError", "WorkerError"]


class FlagError(UsageError, ValueError):
    """A benchmark flag whose value cannot be used (an unknown model name, a ``--set`` without a field): one
    ``error:`` line, exit status 2."""


class WorkerError(UserError):
    """A worker process ended with a user's error of its own (its one ``error:`` line is the message)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

#: The paper-size generators of docs/design.md §10 (``configs/openvivqa/<name>.py:benchmark``).
PAPER_MODELS = ("mlpag", "m4c", "qumlag", "fst")

#: docs/design.md §10's vocabulary size (the benchmark configs set it; random inputs draw pieces below it).
BENCHMARK_VOCAB = 4000


def load_config(name: str):
    """The config of benchmark model ``name``: ``default`` (``configs/synthetic/base.py``: the synthetic-data
    MLPAG with the pixel CNN, the zoo's base and the main job before its class-free region proposals), ``main``
    (``configs/default.py``: the main job, region proposals) or one of
    :data:`PAPER_MODELS` (``configs/openvivqa/<name>.py`` variant ``benchmark``).

    Raises:
      ValueError: for an unknown name.
    """
    if name == "default":
        path, args = os.path.join(ROOT, "configs", "synthetic", "base.py"), ()
    elif name == "main":
        path, args = os.path.join(ROOT, "configs", "default.py"), ()
    elif name in PAPER_MODELS:
        path, args = os.path.join(ROOT, "configs", "openvivqa", f"{name}.py"), ("benchmark",)
    else:
        raise ValueError(f"unknown benchmark model {name!r}; expected 'default', 'main' or one of {PAPER_MODELS}")
    from openvivqa_jax.config_files import load_config as load_config_file

    return load_config_file(path, *args)


def set_field(cfg, item: str) -> None:
    """Applies one ``FIELD=VALUE`` override to ``cfg`` (``model.dropout=0.0``); VALUE is read as a Python
    literal, else kept as a string.

    Raises:
      FlagError: if ``item`` has no ``=`` or FIELD does not exist in the config (a ValueError too).
    """
    import ast

    field, sep, value = item.partition("=")
    if not sep:
        raise FlagError(f"--set {item!r}: expected FIELD=VALUE")
    *parents, leaf = field.strip().split(".")
    node = cfg
    for name in parents:
        node = node[name]
    if leaf not in node:
        raise FlagError(f"--set {item!r}: the config has no field {field!r}")
    try:
        node[leaf] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        node[leaf] = value


def shrink_for_smoke(cfg):
    """``cfg`` with every size cut down (width 32, 1-2 layers, 4 OCR tokens, 6 regions of 16-d, extra OCR
    features 8-d, question 6, answer 5, vocabulary 50, batch 2), for the benchmarks' ``--smoke`` runs."""
    m = cfg.model
    with cfg.unlocked():
        m.d_model, m.num_heads, m.ffn_dim = 32, 2, 64
        for k, v in dict(num_fusion_layers=1, num_decoder_layers=2, num_text_layers=1, num_mmt_layers=2,
                         word_dim=16, lstm_dim=24, attention_dim=16).items():
            if k in m:
                m[k] = v
        m.max_question_len, m.max_answer_len, m.num_ocr = 6, 5, 4
        if m.vision.kind == "region":
            m.vision.num_regions, m.vision.region_dim = 6, 16
        else:
            m.vision.cnn_channels = (8, 16)
            cfg.data.image_size = (32, 24)
        extra = dict(m.get("ocr_extra_features", {}) or {})
        if extra:
            m.ocr_extra_features = {k: 8 for k in extra}
        cfg.data.max_ocr_pieces = 3
        cfg.tokenizer.vocab_size = 50
        cfg.train.batch_size = 2
    return cfg


def model_inputs(cfg, vocab_size: int, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for ``cfg.model`` with the pipeline's layout.

    ``tests/conftest.py``'s ``random_batch`` (question, OCR pieces/PHOC/boxes/mask, region features or
    pixels, teacher-forcing ids and targets, all masks true) plus every key of
    ``model.ocr_extra_features`` as ``(batch, N, dim)`` standard-normal float32, and with the region counter
    (``model.counter.weight`` > 0) its stream of ``model.counter.batch_size`` counting questions (the same
    layout, counts 1-4).
    """
    from conftest import random_batch

    from openvivqa_jax.models.counting import counter_weight

    out = random_batch(cfg, vocab_size, batch=batch, seed=seed)
    rng = np.random.default_rng(seed + 1)
    N = cfg.model.num_ocr
    for key, dim in sorted(dict(cfg.model.get("ocr_extra_features", {}) or {}).items()):
        out[key] = rng.standard_normal((batch, N, int(dim))).astype(np.float32)
    if counter_weight(cfg.model) > 0:
        size = int(cfg.model.counter.batch_size)
        stream = random_batch(cfg, vocab_size, batch=size, seed=seed + 2)
        for key in ("region_features", "region_boxes", "region_mask", "question", "question_mask"):
            out[f"counting_{key}"] = stream[key]
        out["counting_count_target"] = rng.integers(1, 5, (size,)).astype(np.int32)
    return out


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` (each blocked on its outputs) after ``warmup`` calls."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(fn())
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t0)
    return out


def matmul_peak(n: int = 2048, repeats: int = 10) -> dict[str, float]:
    """This machine's matmul peak: median FLOP/s of a jitted ``(n, n) @ (n, n)`` float32 ``jnp.dot``.

    Returns:
      ``{"n": n, "seconds_median": s, "flops_per_s": 2 n^3 / s}``.
    """
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), jnp.float32)
    b = jax.random.normal(k2, (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    secs = time_calls(lambda: f(a, b), repeats, warmup=2)
    s = statistics.median(secs)
    return {"n": n, "seconds_median": s, "flops_per_s": 2.0 * n ** 3 / s}


def log(msg: str) -> None:
    """Progress on stderr (stdout holds only the JSON result)."""
    print(msg, file=sys.stderr, flush=True)


def emit(obj: dict) -> None:
    """Prints ``obj`` as one JSON object on stdout."""
    print(json.dumps(obj, ensure_ascii=False, indent=1, default=float), flush=True)


def machine_info() -> dict[str, Any]:
    """Platform, CPU count, load averages at the start, JAX version and backend (numbers depend on them)."""
    import jax

    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "load_average": list(os.getloadavg()),
            "jax": jax.__version__, "backend": jax.default_backend(), "devices": len(jax.devices())}


def parse_models(text: str, allowed) -> list[str]:
    """Comma-separated model names, each checked against ``allowed``.

    Raises:
      FlagError: for an empty list or an unknown name (a ValueError too).
    """
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in allowed]
    if not names or bad:
        raise FlagError(f"--models {text!r}: unknown {bad}; expected a comma-separated subset of {tuple(allowed)}")
    return names


def parse_flags(parser: argparse.ArgumentParser, argv: list[str] | None,
                worker: Callable[[argparse.Namespace], dict],
                path_flags: dict[str, paths.PathKind] | None = None) -> tuple[argparse.Namespace, dict | None]:
    """Parses ``argv`` with ``parser`` plus the hidden ``--worker`` flag, which tells a process started by
    :func:`run_worker` what to measure; checks the path flags ``path_flags`` (:func:`openvivqa_jax.paths.check_args`);
    in a worker process then runs ``worker(args)`` and prints its result (:func:`emit`).

    Returns:
      ``(args, result)``: ``result`` is the worker's dict in a worker process, None in the parent.
    """
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    paths.check_args(args, path_flags or {})
    if not args.worker:
        return args, None
    result = worker(args)
    emit(result)
    return args, result


def run_worker(script: str, args: list[str], timeout: float | None = None) -> dict:
    """Runs ``python <script> <args>`` in a fresh process and returns the JSON object it prints last.

    Used to measure one model per process (honest peak RSS, no compilation cache shared between models).

    Raises:
      WorkerError: if the worker ends with its own ``error:`` line (a user's error: that line, its exit status).
      RuntimeError: if the worker exits non-zero otherwise or prints no JSON (its stderr tail is in the message).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode in (1, 2) and last.startswith("error: "):
        raise WorkerError(last.removeprefix("error: "), proc.returncode)
    sys.stderr.write(proc.stderr[-4000:] if proc.returncode else "")
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} {' '.join(args)} exited with {proc.returncode}: "
                           f"{proc.stderr[-2000:]}")
    text = proc.stdout.strip()
    start = text.find("{")
    if start < 0:
        raise RuntimeError(f"{os.path.basename(script)} {' '.join(args)} printed no JSON: {text[-500:]!r}")
    return json.loads(text[start:])


def bench_state(cfg, vocab_size: int, abstract: bool = False):
    """The trainer's train state without a dataset, tokenizer or workdir:
    :func:`openvivqa_jax.vqa.experiment.create_train_state` of the model built for ``vocab_size`` pieces, on the
    config's mesh (``abstract``: a one-device mesh and an ``nnx.eval_shape`` model, nothing initialized, for
    lowering only). The step is :func:`openvivqa_jax.vqa.train.make_train_step` of the returned spec, unchanged.
    (Imported lazily: ``train`` pulls in orbax and the evaluation package, which the decode benchmark does
    not need.)

    Args:
      cfg: an experiment config (``configs/*.py``).
      vocab_size: ``V``.

    Returns:
      ``(spec, state)``: the :class:`openvivqa_jax.vqa.experiment.StateSpec` and the sharded initial
      :class:`openvivqa_jax.training.state.TrainState` (None when ``abstract``; ``spec.abstract_state`` then).
    """
    from flax import nnx

    from openvivqa_jax.training import sharding
    from openvivqa_jax.models import build_model
    from openvivqa_jax.vqa.experiment import create_train_state

    mesh = sharding.create_mesh((1, 1) if abstract else cfg.mesh.shape, cfg.mesh.axes)
    build = lambda: build_model(cfg.model, vocab_size, seed=cfg.seed)  # noqa: E731
    model = nnx.eval_shape(build) if abstract else build()
    return create_train_state(cfg, model, mesh, initialize=not abstract)


def cost_flops(compiled) -> float | None:
    """``compiled.cost_analysis()['flops']`` (a dict, or a one-element list in older JAX); None if absent."""
    ca = compiled.cost_analysis()
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else {}
    f = (ca or {}).get("flops")
    return float(f) if f is not None else None
