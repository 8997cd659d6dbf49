"""Trains every model of the zoo on the default synthetic set with one step budget and prints a table.

Usage::

    python benchmarks/zoo_table.py --steps 1000 --out runs/zoo [--models mlpag,m4c,...] [--data_dir DIR]

Each model runs ``python -m openvivqa_jax.main --config configs/synthetic/<model>.py`` in its own workdir
(resumable: a finished workdir is reused). Prints JSON (per model: BLEU-4, ROUGE-L, CIDEr overall, on text
QAs and on non-text QAs, and the shop-name copy rate on the test split) and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402

#: The path flags (openvivqa_jax.paths), checked before any model is trained.
PATH_FLAGS = {"--out": paths.OUTPUT_DIR, "--data_dir": paths.DATA_DIR}

MODELS = ("mlpag", "m4c", "fst", "qumlag", "saaa", "mcan", "lorra")


def _run(model: str, steps: int, out: str, data_dir: str | None) -> dict:
    wd = os.path.join(out, model)
    metrics_path = os.path.join(wd, "eval", "test_metrics.json")
    seconds = None
    if not os.path.exists(metrics_path):
        cmd = [sys.executable, "-m", "openvivqa_jax.main", f"--config=configs/synthetic/{model}.py",
               f"--workdir={wd}", f"--config.train.num_train_steps={steps}",
               f"--config.train.eval_every_steps={steps}", "--config.eval.ocr_ablation=False"]
        if data_dir:
            cmd.append(f"--config.data.data_dir={data_dir}")
        t0 = time.time()
        print(f"[zoo] training {model} for {steps} steps", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        seconds = time.time() - t0
    with open(metrics_path, encoding="utf-8") as f:
        m = json.load(f)
    row = {"model": model, "seconds": seconds}
    for group in ("overall", "text_qa", "non_text_qa"):
        g = m.get(group) or {}
        row[group] = {k: g.get(k) for k in ("BLEU-4", "ROUGE-L", "CIDEr")}
    row["shop_name_copy_rate"] = (m.get("shop_name_copy_rate") or {}).get("rate")
    return row


def main(argv=None) -> None:
    """Runs the zoo and prints JSON then a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "zoo"))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--data_dir", default=None)
    a = p.parse_args(argv)
    paths.check_args(a, PATH_FLAGS)
    rows = [_run(m, a.steps, a.out, a.data_dir) for m in a.models.split(",") if m]
    print(json.dumps({"steps": a.steps, "rows": rows}, ensure_ascii=False))
    print("\n| model | BLEU-4 | ROUGE-L | CIDEr | CIDEr text QA | CIDEr non-text QA | unseen shop names copied |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        o, t, n = r["overall"], r["text_qa"], r["non_text_qa"]
        rate = r["shop_name_copy_rate"]
        print(f"| {r['model']} | {o['BLEU-4']:.3f} | {o['ROUGE-L']:.3f} | {o['CIDEr']:.3f} | {t['CIDEr']:.3f} | "
              f"{n['CIDEr']:.3f} | {'-' if rate is None else f'{rate:.1%}'} |")


if __name__ == "__main__":
    sys.exit(run_script(main))
