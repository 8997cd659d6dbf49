"""Entry point: ``python -m openvivqa_jax.main --config configs/<x>.py --workdir <dir> [--mode ...]``.

Modes:

* ``train`` (default): train (resuming from the workdir's last checkpoint), evaluate dev periodically,
  then score dev and test with the best checkpoint and print the tables and example answers.
* ``evaluate``: score the dev and test splits with the workdir's best checkpoint.
* ``prepare``: build the config's dataset (or find it built) and print its splits; no ``--workdir`` needed.
  The multi-host launch scripts run it once per host before training (``launch/``).

Any config field can be overridden on the command line: ``--config.train.num_train_steps=100``.

The log of a ``train`` or ``evaluate`` run (every task) starts with the backend JAX runs on and its devices,
``backend gpu: 8 devices (NVIDIA H100 80GB HBM3), 1 process`` (:mod:`openvivqa_jax.accelerator`);
``--config.platform=gpu`` (or ``tpu``) makes a run that JAX cannot give that accelerator stop with one line
saying what JAX found and what to install, instead of training on the CPU.

What goes wrong on the user's side ends with one ``error:`` line on stderr, never a traceback (which
``--verbosity=1`` logs): a misspelt flag or config field (with ml_collections' "Did you mean" suggestion) or a
config file that does not load, a path that cannot serve (``--workdir`` a file or not writable,
``--config.data.data_dir`` a file; :mod:`openvivqa_jax.paths`), a ``--workdir`` in use by another run (each
mode holds the workdir's lock, :mod:`openvivqa_jax.locks`) (exit status 2); a config value out of range
(:func:`openvivqa_jax.config_check.check_config`), a bad dataset file, a missing manual download folder (the
line, then the builder's download instructions), a missing OCR engine, a bad ViT checkpoint, or an accelerator
asked for (``config.platform``, ``JAX_PLATFORMS``) that JAX cannot start (exit status 1).
Ctrl-C or SIGTERM during training saves a checkpoint of the current step and prints ``interrupted at step N;
last checkpoint step M; rerun the same command to resume`` (exit status 130 / 143;
:mod:`openvivqa_jax.training.interrupts`). On CPU, JAX's ``Unable to initialize backend 'tpu'`` notices and
TensorFlow's C++ start-up notices (oneDNN) are kept out of the log unless ``--verbose`` is given.
"""

from __future__ import annotations

import difflib
import glob
import importlib
import logging as std_logging
import os
import sys

if "--verbose" not in sys.argv:  # before TensorFlow can be imported: its C++ start-up notices (oneDNN)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from openvivqa_jax import cli, locks, paths  # noqa: E402
from openvivqa_jax.cli import print_error  # noqa: E402
from openvivqa_jax.errors import USAGE_EXIT_CODE, ConfigError  # noqa: E402
from openvivqa_jax.quiet import quiet_tensorflow_imports  # noqa: E402
from openvivqa_jax.training import interrupts  # noqa: E402

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).", lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: checkpoints, logs, metrics and predictions.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate", "prepare"],
                  "What to run: train, evaluate the best checkpoint, or prepare (build) the dataset only.")
flags.DEFINE_bool("verbose", False, "Keep the start-up notices of JAX (no TPU backend), TensorFlow and the INFO "
                  "logs of orbax, TFDS and grain.")
flags.mark_flag_as_required("config")
flags.register_multi_flags_validator(["workdir", "mode"], lambda f: f["workdir"] is not None or f["mode"] == "prepare",
                                     message="--workdir is required (except with --mode prepare)")

#: Exit status of usage errors (bad flags, config file or field), as argparse uses.
USAGE_ERROR = USAGE_EXIT_CODE

#: The task packages by the config's ``task`` field (absent: ``"vqa"``, answer generation). Each is laid out
#: alike: ``<package>.train.train_and_evaluate(cfg, workdir)`` for ``--mode train`` and
#: ``<package>.evals.evaluate(cfg, workdir)`` for ``--mode evaluate``.
TASKS: dict[str, str] = {"vqa": "openvivqa_jax.vqa", "reading": "openvivqa_jax.reading",
                         "relevance": "openvivqa_jax.relevance"}


class _QuietLibraries(std_logging.Filter):
    """Drops INFO chatter of orbax, TFDS and grain (one line per checkpoint file) and JAX's notices that no
    TPU (or proxy) backend is there from the run log (not installed with ``--verbose``)."""

    _NOISY = ("/orbax/", "/tensorflow_datasets/", "/grain/", "/etils/")

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.levelno >= std_logging.WARNING:
            return True
        if record.pathname.endswith("xla_bridge.py") and "Unable to initialize backend" in str(record.msg):
            return False
        return not any(p in record.pathname for p in self._NOISY)


def _usage_error(message: str) -> None:
    print_error(message)
    sys.exit(USAGE_ERROR)


def _config_file_error(path: str, err: Exception) -> str:
    """One line for a config file that did not load: not found (with the nearest existing config file), or
    the last line of ml_collections' report (the file's own error)."""
    file = path.split(":", 1)[0]
    if not os.path.exists(file):
        folder = os.path.dirname(file) or "."
        near = difflib.get_close_matches(file, [os.path.relpath(p) if not os.path.isabs(file) else p
                                                for p in glob.glob(os.path.join(folder, "*.py"))], n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        return f"config file {file} not found{hint}"
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"config file {file} did not load: {lines[-1] if lines else type(err).__name__}"


def _config_arg(argv: list[str]) -> str:
    """The value of ``--config`` in ``argv`` (``--config=X`` or ``--config X``); ``""`` if absent."""
    for i, a in enumerate(argv):
        if a.startswith(("--config=", "-config=")):
            return a.split("=", 1)[1]
        if a in ("--config", "-config") and i + 1 < len(argv):
            return argv[i + 1]
    return ""


def _parse_flags(argv: list[str]) -> list[str]:
    """``app.run``'s flags parser: absl's, with one line (exit status 2) instead of a traceback for a
    misspelt or malformed flag, a config field that does not exist (keeping ml_collections' "Did you mean"
    suggestion), a bad config value type, or a config file that does not load."""
    try:
        rest = FLAGS(argv)
    except flags.Error as e:
        if "Error whilst parsing config file" in str(e):  # get_config raised: ml_collections quotes its traceback
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            _usage_error(f"config file {_config_arg(argv)} did not load: {lines[-1].removesuffix(' (see --help)')}")
        _usage_error(f"{e} (see --help)")
    except (AttributeError, KeyError) as e:  # --config.a.b=... naming a field that does not exist
        inner = e.args[0] if e.args else e  # AttributeError(KeyError("'name'\nDid you mean ...?"))
        text = inner.args[0] if isinstance(inner, KeyError) and inner.args else inner
        lines = str(text).splitlines() or [""]
        field = lines[0].strip("'\" ")
        named = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.") and
                 a.split("=", 1)[0].split(".")[-1] == field]
        hint = " ".join(ln.strip() for ln in lines[1:])
        _usage_error(f"{named[0] if named else '--config'}: the config has no field {field!r}"
                     + (f"; {hint}" if hint else ""))
    except OSError as e:
        _usage_error(_config_file_error(_config_arg(argv), e))
    except (TypeError, ValueError) as e:  # e.g. --config.train.batch_size=abc
        _usage_error(f"bad config override: {e}")
    except Exception as e:  # the config file itself raised (a syntax error, an error in get_config)
        if not _config_arg(argv):
            raise
        _usage_error(f"config file {_config_arg(argv)} did not load: {type(e).__name__}: {e}")
    try:
        FLAGS.config.keys()  # a config file that failed to load raises on first use
    except OSError as e:
        _usage_error(_config_file_error(_config_arg(argv), e))
    return rest


def _init_distributed(cfg) -> None:
    import jax  # heavy: imported once the flags and the config are known good

    d = cfg.get("distributed")
    if not d or not d.get("initialize"):
        return
    if d.get("cpu_collectives"):
        jax.config.update("jax_cpu_collectives_implementation", d.cpu_collectives)
    kwargs = {k: d.get(k) for k in ("coordinator_address", "num_processes", "process_id", "local_device_ids")
              if d.get(k) is not None}
    if isinstance(kwargs.get("local_device_ids"), str):  # the config field is a string: "0,1,2,3"
        kwargs["local_device_ids"] = [int(x) for x in kwargs["local_device_ids"].split(",") if x.strip()]
    if d.get("initialization_timeout"):
        kwargs["initialization_timeout"] = int(d.initialization_timeout)
    jax.distributed.initialize(**kwargs)


def main(argv) -> int:
    """Runs the selected mode through :func:`openvivqa_jax.cli.run_main`.

    A user's error (:class:`openvivqa_jax.errors.UserError`: a config value out of range, an unknown model
    name or split, a bad dataset file or row, a dataset built in the wrong format, a missing manual download
    folder, a missing OCR engine, a bad ViT checkpoint) ends the run with ``error: <ErrorClass>: <message>``
    on stderr and exit status 1; the traceback is logged at ``--verbosity=1``. SIGINT / SIGTERM end it with
    one ``interrupted ...`` line and status 130 / 143 (:mod:`openvivqa_jax.training.interrupts`; during training
    a checkpoint of the current step is saved first).
    """
    single = not (FLAGS.config.get("distributed") and FLAGS.config.distributed.get("initialize"))
    # Several processes: SIGTERM is JAX's preemption notice (openvivqa_jax.training.interrupts).
    def body():
        _main(argv)
        interrupts.raise_if_received()  # a signal whose exception was dropped in the last phase

    message = lambda: interrupts.interrupted_message(None, interrupts.last_checkpoint_step(FLAGS.workdir))  # noqa: E731
    code = cli.run_main(body, verbose=FLAGS.verbose, sigterm=single, squash=False, on_interrupt=message)
    if code == 0:  # the run's files are written: a signal in teardown still prints the one line
        interrupts.install_teardown(message, sigterm=single)
    return code


def _main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cfg = FLAGS.config
    # Heavy for a usage error (NumPy and the metric modules, 0.4 s): imported once the flags parse.
    from openvivqa_jax.config_check import check_config

    check_config(cfg)  # before TensorFlow, JAX and the data modules are imported: a bad value fails at once
    _check_paths(cfg)
    if not FLAGS.verbose:
        quiet_tensorflow_imports()  # TensorFlow only if a TFDS build needs it, and without its notices
        logging.get_absl_handler().addFilter(_QuietLibraries())
    mode = f"main --mode {FLAGS.mode}"
    if FLAGS.mode == "prepare":
        with locks.hold_workdir(FLAGS.workdir, mode):
            _prepare(cfg)
        return
    _start_backend(cfg)
    # One run per workdir (openvivqa_jax.locks): a second process refuses here, before it reads or writes anything.
    with locks.hold_workdir(FLAGS.workdir, mode, process_index=_process_index(cfg)):
        _run_task(cfg.get("task", "vqa"), cfg)


def _process_index(cfg) -> int:
    """This JAX process's index (0 unless the config starts several processes: JAX is not imported for one)."""
    d = cfg.get("distributed")
    if not d or not d.get("initialize"):
        return 0
    import jax

    return jax.process_index()


def _start_backend(cfg) -> None:
    """Connects the processes of a multi-process run and starts JAX's backend as ``config.platform`` asks; the
    log's first line names the backend and its devices (:mod:`openvivqa_jax.accelerator`).

    Raises:
      BackendError: the run asked for an accelerator JAX does not see, or ``JAX_PLATFORMS`` names one JAX cannot
        start (one line).
    """
    from openvivqa_jax import accelerator

    platform = cfg.get("platform") or "auto"
    accelerator.restrict_platform(platform)  # before jax.distributed.initialize, which precedes the backend
    _init_distributed(cfg)
    accelerator.start_backend(platform)
    if cfg.get("distributed") and cfg.distributed.get("initialize"):
        import jax

        logging.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
                     jax.process_count(), jax.local_device_count(), jax.device_count())


def _check_paths(cfg) -> None:
    """Checks the run's path flags (:mod:`openvivqa_jax.paths`) and uses the checked values (``~`` expanded).

    Raises:
      PathError: ``--workdir`` (a new or writable folder; one that exists for ``--mode evaluate``),
        ``--config.data.data_dir``, ``--config.data.manual_dir`` (read when there) or
        ``--config.data.model_ready_dir`` cannot serve, or an output folder is the manual folder.
    """
    data = cfg.get("data") or {}
    specs = [("--workdir", FLAGS.workdir, paths.RUN_DIR if FLAGS.mode == "evaluate" else paths.OUTPUT_DIR),
             ("--config.data.data_dir", data.get("data_dir"), paths.DATA_DIR),
             ("--config.data.manual_dir", data.get("manual_dir"), paths.OPTIONAL_INPUT_DIR),
             ("--config.data.model_ready_dir", data.get("model_ready_dir") if data.get("model_ready") else None,
              paths.OUTPUT_DIR)]
    if FLAGS.mode == "prepare":  # builds the dataset only
        specs = specs[1:3]
    for (flag, given, _), checked in zip(specs, paths.check_paths(specs)):
        if checked != given and flag == "--workdir":
            FLAGS.workdir = checked
        elif checked != given:
            data[flag.rsplit(".", 1)[1]] = checked


def _prepare(cfg) -> None:
    """``--mode prepare``: builds the config's dataset unless it is built, then prints its name and splits."""
    from openvivqa_jax.data import datasets

    b = datasets.load_builder(cfg.data)
    print(b.info.full_name, {k: v.num_examples for k, v in b.info.splits.items()})


def _run_task(task: str, cfg) -> None:
    """Runs a task of :data:`TASKS` in the selected mode; its modules (JAX, the data pipeline) are imported now,
    after the config was checked.

    Raises:
      ConfigError: ``task`` names no task.
    """
    if task not in TASKS:
        raise ConfigError(f"config value task={task!r} names no task: must be one of "
                          f"{', '.join(repr(t) for t in TASKS)} (set it with --config.task=...)")
    if FLAGS.mode == "train":
        importlib.import_module(f"{TASKS[task]}.train").train_and_evaluate(cfg, FLAGS.workdir)
    else:
        importlib.import_module(f"{TASKS[task]}.evals").evaluate(cfg, FLAGS.workdir)


def run() -> None:
    """Console-script entry point (``openvivqa-train``)."""
    cli.safe_output_streams()  # the flags' own error lines too
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
    sys.exit(run())
