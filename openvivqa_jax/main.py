"""Entry point: ``python -m openvivqa_jax.main --config configs/<x>.py --workdir <dir> [--mode ...]``.

Modes:

* ``train`` (default): train (resuming from the workdir's last checkpoint), evaluate dev periodically,
  then score dev and test with the best checkpoint and print the tables and example answers.
* ``evaluate``: score the dev and test splits with the workdir's best checkpoint.

Any config field can be overridden on the command line: ``--config.train.num_train_steps=100``.
"""

from __future__ import annotations

import logging as std_logging
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).", lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: checkpoints, logs, metrics and predictions.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate"], "What to run.")
flags.mark_flags_as_required(["config", "workdir"])


class _QuietLibraries(std_logging.Filter):
    """Drops INFO chatter of orbax, TFDS and grain (one line per checkpoint file) from the run log."""

    _NOISY = ("/orbax/", "/tensorflow_datasets/", "/grain/", "/etils/")

    def filter(self, record: std_logging.LogRecord) -> bool:
        return record.levelno >= std_logging.WARNING or not any(p in record.pathname for p in self._NOISY)


def _init_distributed(cfg) -> None:
    import jax

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
    logging.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())


def _input_errors() -> tuple[type[Exception], ...]:
    """Errors caused by the user's files or settings: reported in one line, without a traceback."""
    from openvivqa_jax.data.ocr import OcrFileError, OcrUnavailableError
    from openvivqa_jax.data.pipeline import DatasetError
    from openvivqa_jax.models.vit import CheckpointError
    from tfds_builders.readers import DatasetInputError

    return (DatasetError, DatasetInputError, OcrFileError, OcrUnavailableError, CheckpointError)


def main(argv) -> None:
    """Runs the selected mode.

    Input errors (:func:`_input_errors`: a bad dataset file or row, a dataset built in the wrong format, a
    missing OCR engine, a bad ViT checkpoint) end the run with ``error: <ErrorClass>: <message>`` on stderr
    and exit status 1; the traceback is logged at ``--verbosity=1``.
    """
    try:
        _main(argv)
    except _input_errors() as e:
        logging.debug("traceback of the error below", exc_info=True)
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


def _main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.get_absl_handler().addFilter(_QuietLibraries())
    cfg = FLAGS.config
    _init_distributed(cfg)
    from openvivqa_jax import train

    if FLAGS.mode == "train":
        train.train_and_evaluate(cfg, FLAGS.workdir)
    else:
        tr = train.Trainer(cfg, FLAGS.workdir)
        tr.restore_params("best")
        from clu import metric_writers

        writer = metric_writers.create_default_writer(tr.workdir, just_logging=True)
        train.final_evaluation(tr, writer, int(tr.state.step))


def run() -> None:
    """Console-script entry point (``openvivqa-train``)."""
    app.run(main)


if __name__ == "__main__":
    sys.exit(run())
