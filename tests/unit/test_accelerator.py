"""openvivqa_jax/accelerator.py: the machine's accelerator as the hardware shows it (stand-ins for nvidia-smi,
the device files and the environment), the extra each needs, the backend line of a run's log, and the one-line
error of a run that asked for an accelerator JAX does not see (on this CPU machine)."""

from __future__ import annotations

import types

import pytest

from openvivqa_jax import accelerator


def _devices(n: int, kind: str) -> list:
    return [types.SimpleNamespace(device_kind=kind) for _ in range(n)]


def test_backend_line_names_backend_devices_their_kind_and_processes():
    line = accelerator.backend_line
    assert line("gpu", _devices(8, "NVIDIA H100 80GB HBM3"), 1, 8) == \
        "backend gpu: 8 devices (NVIDIA H100 80GB HBM3), 1 process"
    assert line("cpu", _devices(1, "cpu"), 1, 1) == "backend cpu: 1 device (cpu), 1 process"
    assert line("tpu", _devices(32, "TPU v5 lite"), 8, 4) == \
        "backend tpu: 32 devices (TPU v5 lite), 8 processes, 4 devices here"


def test_runtime_from_nvidia_smi_device_files_or_environment():
    smi = "GPU 0: NVIDIA H200 (UUID: GPU-1b2c)\nGPU 1: NVIDIA H200 (UUID: GPU-3d4e)\n"
    none = lambda pattern: []  # noqa: E731
    assert accelerator.detect_runtime(run=lambda cmd: smi, environ={}, exists=none) == "gpu"
    # nvidia-smi installed with no GPU (it prints an error, or exits non-zero: None).
    assert accelerator.detect_runtime(run=lambda cmd: "No devices were found\n", environ={}, exists=none) == "cpu"
    assert accelerator.detect_runtime(run=lambda cmd: None, environ={}, exists=none) == "cpu"
    tpu_v4 = lambda pattern: ["/dev/accel0"] if pattern.startswith("/dev/accel") else []  # noqa: E731
    tpu_v5e = lambda pattern: ["/dev/vfio/0"] if pattern.startswith("/dev/vfio") else []  # noqa: E731
    assert accelerator.detect_runtime(run=lambda cmd: None, environ={}, exists=tpu_v4) == "tpu"
    assert accelerator.detect_runtime(run=lambda cmd: None, environ={}, exists=tpu_v5e) == "tpu"
    assert accelerator.detect_runtime(run=lambda cmd: None, environ={"COLAB_TPU_ADDR": "10.0.0.2:8470"},
                                      exists=none) == "tpu"
    assert accelerator.EXTRAS == {"gpu": "cuda", "tpu": "tpu", "cpu": None}


def test_missing_backend_names_the_extra_only_when_no_plugin_is_importable():
    present = {"jax_cuda13_plugin"}
    spec = lambda name: object() if name in present else None  # noqa: E731
    assert accelerator.missing_backend("gpu", spec) is None  # the CUDA 13 plugin serves too
    assert accelerator.missing_backend("tpu", spec) == "tpu"
    assert accelerator.missing_backend("cpu", spec) is None


def test_start_backend_logs_this_machines_cpu_and_refuses_an_absent_gpu(monkeypatch):
    import jax

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    lines = []
    assert jax.default_backend() == "cpu", "a CPU-only test"
    line = accelerator.start_backend("auto", log=lines.append)
    n = len(jax.devices())
    assert lines == [line] == [f"backend cpu: {n} device{'s' if n > 1 else ''} (cpu), 1 process"]
    if accelerator.missing_backend("gpu"):
        with pytest.raises(accelerator.BackendError) as e:
            accelerator.start_backend("gpu", log=lines.append)
        assert str(e.value).startswith(f"config.platform='gpu', but JAX sees no GPU: its backend is cpu ({n} device")
        assert 'no JAX GPU plugin is installed (this jaxlib runs on the CPU only); install it: pip install -e ".[cuda]"' \
            in str(e.value)
    with pytest.raises(accelerator.BackendError, match="config.platform='tpu' and JAX_PLATFORMS='cuda,cpu' disagree"):
        monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
        accelerator.restrict_platform("tpu")
    accelerator.restrict_platform("gpu")  # cuda first: they agree
    assert len(lines) == 1
