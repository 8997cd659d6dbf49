#!/usr/bin/env bash
# Train openvivqa_jax on a Cloud TPU VM (single host or pod slice) with JAX's multi-controller runtime:
# every worker runs the same command; `jax.distributed.initialize()` (no arguments) finds the
# coordinator, the process count and this worker's id from the TPU metadata.
#
# Usage (from the repository root on your workstation, gcloud authenticated):
#
#   TPU_NAME=vqa-v5e-32 ZONE=us-west4-a launch/tpu_pod.sh all \
#       configs/openvivqa/mlpag.py /mnt/shared/runs/mlpag --config.data.manual_dir=/mnt/shared/openvivqa
#
# Steps (first argument):
#   setup    copy this repository's sources to ~/openvivqa_jax on every worker and `pip install -e ".[tpu]"`
#   prepare  build the TFDS dataset of CONFIG on every worker (into DATA_DIR, default a local disk),
#            before any training process starts, so no two processes build the same files at once
#   train    python -m openvivqa_jax.main on every worker (--worker=all), distributed.initialize=True
#   all      setup, prepare, train
#
# WORKDIR must be one folder that every worker sees (NFS/Filestore, or a bucket mounted with gcsfuse at
# the same path): orbax checkpoints are written by all processes together, spm.model/config.json/
# metrics by process 0 and read by all. Each worker reads only its share of every batch.
#
# Environment: TPU_NAME, ZONE (required); PROJECT (optional); DATA_DIR (default ~/tensorflow_datasets
# on each worker); REMOTE_DIR (default openvivqa_jax, relative to the workers' home); TPU_PIP (more
# requirements for pip beside the package's [tpu] extra, e.g. "jax[tpu]==0.12.0"; default none); DRY_RUN=1 prints the gcloud commands instead of running them; TARBALL=<file.tar.gz> keeps
# the source archive that setup copies (git's tracked and non-ignored files: no .git, venvs or runs).
#
# Sharding: the mesh is config.mesh.shape over ('data', 'model'); (-1, 1) (the default) is pure data
# parallelism over all chips, e.g. --config.mesh.shape='(-1,4)' puts heads/MLP/vocabulary on 4 chips,
# --config.fsdp=True also shards every parameter along 'data'. train.batch_size is the global batch and
# must divide by the number of processes and by the 'data' axis.
set -euo pipefail

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-1}"; }
[ $# -ge 1 ] || usage
STEP=$1; shift
case "$STEP" in setup|prepare|train|all) ;; -h|--help) usage 0 ;; *) echo "unknown step '$STEP'" >&2; usage ;; esac
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU VM zone}"
REMOTE_DIR=${REMOTE_DIR:-openvivqa_jax}
TPU_PIP=${TPU_PIP:-}
DATA_DIR=${DATA_DIR:-}
PROJECT_ARGS=()
[ -n "${PROJECT:-}" ] && PROJECT_ARGS=(--project "$PROJECT")

run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

on_all() {  # on_all "<remote bash command>": runs it on every worker at once and waits for all
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" "${PROJECT_ARGS[@]}" --worker=all \
    --command "$1"
}

quoted() {  # the arguments, each quoted for the remote shell
  local out="" a
  for a in "$@"; do out+=" $(printf '%q' "$a")"; done
  printf '%s' "$out"
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)

do_setup() {
  # Copy the source tree to every worker, then install. In a git checkout: the tracked files and the
  # untracked ones git does not ignore (so no .git, virtual environments, run folders or caches);
  # otherwise the whole folder minus those.
  local tarball
  tarball=${TARBALL:-$(mktemp -t openvivqa_jax.XXXXXX.tar.gz)}
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
      | (cd "$ROOT" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) \
      | tar -C "$ROOT" --null -T - -czf "$tarball"
  else
    tar -C "$ROOT" --exclude=.git --exclude=runs --exclude='*.pyc' --exclude=__pycache__ --exclude=.venv \
      --exclude=venv --exclude=.ci-venv --exclude='*.egg-info' -czf "$tarball" .
  fi
  run gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:openvivqa_jax.tar.gz" --zone "$ZONE" \
    "${PROJECT_ARGS[@]}" --worker=all
  [ -n "${TARBALL:-}" ] || rm -f "$tarball"
  on_all "set -e; mkdir -p ~/$REMOTE_DIR && tar -C ~/$REMOTE_DIR -xzf ~/openvivqa_jax.tar.gz && \
cd ~/$REMOTE_DIR && python3 -m pip install -q -U pip && python3 -m pip install -q -e '.[tpu]' $TPU_PIP && \
python3 -c 'import jax; print(jax.process_count(), jax.device_count())'"
}

# Builds (or reuses) the TFDS dataset of a config; single process, no jax.distributed. The main entry point's
# prepare mode: its flags, config and paths are checked as for training, with one error: line on failure.
do_prepare() {
  local config=$1; shift
  local dd=()
  [ -n "$DATA_DIR" ] && dd=("--config.data.data_dir=$DATA_DIR")
  on_all "set -e; cd ~/$REMOTE_DIR && $(quoted python3 -m openvivqa_jax.main --mode=prepare "--config=$config" \
${dd[@]+"${dd[@]}"} "$@")"
}

do_train() {
  local config=$1 workdir=$2; shift 2
  local dd=()
  [ -n "$DATA_DIR" ] && dd=("--config.data.data_dir=$DATA_DIR")
  on_all "cd ~/$REMOTE_DIR && python3 -m openvivqa_jax.main$(quoted "--config=$config" "--workdir=$workdir" \
--config.distributed.initialize=True ${dd[@]+"${dd[@]}"} "$@") 2>&1 | tee -a ~/openvivqa_train.log"
}

case "$STEP" in
  setup) do_setup ;;
  prepare) [ $# -ge 1 ] || usage; do_prepare "$@" ;;
  train) [ $# -ge 2 ] || usage; do_train "$@" ;;
  all)
    [ $# -ge 2 ] || usage
    config=$1 workdir=$2; shift 2
    # Overrides that change the data (manual_dir, builder_config) matter to prepare too.
    data_args=()
    for a in "$@"; do case "$a" in --config.data.*) data_args+=("$a") ;; esac; done
    do_setup
    do_prepare "$config" ${data_args[@]+"${data_args[@]}"}
    do_train "$config" "$workdir" "$@"
    ;;
esac
