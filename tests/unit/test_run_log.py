"""The train loop's speed line: steps per second and input wait between two log lines, on a fake clock."""

import time

import pytest

from openvivqa_jax.training import run_log


def test_interval_timer_counts_waits_and_leaves_out_evaluations(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    timer = run_log.IntervalTimer()
    # Step 1: 0.5 s waiting for the batch, 1.5 s of step; step 2: 1.0 s waiting, 1.0 s of step.
    for wait, work in ((0.5, 1.5), (1.0, 1.0)):
        with timer.waiting():
            now[0] += wait
        now[0] += work
    with timer.excluded():  # a dev evaluation: in neither the time nor the steps
        now[0] += 30.0
    out = timer.pop()
    # 2 steps in 4 s of training, 1.5 s of it waiting.
    assert out == {"steps_per_sec": 0.5, "input_wait": 1.5 / 4.0}
    # The next interval starts at the pop: one step, all of it waiting.
    with timer.waiting():
        now[0] += 2.0
    assert timer.pop() == {"steps_per_sec": 0.5, "input_wait": 1.0}


def test_interval_timer_restart_leaves_the_first_step_out_of_the_rate(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(run_log.time, "perf_counter", lambda: now[0])
    timer = run_log.IntervalTimer()
    with timer.waiting():  # the first batch: the input pipeline starts
        now[0] += 4.0
    now[0] += 26.0  # the first step: compilation
    assert timer.restart() == 30.0
    # Then 49 steps of 0.2 s each, 0.05 s of it waiting for the batch.
    for _ in range(49):
        with timer.waiting():
            now[0] += 0.05
        now[0] += 0.15
    out = timer.pop()
    assert out["steps_per_sec"] == pytest.approx(49 / 9.8)  # 5 steps/s, not 49 / 39.8 = 1.2 with the first step
    assert out["input_wait"] == pytest.approx(0.25)


def test_first_step_done_says_its_time_and_restarts_the_interval(monkeypatch, caplog, absl_info):
    import logging

    now = [10.0]
    monkeypatch.setattr(run_log.time, "perf_counter", lambda: now[0])
    timer = run_log.IntervalTimer()
    with timer.waiting():
        now[0] += 17.94
    with caplog.at_level(logging.INFO, logger="absl"):
        timer.first_step_done(1)
    assert "step 1: compiled and started in 17.9 s (left out of the steps/s)" in caplog.text
    with timer.waiting():
        now[0] += 0.5
    assert timer.pop() == {"steps_per_sec": 2.0, "input_wait": 1.0}


def test_format_duration_rounds_to_the_second_and_names_the_largest_units():
    assert run_log.format_duration(0) == "0s"
    assert run_log.format_duration(41.6) == "42s"
    assert run_log.format_duration(59.4) == "59s"
    assert run_log.format_duration(60) == "1m00s"
    assert run_log.format_duration(5 * 60 + 7) == "5m07s"
    assert run_log.format_duration(3599.6) == "1h00m"  # rounds to 3,600 s first
    assert run_log.format_duration(3600 + 2 * 60 + 59) == "1h02m"  # minutes truncated once hours are shown
    assert run_log.format_duration(-3) == "0s"  # past the last step (a resumed run's first line)
