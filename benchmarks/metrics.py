"""Benchmark: scoring 4,000 answers with every metric but METEOR, beside pycocoevalcap.

Usage::

    python benchmarks/metrics.py [--num_answers 4000] [--repeats 3] [--seed 0] [--cpu 0]

The corpus is synthetic Vietnamese (seeded): raw predictions and 1-3 raw references per question
(mixed case, punctuation, some NFD and old-style tone marks), about the size of the OpenViVQA dev
split. The process is pinned to one CPU core (``os.sched_setaffinity``) and BLAS threads are limited
to one, so the numbers are single-core.

Timed (wall clock, ``time.perf_counter``, min and median of ``--repeats`` runs):

- ``ours``: :func:`openvivqa_jax.evaluation.score` end to end (sanitization included) with BLEU-1..4,
  ROUGE-L, CIDEr, ANLS, VQA-accuracy, EM, F1; ``ours_with_wmd`` adds WMDRel over a random
  300-dimensional word2vec text file for the corpus vocabulary (file loading included);
- ``ours_bleu_rouge_cider_only``: our three scorers alone on the same strings as the toolkit (no
  sanitization, no per-type groups), the like-for-like comparison;
- ``pycocoevalcap``: its ``Bleu(4)``, ``Rouge()`` and ``Cider()`` scorers called directly on the same
  sanitized, whitespace-tokenized strings (the toolkit has no ANLS, VQA accuracy, EM/F1 or WMD).

- ``cli_process_vs_pycocoevalcap_process``: whole processes, start-up included, on the same two JSON files:
  ``python -m openvivqa_jax.evaluate --metrics BLEU ROUGE-L CIDEr`` (sanitization included) against a
  Python process that imports pycocoevalcap, reads the same files and runs ``Bleu(4)``, ``Rouge()`` and
  ``Cider()`` on the strings as written (no PTBTokenizer: that Java step would only add to the toolkit's
  time). ``speedup`` is the ratio of the medians (the target is 3x), ``speedup_of_min`` that of the minima.

Prints one JSON object on stdout: timings in seconds, the 5-second target, and the largest absolute
difference between our and the toolkit's BLEU/ROUGE-L/CIDEr on this input.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.evaluation import score  # noqa: E402
from openvivqa_jax.evaluation.sanitize import sanitize_text  # noqa: E402

_SYLLABLES = (
    "cửa tiệm này tên là mộc màu xanh dương đỏ trắng đen vàng ở đường tạ hiện có hai ba một người chiếc xe máy "
    "quán cà phê bán bánh mì phở bò gà trên bàn ghế biển hiệu chữ cây bên trái phải trước sau nhà thờ chợ "
    "bến thành hòa bình khỏe thủy hoàng quý giá đồng cô gái đang đi bộ cầm ô mặc áo dài nón lá số điện thoại"
).split()
_OLD_STYLE = {"hòa": "hoà", "khỏe": "khoẻ", "thủy": "thuỷ"}


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(_SYLLABLES) for _ in range(rng.randint(lo, hi))]
    if rng.random() < 0.1:
        words = [_OLD_STYLE.get(w, w) for w in words]
    s = " ".join(words)
    if rng.random() < 0.3:
        s = s.capitalize() + rng.choice([".", "!", "?", ","])
    if rng.random() < 0.05:
        s = unicodedata.normalize("NFD", s)
    return s


def make_corpus(num: int, seed: int) -> tuple[dict[str, str], dict[str, list[str]], dict[str, int]]:
    """Returns (predictions, references, qa_types) of ``num`` synthetic Vietnamese questions."""
    rng = random.Random(seed)
    preds, refs, types = {}, {}, {}
    for i in range(num):
        qid = f"q{i:05d}"
        item_refs = [_sentence(rng, 2, 14) for _ in range(rng.randint(1, 3))]
        r = rng.random()
        if r < 0.2:
            pred = rng.choice(item_refs)
        elif r < 0.6:
            base = rng.choice(item_refs).split()
            keep = [w for w in base if rng.random() < 0.7] + [rng.choice(_SYLLABLES) for _ in range(rng.randint(0, 3))]
            pred = " ".join(keep)
        else:
            pred = _sentence(rng, 1, 12)
        preds[qid], refs[qid], types[qid] = pred, item_refs, rng.randint(0, 1)
    return preds, refs, types


def _write_vectors(path: str, words: set[str], dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {dim}\n")
        for w in sorted(words):
            f.write(w + " " + " ".join(f"{x:.5f}" for x in rng.standard_normal(dim)) + "\n")


_COCO_SCRIPT = """
import json, sys
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
preds = json.load(open(sys.argv[1], encoding="utf-8"))
refs = json.load(open(sys.argv[2], encoding="utf-8"))
res = {q: [p] for q, p in preds.items()}
gts = {q: refs[q] for q in preds}
b, _ = Bleu(4).compute_score(gts, res, verbose=0)
r, _ = Rouge().compute_score(gts, res)
c, _ = Cider().compute_score(gts, res)
print(json.dumps({"BLEU": b, "ROUGE-L": r, "CIDEr": c}))
"""


def _process_times(preds: dict, refs: dict, repeats: int) -> dict:
    """Wall time of the evaluate CLI and of a pycocoevalcap process on the same files (module doc)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        p_path, r_path, s_path = (os.path.join(tmp, n) for n in ("preds.json", "refs.json", "coco.py"))
        with open(p_path, "w", encoding="utf-8") as f:
            json.dump(preds, f, ensure_ascii=False)
        with open(r_path, "w", encoding="utf-8") as f:
            json.dump(refs, f, ensure_ascii=False)
        with open(s_path, "w", encoding="utf-8") as f:
            f.write(_COCO_SCRIPT)
        cmds = {
            "ours_cli": [sys.executable, "-m", "openvivqa_jax.evaluate", "--predictions", p_path, "--references", r_path,
                         "--metrics", "BLEU", "ROUGE-L", "CIDEr"],
            "pycocoevalcap": [sys.executable, s_path, p_path, r_path],
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(repeats):
            for name, cmd in cmds.items():  # interleaved, so both see the same machine load
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=repo)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "ours_cli_s": {"min": min(times["ours_cli"]), "median": med["ours_cli"]},
        "pycocoevalcap_s": {"min": min(times["pycocoevalcap"]), "median": med["pycocoevalcap"]},
        "speedup": med["pycocoevalcap"] / med["ours_cli"],
        "speedup_of_min": min(times["pycocoevalcap"]) / min(times["ours_cli"]),  # less sensitive to load spikes
        "target_speedup": 3.0,
        "meets_target": med["pycocoevalcap"] / med["ours_cli"] >= 3.0,
    }


def _timed(fn, repeats: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark and prints (and returns) the JSON report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num_answers", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu", type=int, default=None, help="core to pin to (default: the first allowed)")
    args = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {args.cpu if args.cpu is not None else allowed[0]})

    preds, refs, types = make_corpus(args.num_answers, args.seed)
    metrics = ["BLEU", "ROUGE-L", "CIDEr", "ANLS", "VQA-accuracy", "EM", "F1"]
    ours_times, ours = _timed(lambda: score(preds, refs, types, metrics), args.repeats)

    # Same tokens for the toolkit: sanitized strings (its PTBTokenizer needs Java and drops punctuation).
    gts = {q: [sanitize_text(r) for r in refs[q]] for q in preds}
    res = {q: [sanitize_text(preds[q])] for q in preds}
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    coco: dict[str, float] = {}
    coco_times: dict[str, list[float]] = {}
    coco_times["Bleu"], (bleu, _) = _timed(lambda: Bleu(4).compute_score(gts, res, verbose=0), args.repeats)
    coco_times["Rouge"], (rouge, _) = _timed(lambda: Rouge().compute_score(gts, res), args.repeats)
    coco_times["Cider"], (cider, _) = _timed(lambda: Cider().compute_score(gts, res), args.repeats)
    coco.update({f"BLEU-{k + 1}": float(b) for k, b in enumerate(bleu)})
    coco.update({"ROUGE-L": float(rouge), "CIDEr": float(cider)})
    coco_total = [sum(ts) for ts in zip(*coco_times.values())]

    # Like for like: our BLEU/ROUGE-L/CIDEr scorers alone on the same sanitized strings, no groups.
    from openvivqa_jax.evaluation import bleu as bleu_lib
    from openvivqa_jax.evaluation import cider as cider_lib
    from openvivqa_jax.evaluation import rouge as rouge_lib
    from openvivqa_jax.evaluation.ngrams import build_ngram_corpus

    hyp_list = [res[q][0] for q in preds]
    ref_list = [gts[q] for q in preds]

    def _core():
        corpus = build_ngram_corpus(hyp_list, ref_list)
        bleu_lib.corpus_bleu(bleu_lib.bleu_stats(corpus))
        cider_lib.cider_d(corpus)
        rouge_lib.rouge_l(hyp_list, ref_list)

    core_times, _ = _timed(_core, args.repeats)

    with tempfile.TemporaryDirectory() as tmp:
        vec_path = os.path.join(tmp, "vectors.txt")
        vocab = {t for q in preds for s in (res[q] + gts[q]) for t in s.split()}
        _write_vectors(vec_path, vocab, 300, args.seed)
        wmd_times, with_wmd = _timed(lambda: score(preds, refs, types, metrics + ["WMDRel"], vectors=vec_path), args.repeats)

    report = {
        "benchmark": "metrics",
        "num_answers": args.num_answers,
        "num_references": sum(len(r) for r in refs.values()),
        "cpu_cores_used": 1,
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "metrics_timed": metrics,
        "ours_s": {"min": min(ours_times), "median": statistics.median(ours_times)},
        "ours_with_wmd_s": {"min": min(wmd_times), "median": statistics.median(wmd_times)},
        "ours_bleu_rouge_cider_only_s": {"min": min(core_times), "median": statistics.median(core_times)},
        "pycocoevalcap_bleu_rouge_cider_s": {
            "min": min(coco_total),
            "median": statistics.median(coco_total),
            "per_scorer_min": {k: min(v) for k, v in coco_times.items()},
        },
        "target_s": 5.0,
        "meets_target": max(statistics.median(ours_times), statistics.median(wmd_times)) < 5.0,
        "max_abs_diff_vs_pycocoevalcap": max(abs(ours["overall"][k] - v) for k, v in coco.items()),
        "overall": {k: v for k, v in with_wmd["overall"].items()},
        "cli_process_vs_pycocoevalcap_process": _process_times(preds, refs, args.repeats),
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return report


if __name__ == "__main__":
    sys.exit(run_script(main))
