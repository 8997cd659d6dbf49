#!/usr/bin/env bash
# Makes the project's virtual environment with a Python >= 3.12 and installs the package with the extra this
# machine's accelerator needs: `launch/setup.sh` from the checkout, then `. .venv/bin/activate`.
#
#   launch/setup.sh [--accelerator auto|cpu|cuda|cuda13|tpu] [--extras test,...] [--venv DIR] [--dry-run|--no-install]
#
# The interpreter, first that runs and is >= 3.12 (a pyenv shim of a version that is installed but not selected
# fails with status 127 and is passed over):
#   1. $PYTHON, when set (3.11 is accepted there: the package installs jax 0.10.2 on it);
#   2. python3.12, python3.13, python3.14, python3 on PATH;
#   3. pyenv's versions folder (`pyenv root`, else $PYENV_ROOT or ~/.pyenv): the newest 3.12.x, then 3.13.x, ...;
#   4. `uv python find '>=3.12'` when uv is installed.
# An interpreter without the venv module's pip (Debian/Ubuntu's python3.12 without python3.12-venv) is passed
# over too, and named in the error when nothing else is found.
#
# The accelerator (--accelerator auto, the default) is what the machine has (openvivqa_jax/accelerator.py:
# nvidia-smi lists a GPU -> the [cuda] extra; a Cloud TPU VM -> [tpu]; else the CPU jaxlib of the core install).
# --extras adds the project's other extras (default: test, everything the tests need, as the README's CPU line).
# --dry-run prints the interpreter, the accelerator and the commands, and changes nothing; --no-install makes
# the virtual environment and stops before pip.
set -euo pipefail

here="${BASH_SOURCE[0]}"
[[ "$here" == */* ]] && here="${here%/*}" || here=.
repo="$(cd "$here/.." && pwd)"
accelerator=auto
extras=test
venv="$repo/.venv"
mode=install

usage() { echo "usage: launch/setup.sh [--accelerator auto|cpu|cuda|cuda13|tpu] [--extras test,...] [--venv DIR] \
[--dry-run|--no-install]" >&2; }
fail() { echo "error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --accelerator) accelerator="${2:?--accelerator needs a value}"; shift 2 ;;
    --accelerator=*) accelerator="${1#*=}"; shift ;;
    --extras) extras="${2?--extras needs a value}"; shift 2 ;;
    --extras=*) extras="${1#*=}"; shift ;;
    --venv) venv="${2:?--venv needs a folder}"; shift 2 ;;
    --venv=*) venv="${1#*=}"; shift ;;
    --dry-run) mode=dry-run; shift ;;
    --no-install) mode=no-install; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage; fail "unknown argument $1" ;;
  esac
done
case "$accelerator" in auto|cpu|cuda|cuda13|tpu) ;; *) fail "--accelerator $accelerator: expected auto, cpu, cuda, cuda13 or tpu" ;; esac

# Why each candidate was passed over, for the error line.
passed_over=()

# usable CANDIDATE MINOR: the candidate runs, is Python 3.MINOR or newer, and can make a virtual environment
# with pip (ensurepip).
usable() {
  local out rc=0
  out="$("$1" -c "import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, $2) else 3)" 2>&1)" || rc=$?
  case $rc in
    0) return 0 ;;
    3) passed_over+=("$1: $("$1" -c 'import sys; print("Python %d.%d" % sys.version_info[:2])' 2>/dev/null), older than 3.$2") ;;
    127) passed_over+=("$1: exits 127 (${out%%$'\n'*})") ;;
    *) if [[ "$out" == *"No module named 'ensurepip'"* || "$out" == *"No module named 'venv'"* ]]; then
         passed_over+=("$1: has no venv/ensurepip (Debian/Ubuntu: apt-get install python3.X-venv)")
       else
         passed_over+=("$1: exits $rc (${out##*$'\n'})")
       fi ;;
  esac
  return 1
}

# newest_patch FOLDER MINOR: the newest 3.MINOR.N folder of a pyenv versions folder (not 3.12.1t or 3.12-dev).
newest_patch() {
  local d best="" n bestn=-1
  for d in "$1"/3."$2".*; do
    d="${d##*/}"
    [[ "$d" =~ ^3\.$2\.([0-9]+)$ ]] || continue
    n="${BASH_REMATCH[1]}"
    if [ "$n" -gt "$bestn" ]; then best="$d"; bestn="$n"; fi
  done
  echo "$best"
}

# find_python: sets py to the first usable interpreter (see the top of this file); false when there is none.
find_python() {
  local c root v
  if [ -n "${PYTHON:-}" ] && usable "$PYTHON" 11; then py="$PYTHON"; return 0; fi
  for c in python3.12 python3.13 python3.14 python3; do
    if c="$(command -v "$c")" && usable "$c" 12; then py="$c"; return 0; fi
  done
  root=""
  if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root 2>/dev/null || true)"; fi
  [ -n "$root" ] || root="${PYENV_ROOT:-$HOME/.pyenv}"
  if [ -d "$root/versions" ]; then
    for v in 12 13 14; do
      c="$(newest_patch "$root/versions" "$v")"
      if [ -n "$c" ] && [ -x "$root/versions/$c/bin/python" ] && usable "$root/versions/$c/bin/python" 12; then
        py="$root/versions/$c/bin/python"; return 0
      fi
    done
  fi
  if command -v uv >/dev/null 2>&1; then
    c="$(uv python find '>=3.12' 2>/dev/null || true)"
    if [ -n "$c" ] && usable "$c" 12; then py="$c"; return 0; fi
  fi
  return 1
}

py=""
if ! find_python; then
  tried="nothing on PATH, in pyenv or uv"
  [ ${#passed_over[@]} -gt 0 ] && tried="$(printf '%s; ' "${passed_over[@]}")" && tried="${tried%; }"
  fail "no Python >= 3.12 found (tried: $tried); install one (apt-get install python3.12 python3.12-venv, \
pyenv install 3.12, or uv python install 3.12) or name it with PYTHON=/path/to/python3.12"
fi
version="$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"

if [ "$accelerator" = auto ]; then
  # The detection is the package's own (standard library only), run from the checkout before anything is installed.
  accelerator="$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$py" -m openvivqa_jax.accelerator extra)"
  accelerator="${accelerator:-cpu}"
fi
all="$extras"
[ "$accelerator" = cpu ] || all="${all:+$all,}$accelerator"
spec="$repo${all:+[$all]}"

echo "setup: Python $version at $py"
[ ${#passed_over[@]} -eq 0 ] || printf 'setup: passed over %s\n' "${passed_over[@]}"
echo "setup: accelerator $accelerator -> pip install -e \"$spec\" into $venv"
if [ "$mode" = dry-run ]; then
  printf 'would run: %s\n' "$py -m venv $venv" "$venv/bin/python -m pip install --upgrade pip" \
    "$venv/bin/python -m pip install -e \"$spec\""
  exit 0
fi
"$py" -m venv "$venv"
if [ "$mode" = no-install ]; then
  echo "setup: made $venv ($("$venv/bin/python" --version)); --no-install: pip not run"
  exit 0
fi
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install -e "$spec"
echo "setup: done; activate it with: . $venv/bin/activate"
