#!/bin/bash
# Before (ce8bd2a = b0443fb^, checked out with `git worktree add /tmp/before ce8bd2a`) and after (this version in /work/main) of issue 19's changes, alternating whole processes. Wrote the JSON files beside it.
PY=/work/main/.venv/bin/python
cd /tmp/bench
for m in mlpag qumlag m4c; do
  r=5; [ $m = m4c ] && r=3
  for v in before after; do
    d=/tmp/before; [ $v = after ] && d=/work/main
    (cd $d && $PY benchmarks/train_step.py --models $m --repeats $r > /tmp/bench/train_${m}_$v.json 2> /tmp/bench/train_${m}_$v.err)
    echo "$(date +%T) train $m $v $(uptime | sed 's/.*load/load/')" >> /tmp/bench/progress
  done
done
for v in before after; do
  d=/tmp/before; [ $v = after ] && d=/work/main
  (cd $d && $PY benchmarks/decode.py --no_reference > /tmp/bench/decode_$v.json 2> /tmp/bench/decode_$v.err)
  echo "$(date +%T) decode $v $(uptime | sed 's/.*load/load/')" >> /tmp/bench/progress
done
for v in before after; do
  d=/tmp/before; [ $v = after ] && d=/work/main
  (cd $d && $PY benchmarks/train_step.py --models mlpag --batch 16 --repeats 3 --profile > /tmp/bench/profile_$v.json 2> /tmp/bench/profile_$v.err)
  echo "$(date +%T) profile $v" >> /tmp/bench/progress
done
echo done >> /tmp/bench/progress
