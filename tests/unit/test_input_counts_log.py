"""The end-of-training input counts (``openvivqa_jax.vqa.train._log_input_counts``): the questions and answers
cut at their length limits, and the region proposals left out past ``model.vision.num_regions``, each said in
words with the setting that decides it."""

from __future__ import annotations

import logging
import types

import ml_collections

from openvivqa_jax.data.records import SkipCounter
from openvivqa_jax.vqa import train


class _Jsonl:
    def __init__(self):
        self.records = []

    def write(self, step, kind, values):
        self.records.append((step, kind, dict(values)))


def _exp(counter: SkipCounter):
    cfg = ml_collections.ConfigDict({"model": {"max_question_len": 20, "max_answer_len": 16,
                                               "vision": {"num_regions": 64}}})
    return types.SimpleNamespace(cfg=cfg, inputs=types.SimpleNamespace(counter=SkipCounter()), jsonl=_Jsonl())


def _counter(**counts) -> SkipCounter:
    c = SkipCounter()
    for k, n in counts.items():
        c.add(k, n)
    return c


def test_proposals_left_out_are_named_with_their_setting(caplog, absl_info):
    counter = _counter(questions_encoded=400, answers_encoded=400, question_truncated=4,
                       proposal_segments_beyond_num_regions=2917)
    exp = _exp(counter)
    with caplog.at_level(logging.INFO, logger="absl"):
        train._log_input_counts(exp, types.SimpleNamespace(counter=counter), step=50)
    assert ("Region proposals: 2917 segments beyond model.vision.num_regions=64 were left out of the training "
            "pictures") in caplog.text
    # 4 of 400 questions cut: 1.0%, and the rates go to metrics.jsonl at the step.
    assert "Training inputs cut: 1.0% of questions at model.max_question_len=20" in caplog.text
    assert exp.jsonl.records == [(50, "train_inputs", {"train/question_truncation_rate": 0.01,
                                                       "train/answer_truncation_rate": 0.0})]


def test_no_proposals_line_without_proposals(caplog, absl_info):
    counter = _counter(questions_encoded=10, answers_encoded=10)
    with caplog.at_level(logging.INFO, logger="absl"):
        train._log_input_counts(_exp(counter), types.SimpleNamespace(counter=counter), step=1)
    assert "Training inputs cut" in caplog.text and "Region proposals" not in caplog.text
