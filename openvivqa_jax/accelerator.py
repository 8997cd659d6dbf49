"""Which accelerator a machine has, which install extra it needs, and which backend a run got.

Two halves:

* **Before anything is installed** (the standard library only, so ``launch/setup.sh`` and the Colab notebook
  run it with a bare interpreter from the checkout): :func:`detect_runtime` looks at the machine, not at JAX
  (``nvidia-smi -L`` lists a GPU; a Cloud TPU VM has ``/dev/accel*`` or ``/dev/vfio/<n>`` and its
  ``TPU_*``/``COLAB_TPU_ADDR`` environment), :data:`EXTRAS` names the ``setup.py`` extra for it and
  :func:`missing_backend` says whether the JAX plugin of that accelerator is importable. Command line::

      python -m openvivqa_jax.accelerator detect   # gpu | tpu | cpu
      python -m openvivqa_jax.accelerator extra    # cuda | tpu | (empty line for cpu)

* **At the start of a run** (:func:`start_backend`, called by ``main`` for every task, and by ``predict`` and
  ``evaluate`` before they load a model): honours ``config.platform`` (``auto``, ``cpu``, ``gpu``, ``tpu``) and
  the user's ``JAX_PLATFORMS``, starts JAX's backend and logs one INFO line naming it and its devices,
  ``backend gpu: 8 devices (NVIDIA H100 80GB HBM3), 1 process`` (:func:`backend_line`). A run asked for an
  accelerator that JAX cannot see stops with one :class:`BackendError` line that says what JAX found and what to
  install, instead of training on the CPU at a fraction of the speed.

JAX's own behaviour this rests on (``jax._src.xla_bridge.backends``, jax 0.12): without ``JAX_PLATFORMS`` JAX
starts every backend it has a plugin for and falls back to the CPU when none works; with ``JAX_PLATFORMS`` set it
starts only those and raises ``RuntimeError("Unable to initialize backend ...")`` when one fails, or a bare
``AssertionError`` when the list was ``cuda`` and no NVIDIA GPU is visible.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

from openvivqa_jax.errors import UserError

__all__ = ["PLATFORMS", "EXTRAS", "BackendError", "detect_runtime", "missing_backend", "restrict_platform",
           "start_backend", "backend_line", "INSTALL_HINT"]

#: Values of ``config.platform``: ``auto`` runs on what JAX finds (an accelerator before the CPU).
PLATFORMS = ("auto", "cpu", "gpu", "tpu")
#: The ``setup.py`` extra each runtime installs (None: the core install's CPU jaxlib).
EXTRAS: dict[str, str | None] = {"gpu": "cuda", "tpu": "tpu", "cpu": None}
#: The import names of the JAX plugin that gives each accelerator runtime its backend (one of them suffices).
PLUGIN_MODULES: dict[str, tuple[str, ...]] = {"gpu": ("jax_cuda12_plugin", "jax_cuda13_plugin"),
                                              "tpu": ("libtpu",), "cpu": ()}
#: What to install for each accelerator, in messages.
INSTALL_HINT = {"gpu": 'pip install -e ".[cuda]" (CUDA 12 wheels, NVIDIA driver >= 525.60.13; ".[cuda13]" for '
                       "driver >= 580), or launch/setup.sh",
                "tpu": 'pip install -e ".[tpu]" on the TPU VM, or launch/setup.sh'}
# JAX_PLATFORMS names -> the platform word of config.platform and of jax.default_backend().
_JAX_NAMES = {"cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "tpu": "tpu", "cpu": "cpu"}
_WORDS = {"gpu": "GPU", "tpu": "TPU", "cpu": "CPU"}
_LOGGED: set[str] = set()


class BackendError(UserError):
    """A run asked for an accelerator that JAX cannot start or does not see (``config.platform``,
    ``JAX_PLATFORMS``); the message says what JAX found and what to install."""


def _nvidia_gpus(run: Callable[[Sequence[str]], str | None]) -> list[str]:
    out = run(["nvidia-smi", "-L"]) or ""
    return [line.strip() for line in out.splitlines() if line.strip().startswith("GPU ")]


def _run_quietly(cmd: Sequence[str]) -> str | None:
    """stdout of ``cmd`` when it exists and exits 0 within 20 s, else None."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_runtime(run: Callable[[Sequence[str]], str | None] = _run_quietly,
                   environ: dict | None = None, exists: Callable[[str], list[str]] = glob.glob) -> str:
    """The accelerator of this machine as the hardware shows it, whatever JAX is installed: ``"gpu"``,
    ``"tpu"`` or ``"cpu"``.

    A GPU: ``nvidia-smi -L`` lists one. A TPU: a Cloud TPU VM's device files (``/dev/accel<n>``: v2-v4;
    ``/dev/vfio/<n>``: v5e and later), or the environment a TPU VM or Colab's TPU runtime sets
    (``TPU_ACCELERATOR_TYPE``, ``TPU_NAME``, ``COLAB_TPU_ADDR``).

    Args:
      run: runs a command and returns its stdout, or None when it is missing or fails (tests pass a stand-in).
      environ: the environment (default ``os.environ``).
      exists: a glob function (tests pass a stand-in).
    """
    env = os.environ if environ is None else environ
    if _nvidia_gpus(run):
        return "gpu"
    if exists("/dev/accel[0-9]*") or exists("/dev/vfio/[0-9]*") or any(
            env.get(k) for k in ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "COLAB_TPU_ADDR")):
        return "tpu"
    return "cpu"


def missing_backend(runtime: str, find_spec: Callable[[str], object] = importlib.util.find_spec) -> str | None:
    """None when JAX's plugin for ``runtime`` is importable (always for ``"cpu"``), else the extra that
    installs it (``"cuda"``, ``"tpu"``)."""
    modules = PLUGIN_MODULES[runtime]
    if not modules or any(find_spec(m) is not None for m in modules):
        return None
    return EXTRAS[runtime]


# ------------------------------------------------------------------------------------------- run start
def _jax_platforms() -> str:
    return os.environ.get("JAX_PLATFORMS", "").strip()


def restrict_platform(platform: str) -> None:
    """Before JAX starts a backend: ``config.platform='cpu'`` keeps JAX off any accelerator (JAX's
    ``jax_platforms`` option); ``auto``, ``gpu`` and ``tpu`` leave the choice to JAX (checked by
    :func:`start_backend`). A ``JAX_PLATFORMS`` the user set is left as it is.

    Raises:
      BackendError: ``JAX_PLATFORMS`` names another platform first than ``config.platform`` asks for.
    """
    env = _jax_platforms()
    if env and platform != "auto":
        first = _JAX_NAMES.get(env.split(",")[0].strip().lower())
        if first != platform:
            raise BackendError(f"config.platform={platform!r} and JAX_PLATFORMS={env!r} disagree; unset "
                               f"JAX_PLATFORMS or set --config.platform to match it (or to 'auto')")
        return
    if platform == "cpu":
        import jax  # heavy: only when a run starts

        jax.config.update("jax_platforms", "cpu")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def backend_line(backend: str, devices: Sequence, process_count: int, local_count: int) -> str:
    """``backend gpu: 8 devices (NVIDIA H100 80GB HBM3), 1 process``; with several processes also the devices of
    this one: ``backend tpu: 32 devices (TPU v5 lite), 8 processes, 4 devices here``.

    Args:
      backend: ``jax.default_backend()``.
      devices: ``jax.devices()`` (each with ``device_kind``).
      process_count, local_count: ``jax.process_count()``, ``jax.local_device_count()``.
    """
    kinds = list(dict.fromkeys(str(getattr(d, "device_kind", "?")) for d in devices))
    line = (f"backend {backend}: {_plural(len(devices), 'device')} ({', '.join(kinds)}), "
            f"{_plural(process_count, 'process')}")
    if process_count > 1:
        line += f", {_plural(local_count, 'device')} here"
    return line


def _no_accelerator(platform: str, backend: str, n: int) -> BackendError:
    """The error of a run that asked for ``platform`` and got JAX's ``backend``, with why and what to install."""
    word = _WORDS[platform]
    if missing_backend(platform):
        why = (f"no JAX {word} plugin is installed (this jaxlib runs on the CPU only); install it: "
               f"{INSTALL_HINT[platform]}")
    elif platform == "gpu":
        why = ("the CUDA plugin is installed but found no usable GPU (check `nvidia-smi`, CUDA_VISIBLE_DEVICES and "
               "the driver: CUDA 12 wheels need >= 525.60.13)")
    else:
        why = "libtpu is installed but found no TPU (is this a TPU VM, and does another process hold the chips?)"
    return BackendError(f"config.platform={platform!r}, but JAX sees no {word}: its backend is {backend} "
                        f"({_plural(n, 'device')}); {why}. --config.platform=auto runs on what JAX finds")


def start_backend(platform: str = "auto", log: Callable[[str], None] | None = None) -> str:
    """Starts JAX's backend for a run and logs :func:`backend_line`; returns it.

    Call :func:`restrict_platform` first (before ``jax.distributed.initialize``, which must come before the
    backend starts).

    Args:
      platform: ``config.platform`` (:data:`PLATFORMS`).
      log: where the line goes (default: absl's INFO log, once per process).

    Raises:
      BackendError: JAX could not start the backends ``JAX_PLATFORMS`` names (JAX's reason, on one line); or
        ``platform`` is ``gpu``/``tpu`` and JAX's backend is another (what it found and what to install).
    """
    import jax  # heavy: only when a run starts

    env = _jax_platforms()
    try:
        devices = jax.devices()
    except (RuntimeError, AssertionError) as e:
        reason = " ".join(str(e).split()) or "no visible device of that kind"
        if env:
            raise BackendError(f"JAX_PLATFORMS={env!r} asks JAX for a backend it cannot start: {reason}; unset "
                               "JAX_PLATFORMS to run on what JAX finds, or install what that backend needs ("
                               f"GPU: {INSTALL_HINT['gpu']}; TPU: {INSTALL_HINT['tpu']})") from None
        if isinstance(e, AssertionError):
            raise
        raise BackendError(f"JAX could not start a backend: {reason}") from None
    backend = jax.default_backend()
    if platform in ("gpu", "tpu") and backend != platform:
        raise _no_accelerator(platform, backend, len(devices))
    line = backend_line(backend, devices, jax.process_count(), jax.local_device_count())
    if log is not None:
        log(line)
    elif line not in _LOGGED:  # once per process (predict starts it before loading a run, which starts it too)
        from absl import logging

        _LOGGED.add(line)
        logging.info("%s", line)
    return line


def _main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("detect", "extra"):
        print("usage: python -m openvivqa_jax.accelerator detect|extra", file=sys.stderr)
        return 2
    runtime = detect_runtime()
    print(runtime if argv[1] == "detect" else (EXTRAS[runtime] or ""))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
