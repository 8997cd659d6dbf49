"""A run asked for an accelerator that JAX cannot see stops at once with one ``error:`` line (exit status 1),
before any dataset is built or workdir made, instead of training on the CPU: ``--config.platform=gpu`` on a
machine whose jaxlib is the CPU build, ``JAX_PLATFORMS=cuda`` (where JAX itself fails with a bare
AssertionError), and the two disagreeing. Also ``predict`` with such a ``JAX_PLATFORMS``. Needs a machine with no
GPU plugin (skipped where one is installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from openvivqa_jax import accelerator

pytestmark = pytest.mark.skipif(accelerator.missing_backend("gpu") is None,
                                reason="a JAX GPU plugin is installed here: these runs would find a GPU")


def _main(tmp_path, *flags, env=None):
    cmd = [sys.executable, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={tmp_path / 'run'}",
           f"--config.data.data_dir={tmp_path / 'tfds'}", *flags]
    return subprocess.run(cmd, cwd=ROOT, env=subprocess_env(extra=env), capture_output=True, text=True, timeout=300)


def _one_error_line(res) -> str:
    assert res.returncode == 1, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_platform_gpu_without_a_gpu_is_one_line(tmp_path):
    line = _one_error_line(_main(tmp_path, "--config.platform=gpu"))
    assert line == ("error: BackendError: config.platform='gpu', but JAX sees no GPU: its backend is cpu (1 device); "
                    f"no JAX GPU plugin is installed (this jaxlib runs on the CPU only); install it: "
                    f"{accelerator.INSTALL_HINT['gpu']}. --config.platform=auto runs on what JAX finds")
    assert not (tmp_path / "run").exists() and not (tmp_path / "tfds").exists()


def test_jax_platforms_cuda_without_a_gpu_is_one_line(tmp_path):
    line = _one_error_line(_main(tmp_path, env={"JAX_PLATFORMS": "cuda"}))
    assert line.startswith("error: BackendError: JAX_PLATFORMS='cuda' asks JAX for a backend it cannot start: ")
    assert "unset JAX_PLATFORMS to run on what JAX finds" in line
    line = _one_error_line(_main(tmp_path, "--config.platform=tpu", env={"JAX_PLATFORMS": "cpu"}))
    assert line == ("error: BackendError: config.platform='tpu' and JAX_PLATFORMS='cpu' disagree; unset JAX_PLATFORMS "
                    "or set --config.platform to match it (or to 'auto')")


def test_predict_with_an_unusable_jax_platforms_is_one_line(tmp_path):
    """predict checks its workdir before it starts JAX: a config.json, a tokenizer and a step folder reach that
    point."""
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    from conftest import load_config

    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(load_config("configs/tiny.py").to_json_best_effort(), encoding="utf-8")
    train_sentencepiece(["quán phở hòa bên trái"] * 50, str(work / "spm.model"), vocab_size=300)
    (work / "checkpoints" / "10").mkdir(parents=True)  # a step folder: the backend starts before it is read
    from PIL import Image

    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "p.jpg")
    res = subprocess.run([sys.executable, "-m", "openvivqa_jax.predict", f"--workdir={work}",
                          f"--image={tmp_path / 'p.jpg'}", "--question=tên quán là gì", "--ocr=none"], cwd=ROOT,
                         env=subprocess_env(extra={"JAX_PLATFORMS": "tpu"}), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: JAX_PLATFORMS='tpu' asks JAX for a backend it cannot start: Unable to initialize backend 'tpu'"), lines


def test_platform_cpu_keeps_jax_on_the_cpu():
    """``config.platform='cpu'`` sets JAX's platform list before the backend starts (on an accelerator machine
    JAX would otherwise take the accelerator); a ``JAX_PLATFORMS`` the user set is left to JAX."""
    code = ("from openvivqa_jax import accelerator; accelerator.restrict_platform('cpu'); import jax; "
            "print(jax.config.jax_platforms); accelerator.start_backend('cpu', log=print)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.splitlines() == ["cpu", "backend cpu: 1 device (cpu), 1 process"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(extra={"JAX_PLATFORMS": "cpu"}),
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == ["cpu", "backend cpu: 1 device (cpu), 1 process"], out.stderr
