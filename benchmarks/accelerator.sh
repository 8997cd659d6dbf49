#!/usr/bin/env bash
# One prepared benchmark for a GPU/TPU machine (see benchmarks/accelerator.py): train examples/s and MFU for
# MLPAG, M4C and QuMLAG at the benchmark shapes in bfloat16 (float32 masters) and float32, beam-3 decode
# answers/s, peak device memory; the whole run within 8 minutes; one JSON object on stdout.
#
#   benchmarks/accelerator.sh                       # all models and dtypes, 480 s budget
#   benchmarks/accelerator.sh --smoke --budget_s 60 # tiny shapes (the CPU test)
#
# Extra flags go to benchmarks/accelerator.py (--models, --dtypes, --repeats, --peak_tflops).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
py="${PYTHON:-python}"
if [ -z "${PYTHON:-}" ] && [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; fi
cd "$root"
exec "$py" "$here/accelerator.py" "$@"
