"""``train.num_train_steps = 0``: the number of steps derived from the training split
(:mod:`openvivqa_jax.vqa.run_length`), ``clip(ceil(epochs * questions / batch_size), min_steps, max_steps)``,
with the config's shipped rule, clear errors for a missing or out-of-range rule, and the config check that takes
0 only where a rule is given."""

from __future__ import annotations

import logging
import os

import ml_collections
import pytest

from openvivqa_jax.config_files import load_config
from openvivqa_jax.errors import ConfigError
from openvivqa_jax.vqa.run_length import derived_steps, resolve_train_steps


def _cfg(steps: int, batch: int = 32, rule: dict | None = None) -> ml_collections.ConfigDict:
    t = {"num_train_steps": steps, "batch_size": batch}
    if rule is not None:
        t["steps_from_data"] = rule
    c = ml_collections.ConfigDict({"train": t})
    c.lock()
    return c


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULE = {"epochs": 15.0, "min_steps": 500, "max_steps": 20000}


@pytest.mark.parametrize("questions, batch, expected", [
    (6429, 32, 3014),     # 15 * 6429 / 32 = 3013.59 -> ceil 3014, inside [500, 20000]
    (640, 32, 500),       # 15 * 640 / 32 = 300 -> raised to min_steps
    (50000, 32, 20000),   # 23437.5 -> cut to max_steps
    (64, 32, 500),
    (1000, 4, 3750),      # a smaller batch: 15 * 1000 / 4
])
def test_derived_steps_is_the_clipped_ceiling_of_epochs_times_questions_over_batch(questions, batch, expected):
    assert derived_steps(questions, batch, **RULE) == expected


@pytest.mark.parametrize("rule", [dict(epochs=0.0, min_steps=1, max_steps=10),
                                  dict(epochs=1.0, min_steps=0, max_steps=10),
                                  dict(epochs=1.0, min_steps=20, max_steps=10)])
def test_derived_steps_refuses_an_out_of_range_rule(rule):
    with pytest.raises(ConfigError, match="train.steps_from_data=.*must have epochs > 0"):
        derived_steps(100, 32, **rule)


def test_zero_steps_are_set_from_the_data_and_logged(caplog, absl_info):
    cfg = _cfg(0, rule=dict(RULE))
    calls = []

    def count():
        calls.append(1)
        return 6429

    with caplog.at_level(logging.INFO, logger="absl"):
        assert resolve_train_steps(cfg, count) == 3014
    assert cfg.train.num_train_steps == 3014 and calls == [1]
    assert "3014 steps from the data: 15 epochs of the 6429 training questions at batch 32" in caplog.text


def test_given_steps_are_kept_and_the_data_is_not_read():
    cfg = _cfg(2000, rule=dict(RULE))

    def count():
        raise AssertionError("the training split must not be read when the steps are given")

    assert resolve_train_steps(cfg, count) == 2000 and cfg.train.num_train_steps == 2000


def test_zero_steps_without_a_rule_is_one_config_error():
    with pytest.raises(ConfigError, match="train.num_train_steps=0 derives the steps from the data, which needs "
                                          "train.steps_from_data"):
        resolve_train_steps(_cfg(0), lambda: 100)


def test_the_folder_config_ships_a_rule_that_derives_steps():
    cfg = load_config(os.path.join(ROOT, "configs", "folder", "mlpag.py"))
    rule = cfg.train.steps_from_data
    with cfg.unlocked():
        cfg.train.num_train_steps = 0
    expected = derived_steps(1000, int(cfg.train.batch_size), epochs=float(rule.epochs),
                             min_steps=int(rule.min_steps), max_steps=int(rule.max_steps))
    assert resolve_train_steps(cfg, lambda: 1000) == expected >= 1


def test_check_config_takes_zero_steps_only_with_a_rule():
    from conftest import load_config as load_named

    from openvivqa_jax.config_check import check_config

    cfg = load_named("configs/folder/mlpag.py")
    cfg.train.num_train_steps = 0
    check_config(cfg)  # the folder config has train.steps_from_data
    cfg.train.num_train_steps = -1
    with pytest.raises(ConfigError, match=r"train.num_train_steps.*an integer >= 1, or 0 \(derived from the data"):
        check_config(cfg)
    del cfg.train["steps_from_data"]
    cfg.train.num_train_steps = 0
    with pytest.raises(ConfigError, match=r"num_train_steps=0 is out of range: must be an integer >= 1 \(set it"):
        check_config(cfg)


def test_check_config_refuses_a_bad_rule_before_any_data_is_read():
    from conftest import load_config as load_named

    from openvivqa_jax.config_check import check_config

    cfg = load_named("configs/folder/mlpag.py")  # num_train_steps 0: the rule is read
    cfg.train.steps_from_data.max_steps = 100  # under the config's min_steps of 500
    with pytest.raises(ConfigError, match=r"min_steps: 500, max_steps: 100\}.*lower both, e\.g\. "
                                          r"--config\.train\.steps_from_data\.min_steps=50"):
        check_config(cfg)
    cfg.train.steps_from_data.min_steps = 50
    check_config(cfg)
    cfg.train.num_train_steps = 300  # given steps: the rule is not read
    cfg.train.steps_from_data.max_steps = 10
    check_config(cfg)
