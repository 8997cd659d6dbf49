"""The evaluations after training as configured in ``config.evals``, and the decode settings they use."""

from __future__ import annotations

import pytest

from conftest import load_config
from openvivqa_jax.vqa import config as evals
from openvivqa_jax.vqa import decoding
from openvivqa_jax.config_check import ConfigError, check_config


def _plan(cfg):
    return [(s.name, s.kind, s.split, s.mask_ocr) for s in evals.plan(cfg)]


def test_default_config_runs_dev_test_ablation_then_the_reports():
    cfg = load_config("configs/default.py")
    assert _plan(cfg) == [("dev", "decode", "validation", False), ("test", "decode", "test", False),
                          ("test_no_ocr", "decode", "test", True), ("copy_rate", "copy_rate", "", False),
                          ("ocr_ratio", "ocr_ratio", "", False)]
    test = evals.plan(cfg)[1]
    assert (test.print_examples, test.tensorboard) == (cfg.eval.num_examples_to_print, True)
    assert evals.split_fields(cfg) == {"data.eval_split": "validation", "data.test_split": "test"}


def test_every_default_entry_can_be_switched_off_from_the_command_line():
    """Each entry holds ``enabled`` (a command-line override can only set a field that exists)."""
    cfg = load_config("configs/default.py")
    assert all("enabled" in entry for entry in cfg.evals.values())
    for name in list(cfg.evals):
        cfg = load_config("configs/default.py")
        cfg.evals[name].enabled = False
        names = [s.name for s in evals.plan(cfg)]
        assert name not in names and len(names) == 4, (name, names)


def test_the_documented_switches_reach_the_entries():
    """``eval.ocr_ablation`` and ``eval.num_examples_to_print`` (set after the config is built, as a command-line
    override does) are the ablation's ``enabled`` and the test entry's ``print_examples``; a ``data`` split key
    set later is followed too."""
    cfg = load_config("configs/default.py")
    cfg.eval.ocr_ablation = False
    cfg.eval.num_examples_to_print = 9
    cfg.data.test_split = "train[:10%]"
    specs = {s.name: s for s in evals.plan(cfg)}
    assert "test_no_ocr" not in specs and specs["test"].print_examples == 9
    assert specs["test"].split == "train[:10%]"


def test_paper_configs_without_the_ablation():
    cfg = load_config("configs/openvivqa/mlpag.py")
    assert [n for n, *_ in _plan(cfg)] == ["dev", "test", "copy_rate", "ocr_ratio"]


def test_a_literal_split_and_an_order_kept():
    cfg = load_config("configs/default.py")
    cfg.evals.train_head = dict(kind="decode", split="train[:1%]")
    specs = evals.plan(cfg)
    assert [s.name for s in specs][:4] == ["dev", "test", "test_no_ocr", "train_head"]
    assert specs[3].split == "train[:1%]" and evals.split_fields(cfg)["evals.train_head.split"] == "train[:1%]"


def test_same_split_twice_is_scored_once_under_the_later_name():
    cfg = load_config("configs/default.py")
    cfg.data.eval_split = "test"
    names = [s.name for s in evals.deduplicated(evals.plan(cfg))]
    assert names == ["test", "test_no_ocr", "copy_rate", "ocr_ratio"]


@pytest.mark.parametrize("change, message", [
    (lambda e: setattr(e.test, "kind", "decoder"), r"evals\.test\.kind='decoder' is unknown"),
    (lambda e: setattr(e, "extra", 3), r"evals\.extra=3 must be a dict"),
    (lambda e: setattr(e, "bad", dict(kind="decode", split="test_split", mask=True)), r"evals\.bad has no field 'mask'"),
    (lambda e: setattr(e, "empty", dict(kind="decode")), r"evals\.empty\.split is empty"),
    (lambda e: setattr(e.copy_rate, "of", ("dev", "tset")), r"evals\.copy_rate\.of='tset' names no decode entry"),
    (lambda e: setattr(e.ocr_ratio, "without_ocr", "copy_rate"), r"evals\.ocr_ratio\.without_ocr='copy_rate'"),
])
def test_bad_entries_are_one_line_config_errors(change, message):
    cfg = load_config("configs/default.py")
    change(cfg.evals)
    with pytest.raises(ConfigError, match=message) as e:
        check_config(cfg)
    assert "\n" not in str(e.value) and ("--config." in str(e.value) or "config file" in str(e.value))


def test_an_empty_data_key_is_named():
    cfg = load_config("configs/default.py")
    cfg.data.test_split = ""
    with pytest.raises(ConfigError, match=r"evals\.test\.split='test_split' names config\.data\.test_split, "
                                          "which is empty"):
        evals.plan(cfg)


def test_a_disabled_entry_may_be_referenced_and_no_evals_runs_none():
    cfg = load_config("configs/default.py")
    cfg.evals.dev.enabled = False
    assert [s.name for s in evals.plan(cfg)] == ["test", "test_no_ocr", "copy_rate", "ocr_ratio"]
    del cfg["evals"]
    assert evals.plan(cfg) == []


def test_decode_settings_from_config():
    cfg = load_config("configs/default.py")
    s = decoding.DecodeSettings.from_config(cfg, True)
    assert (s.method, s.beam_size, s.alpha, s.max_len, s.share_memory) == (
        "beam", cfg.eval.beam_size, cfg.eval.alpha, cfg.model.max_answer_len, False)
    assert s.describe() == {"method": "beam", "beam_size": cfg.eval.beam_size, "alpha": cfg.eval.alpha}
    g = decoding.DecodeSettings.from_config(cfg, True, method="greedy", beam_size=5)
    assert g.describe() == {"method": "greedy", "beam_size": 1, "alpha": cfg.eval.alpha}
    assert decoding.DecodeSettings.from_config(cfg, False).describe() == {"method": "argmax"}
    cfg.eval.beam_share_memory = True
    assert decoding.DecodeSettings.from_config(cfg, True).share_memory is True
    with pytest.raises(ValueError, match="method"):
        decoding.DecodeSettings(method="sample")
