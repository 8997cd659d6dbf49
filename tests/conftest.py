"""Shared pytest fixtures and helpers: tiny configs and random model inputs.

The tests are in two folders: ``tests/unit`` (in-process tests of functions, modules and models, no
subprocess, no training beyond a few steps) and ``tests/e2e`` (command-line tools run as processes, models
trained end to end, datasets built with OCR or Beam). Independently, ``@pytest.mark.slow`` marks what the fast
tier (``-m "not slow"``) leaves out.

Compilation cache: the test session keeps one JAX persistent compilation cache (a fresh temporary folder,
removed at the end) for the xdist workers and every subprocess they start (``JAX_COMPILATION_CACHE_DIR``).
Many tests run the same small programs (the same tiny config trained, killed and resumed; a trained
workdir decoded by several ``predict`` commands), so later compiles load the executable instead of
compiling it again. A cached executable is the same program: results do not change. Set
``OPENVIVQA_TEST_JAX_CACHE=0`` to compile everything afresh, or ``JAX_COMPILATION_CACHE_DIR`` to use your own.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# Test modules of one tier import writers of test data from the other's modules (e.g. the small OpenViVQA
# release of tests/unit/test_openvivqa_builder.py), whichever folder pytest collects first.
for _tier in ("unit", "e2e"):
    if os.path.join(ROOT, "tests", _tier) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "tests", _tier))

SHARED = os.environ.get("OPENVIVQA_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))


def pytest_configure(config):
    """Starts the session's JAX compilation cache (module doc) in the controlling process, before the xdist
    workers (which inherit the environment) start and before any test imports JAX."""
    if hasattr(config, "workerinput") or os.environ.get("OPENVIVQA_TEST_JAX_CACHE", "1") == "0" \
            or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    config._openvivqa_jax_cache = tempfile.mkdtemp(prefix="openvivqa-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = config._openvivqa_jax_cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.2"
    if "jax" in sys.modules:  # imported by a plugin before this hook: set it directly
        import jax

        jax.config.update("jax_compilation_cache_dir", config._openvivqa_jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def all_eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in its equations (pjit, while, remat,
    custom_vjp...), depth first."""
    for e in jaxpr.eqns:
        yield e
        for v in e.params.values():
            for sub in (v if isinstance(v, (list, tuple)) else [v]):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from all_eqns(sub)


def build_once(tmp_path_factory, name: str, build) -> "os.PathLike":
    """A folder built once per test session and shared by the xdist workers (pytest-xdist's documented
    file-lock pattern): the first worker to ask runs ``build(folder)``; a worker asking meanwhile waits for it,
    and later ones reuse the folder. For expensive artifacts that several tests read (a trained workdir).

    Args:
      tmp_path_factory: pytest's fixture.
      name: the artifact's name (one folder per name).
      build: ``build(folder: pathlib.Path) -> None``; it fills the (new, empty) folder or raises.

    Returns:
      The folder.
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common parent
    path = root / f"shared-{name}"
    with FileLock(str(path) + ".lock"):
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            build(path)
            (path / ".built").touch()
    return path


def pytest_unconfigure(config):
    """Removes the session's compilation cache."""
    path = getattr(config, "_openvivqa_jax_cache", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


def subprocess_env(devices: int | None = None, extra: dict | None = None) -> dict:
    """Environment for a test's subprocess: this checkout on PYTHONPATH, TensorFlow's C++ logs quiet, the
    parent's XLA_FLAGS dropped (``devices``: that many fake CPU devices instead), then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("XLA_FLAGS", None)
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env.update(extra or {})
    return env


def load_config(path: str):
    """Loads ``get_config()`` from a config file path relative to the repo root."""
    from openvivqa_jax.config_files import load_config as load_config_file

    return load_config_file(os.path.join(ROOT, path))


#: Tiny sizes for model-specific fields (applied when the model's config has the field).
TINY_MODEL_FIELDS = dict(word_dim=16, lstm_dim=24, attention_dim=16, num_glimpses=2, context_glimpses=1,
                         classifier_dim=24, num_answers=7, num_text_layers=1, num_mmt_layers=2)


def tiny_model_config(name: str = "mlpag"):
    """The synthetic config of ``name`` (configs/synthetic/<name>.py, else configs/default.py) shrunk to a
    few thousand parameters' worth of compute."""
    path = f"configs/synthetic/{name}.py"
    cfg = load_config(path if os.path.exists(os.path.join(ROOT, path)) else "configs/default.py")
    m = cfg.model
    m.name = name
    for k, v in TINY_MODEL_FIELDS.items():
        if k in m:
            m[k] = v
    m.d_model = 32
    m.num_heads = 2
    m.ffn_dim = 64
    m.dropout = 0.0
    m.num_fusion_layers = 1
    m.num_decoder_layers = 2
    m.max_question_len = 6
    m.max_answer_len = 5
    m.num_ocr = 3
    m.vision.cnn_channels = (8, 16)
    cfg.data.image_size = (32, 24)
    cfg.data.max_ocr_pieces = 3
    return cfg


def random_batch(cfg, vocab_size: int, batch: int = 2, seed: int = 0) -> dict:
    """Random model inputs with the pipeline's layout for ``cfg``."""
    rng = np.random.default_rng(seed)
    m = cfg.model
    N, L, Lq, P = m.num_ocr, m.max_answer_len, m.max_question_len, cfg.data.max_ocr_pieces
    w, h = cfg.data.image_size
    out = dict(
        question=rng.integers(4, vocab_size, (batch, Lq)).astype(np.int32),
        question_mask=np.arange(Lq)[None].repeat(batch, 0) < rng.integers(2, Lq + 1, (batch, 1)),
        ocr_pieces=rng.integers(4, vocab_size, (batch, N, P)).astype(np.int32),
        ocr_piece_mask=np.ones((batch, N, P), bool),
        ocr_phoc=(rng.random((batch, N, m.phoc_dim)) < 0.1).astype(np.float32),
        ocr_boxes=np.sort(rng.random((batch, N, 4)).astype(np.float32).reshape(batch, N, 2, 2), axis=2)
        .transpose(0, 1, 3, 2).reshape(batch, N, 4),
        ocr_mask=np.ones((batch, N), bool),
        decoder_in=rng.integers(4, vocab_size + N, (batch, L)).astype(np.int32),
        target_vocab=rng.integers(4, vocab_size, (batch, L)).astype(np.int32),
        target_ocr=np.zeros((batch, L, N), bool),
        target_mask=np.ones((batch, L), bool),
    )
    if m.vision.kind in ("cnn", "vit"):
        out["image"] = rng.integers(0, 256, (batch, h, w, 3), dtype=np.uint8)
    else:
        R, D = m.vision.num_regions, m.vision.region_dim
        out["region_features"] = rng.standard_normal((batch, R, D)).astype(np.float32)
        out["region_boxes"] = np.tile(np.array([0.1, 0.1, 0.5, 0.5], np.float32), (batch, R, 1))
        out["region_mask"] = np.ones((batch, R), bool)
    out["decoder_in"][:, 0] = 2
    if "num_answers" in m:  # classifiers: soft scores over K answers (+ N OCR slots for LoRRA)
        C = m.num_answers + (N if m.name == "lorra" else 0)
        out["answer_scores"] = (rng.integers(0, 4, (batch, C)) * (rng.random((batch, C)) < 0.3) / 3.0).astype(
            np.float32)
    return out


@pytest.fixture
def tiny_cfg():
    """A tiny MLPAG config."""
    return tiny_model_config()
