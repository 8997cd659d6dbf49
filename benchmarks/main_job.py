"""The main job end to end, timed: the README's training command in one process, then what its log and files say.

Usage::

    python benchmarks/main_job.py --workdir DIR [--config configs/default.py] [--data_dir DIR]
                                  [--set train.num_train_steps=500 ...] [--log FILE]

Runs ``python -m openvivqa_jax.main --config <config> --workdir <DIR>`` (``--set field=value`` becomes
``--config.field=value``) in a fresh process, echoes its log to stderr (and to ``--log``), and prints one JSON
object:

* ``wall_s``: the whole command, from process start to exit (seconds, wall clock);
* ``phases_s`` from the run's log timestamps: ``before_training`` (dataset build if missing, SentencePiece,
  model-ready records), ``model_ready_train`` (the train split's records, as the run reports it),
  ``training`` (the train loop with its dev evaluations and checkpoints), ``after_training`` (final dev, test
  and OCR-ablation evaluations); ``model_ready_train`` is None when the run reused records built before;
* ``training``: the median and the last of the logged training steps per second (evaluations and checkpoint
  saves are not counted in them), the mean input wait (share of the train loop's time spent waiting for the
  next batch; near 0: the step is the bottleneck, near 1: the input pipeline is) and the peak device memory in
  MiB (None on CPU), from ``metrics.jsonl``;
* ``test``: exact match per question kind (%), unseen shop names copied (%), text-QA CIDEr and CIDEr, from
  ``eval/test_metrics.json`` (whatever of these the dataset has);
* ``machine``: platform, CPU count, load averages at the start, JAX version, backend, device kind.

The run is the product's own command, so a resumed or finished workdir is timed as what it does (nothing, for a
finished one): give a fresh ``--workdir`` for a full measurement. The model-ready records live in a cache shared
by the runs (next to the dataset, docs/input_pipeline.md): a run whose records another run built reuses them
(``model_ready_train`` None); give a fresh ``--data_dir``, or set ``OPENVIVQA_CACHE_DIR`` to an empty folder, to
time their build too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

#: absl's log-line prefix: level letter, month and day, time of day with microseconds.
_STAMP = re.compile(r"^[IWEF](\d{4}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})")
_MARKS = {
    "train_start": re.compile(r"training starts at step|Resumed from step"),
    "train_end": re.compile(r"Training input counts"),
}
_MODEL_READY = re.compile(r"Model-ready records of \S+/train: \d+ questions, .* in ([0-9.]+) s")


def _seconds_of_day(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    h, mi, s, us = (int(x) for x in m.groups()[1:])
    return h * 3600 + mi * 60 + s + us / 1e6


def phases(lines: list[str], start: datetime.datetime, end: datetime.datetime) -> dict[str, float | None]:
    """Seconds of each phase (module docstring) from the log ``lines`` of a process that ran from ``start``
    to ``end`` (local time, as absl stamps its lines); a phase whose marks are missing is None."""
    day0 = start.hour * 3600 + start.minute * 60 + start.second + start.microsecond / 1e6
    total = (end - start).total_seconds()
    marks: dict[str, float] = {}
    model_ready = None
    for line in lines:
        t = _seconds_of_day(line)
        if t is not None:
            rel = (t - day0) % 86400  # a run that passes midnight
            for name, pat in _MARKS.items():
                if name not in marks and pat.search(line):
                    marks[name] = rel
        m = _MODEL_READY.search(line)
        if m:
            model_ready = float(m.group(1))
    a, b = marks.get("train_start"), marks.get("train_end")
    return {"before_training": a, "model_ready_train": model_ready,
            "training": None if a is None or b is None else b - a,
            "after_training": None if b is None else total - b}


def training_speed(jsonl_path: str) -> dict:
    """Median and last steps per second, mean input wait and peak device memory (MiB) of the ``train``
    records of ``metrics.jsonl``; None for what the records lack."""
    recs = []
    if os.path.exists(jsonl_path):
        with open(jsonl_path, encoding="utf-8") as f:
            recs = [r for r in map(json.loads, f) if r.get("kind") == "train" and "steps_per_sec" in r]
    sps = [r["steps_per_sec"] for r in recs]
    mem = [r["peak_device_memory_mib"] for r in recs if "peak_device_memory_mib" in r]
    return {"logged_intervals": len(recs),
            "steps_per_sec_median": statistics.median(sps) if sps else None,
            "steps_per_sec_last": sps[-1] if sps else None,
            "input_wait_mean": statistics.fmean(r["input_wait"] for r in recs) if recs else None,
            "peak_device_memory_mib": max(mem) if mem else None}


def test_scores(metrics_path: str) -> dict | None:
    """Exact match per kind (%), names copied (%), text-QA CIDEr and CIDEr of ``eval/test_metrics.json``."""
    if not os.path.exists(metrics_path):
        return None
    with open(metrics_path, encoding="utf-8") as f:
        m = json.load(f)
    kinds = m.get("by_field", {}).get("kind", {})
    out = {"exact_match_by_kind": {k: round(100 * v["exact_match"], 1) for k, v in sorted(kinds.items())},
           "CIDEr": m.get("overall", {}).get("CIDEr")}
    if m.get("shop_name_copy_rate"):
        out["names_copied"] = round(100 * m["shop_name_copy_rate"]["rate"], 1)
    if m.get("text_qa"):
        out["text_qa_CIDEr"] = m["text_qa"].get("CIDEr")
    return out


def _machine() -> dict:
    info = common.machine_info()
    import jax

    info["device_kind"] = jax.devices()[0].device_kind
    return info


def run(args: argparse.Namespace) -> dict:
    """Runs the job (module docstring) and returns the JSON object."""
    cmd = [sys.executable, "-m", "openvivqa_jax.main", "--config", args.config, "--workdir", args.workdir]
    if args.data_dir:
        cmd.append(f"--config.data.data_dir={args.data_dir}")
    for item in args.set:
        if "=" not in item:
            raise common.FlagError(f"--set {item!r}: expected field=value, e.g. train.num_train_steps=500")
        cmd.append(f"--config.{item}")
    machine = _machine()
    common.log("running: " + " ".join(cmd))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start, t0 = datetime.datetime.now(), time.perf_counter()
    lines: list[str] = []
    log = open(args.log, "w", encoding="utf-8") if args.log else None
    with subprocess.Popen(cmd, cwd=common.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        for line in proc.stdout:
            lines.append(line)
            sys.stderr.write(line)
            if log:
                log.write(line)
                log.flush()
    wall = time.perf_counter() - t0
    end = datetime.datetime.now()
    if log:
        log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"the job exited with {proc.returncode}; its last lines:\n{''.join(lines[-20:])}")
    return {"benchmark": "main_job", "command": cmd[1:], "machine": machine, "wall_s": round(wall, 1),
            "phases_s": {k: None if v is None else round(v, 1) for k, v in phases(lines, start, end).items()},
            "training": training_speed(os.path.join(args.workdir, "metrics.jsonl")),
            "test": test_scores(os.path.join(args.workdir, "eval", "test_metrics.json"))}


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="the run's workdir (a fresh one for a full measurement)")
    parser.add_argument("--config", default="configs/default.py")
    parser.add_argument("--data_dir", default="", help="TFDS data dir (default: the config's)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config override, e.g. train.num_train_steps=500 (repeatable)")
    parser.add_argument("--log", default="", help="also write the job's log to this file")
    args = parser.parse_args(argv)
    common.paths.check_args(args, {"--workdir": common.paths.OUTPUT_DIR,
                                   **({"--data_dir": common.paths.DATA_DIR} if args.data_dir else {}),
                                   **({"--log": common.paths.OUTPUT_FILE} if args.log else {})})
    common.emit(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(common.run_script(main))
