"""CI, at install time: every accelerator extra of setup.py resolves to wheels on the package index, nothing installed.

``pip install --dry-run --ignore-installed --report FILE ".[cuda,cuda13,tpu]"`` resolves the package with the
extras as a fresh environment would (``--ignore-installed``: the CI's own environment does not count) and
installs nothing; it only talks to the configured package index (and, for an sdist among the dependencies, to
that index again for its build requirements). One resolution of all the extras at once: when it holds, each
extra resolves alone (a solution of all the requirements satisfies each subset); when it fails, each extra is
resolved alone to name the one that broke. Then each extra's JAX plugin must be in the resolution as a wheel
(``.whl``), and so must JAX itself.

Prints one line per extra, and the seconds the resolution took; exits 1 with ``error: ...`` lines when an extra
does not resolve, so that CI stops loudly. The tests stay offline: this runs in ``.ci/run`` only.

Usage: ``python .ci/check_extras.py [--root DIR]`` (DIR: the checkout, default the parent of this folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: The accelerator extras of setup.py (its ``ACCELERATORS``) and the distributions each must bring as wheels.
EXTRAS: dict[str, tuple[str, ...]] = {
    "cuda": ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt"),
    "cuda13": ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt"),
    "tpu": ("jax", "jaxlib", "libtpu"),
}


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def resolve(root: str, extras: list[str]) -> tuple[dict | None, str]:
    """``(pip's installation report, "")`` for ``root[extras]``, or ``(None, pip's last error line)``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        # --no-cache-dir: the wheels fetched to read their metadata (GBs for CUDA) are not kept.
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--no-input",
               "--no-cache-dir",
               "--report", report, f"{root}[{','.join(extras)}]"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not os.path.isfile(report):
            errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or done.stderr.splitlines()
            return None, (errors[-1] if errors else f"pip exited {done.returncode}")
        with open(report, encoding="utf-8") as f:
            return json.load(f), ""


def check_report(report: dict, extra: str) -> tuple[str, list[str]]:
    """``(summary line, problems)`` of one extra in a resolution report: its distributions present as wheels."""
    items = {_norm(i["metadata"]["name"]): i for i in report.get("install", [])}
    problems, found = [], []
    for name in EXTRAS[extra]:
        item = items.get(_norm(name))
        if item is None:
            problems.append(f"extra [{extra}]: {name} is not in the resolution")
            continue
        url = item.get("download_info", {}).get("url", "")
        if not url.split("#", 1)[0].endswith(".whl"):
            problems.append(f"extra [{extra}]: {name} {item['metadata']['version']} resolves to {url}, not a wheel")
        found.append(f"{name} {item['metadata']['version']}")
    nvidia = sum(1 for n in items if n.startswith("nvidia-"))
    line = f"extra [{extra}] resolves: {', '.join(found)}" + (f" (and {nvidia} NVIDIA library wheels in all)"
                                                                 if extra.startswith("cuda") else "")
    return line, problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    names = list(EXTRAS)
    report, error = resolve(args.root, names)
    problems = []
    if report is None:  # which extra broke: each alone
        problems.append(f"the extras [{','.join(names)}] together do not resolve: {error}")
        for name in names:
            alone, why = resolve(args.root, [name])
            if alone is None:
                problems.append(f"extra [{name}] does not resolve: {why}")
    else:
        for name in names:
            line, bad = check_report(report, name)
            print(line)
            problems += bad
    print(f"extras resolved in {time.perf_counter() - t0:.0f} s (pip --dry-run; nothing installed)")
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
