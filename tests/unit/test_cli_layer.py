"""The one command-line layer (``openvivqa_jax.cli.run_main``): every error a user can cause derives from
``UserError`` and becomes one ``error:`` line with its exit code; Ctrl-C becomes one line and 130; anything else
keeps its traceback."""

from __future__ import annotations

import importlib
import signal

import pytest

from openvivqa_jax import cli
from openvivqa_jax.training import interrupts
from openvivqa_jax.errors import INPUT_EXIT_CODE, UserError

# (module, class, a base other code catches it by) of every error a user can cause.
USER_ERRORS = [
    ("openvivqa_jax.config_check", "ConfigError", ValueError),
    ("openvivqa_jax.data.pipeline", "DatasetError", ValueError),
    ("tfds_builders.readers", "DatasetInputError", ValueError),
    ("tfds_builders.readers", "ImageFileError", ValueError),
    ("openvivqa_jax.data.ocr", "OcrFileError", ValueError),
    ("openvivqa_jax.data.ocr", "OcrUnavailableError", RuntimeError),
    ("openvivqa_jax.models.vit", "CheckpointError", ValueError),
    ("openvivqa_jax.training.checkpoints", "CheckpointMismatchError", ValueError),
    ("openvivqa_jax.data.images", "ImageDecodeError", ValueError),
    ("openvivqa_jax.predict", "PredictError", Exception),
    ("openvivqa_jax.plot", "MetricsFileError", ValueError),
    ("openvivqa_jax.evaluation.formats", "InputError", ValueError),
    ("openvivqa_jax.analysis.records", "AnalysisInputError", ValueError),
    ("openvivqa_jax.analysis.records", "EmptySplitError", ValueError),
    ("openvivqa_jax.analysis.kappa", "AgreementFileError", ValueError),
    ("openvivqa_jax.evaluation.meteor", "MeteorUnavailable", RuntimeError),
]


@pytest.mark.parametrize("module, name, base", USER_ERRORS, ids=[n for _, n, _ in USER_ERRORS])
def test_every_user_error_derives_from_user_error_and_keeps_its_base(module, name, base):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, UserError) and issubclass(cls, base)
    assert cls.exit_code == INPUT_EXIT_CODE


def test_user_error_is_one_line_with_its_exit_code(capsys):
    from openvivqa_jax.config_check import ConfigError

    def body():
        raise ConfigError("config value x=1 is out of range:\n  must be >= 2")

    assert cli.run_main(body) == 1
    assert capsys.readouterr().err == "error: ConfigError: config value x=1 is out of range: must be >= 2\n"


def test_exit_code_per_class_and_line_without_class(capsys):
    from openvivqa_jax.analysis.records import AnalysisInputError, EmptySplitError

    codes = {EmptySplitError: 1, UserError: 2}
    assert cli.run_main(lambda: (_ for _ in ()).throw(EmptySplitError("split 'dev' has no questions")),
                        with_class=False, exit_codes=codes) == 1
    assert cli.run_main(lambda: (_ for _ in ()).throw(AnalysisInputError("bad file")),
                        with_class=False, exit_codes=codes) == 2
    assert capsys.readouterr().err.splitlines() == ["error: split 'dev' has no questions", "error: bad file"]


def test_a_user_error_chained_under_another_is_found(capsys):
    from tfds_builders.readers import ImageFileError

    def body():
        try:
            raise ImageFileError("a.json: question 3: image x.jpg: cannot be decoded")
        except ImageFileError as e:
            raise RuntimeError("Beam pipeline failed") from e

    assert cli.run_main(body) == 1
    assert capsys.readouterr().err == "error: ImageFileError: a.json: question 3: image x.jpg: cannot be decoded\n"


def test_other_errors_keep_their_traceback():
    with pytest.raises(ZeroDivisionError):
        cli.run_main(lambda: 1 / 0)


def test_body_return_value_is_the_exit_code():
    assert cli.run_main(lambda: None) == 0
    assert cli.run_main(lambda: 3) == 3


def test_ctrl_c_is_one_line_and_130_and_handlers_are_restored(capsys):
    before = signal.getsignal(signal.SIGINT)

    def body():
        assert signal.getsignal(signal.SIGINT) is not before  # run_main's handler is installed
        signal.raise_signal(signal.SIGINT)

    assert cli.run_main(body, sigterm=False, on_interrupt=lambda: "error: interrupted") == 130
    assert capsys.readouterr().err == "error: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before and interrupts.received() is None


def test_training_interrupted_prints_its_line_and_code(capsys):
    def body():
        raise interrupts.TrainingInterrupted("SIGTERM", 37, 37)

    assert cli.run_main(body) == 143
    assert capsys.readouterr().err == "interrupted at step 37; last checkpoint step 37; rerun the same command to resume\n"


def test_quiet_start_up_is_for_the_call_only():
    import warnings

    from absl import logging

    before = logging.get_verbosity()
    seen = {}

    def body():
        seen["level"] = logging.get_verbosity()
        seen["filters"] = warnings.filters[:1]

    cli.run_main(body, log_level=logging.ERROR, quiet_warnings=True)
    assert seen["level"] == logging.ERROR and seen["filters"][0][0] == "ignore"
    assert logging.get_verbosity() == before
    cli.run_main(body, verbose=True, log_level=logging.ERROR)
    assert seen["level"] == before
