#!/usr/bin/env bash
# Run every lesson's solution as the grader runs it (COURSE_GRADING=1, one thread, checks
# recorded), all lessons at once, on this machine; pack the records into OUT_DIR/records.tar.gz.
# On the maintainers' machine, `python tools/compare_records.py LESSON DIR/LESSON` then says
# whether the reference solution would earn full marks when graded on this machine's CPU.
#   bash tools/record_solutions.sh OUT_DIR      (COURSE_DATA_DIR must hold tinyshakespeare.txt)
set -u
out=${1:?usage: bash tools/record_solutions.sh OUT_DIR}
work=$(mktemp -d)
# CUDA hidden, as in the grading sandbox
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
for nb in solutions/*/*.ipynb; do
    lesson=$(basename "$(dirname "$nb")")
    ( start=$SECONDS
      timeout "${LIMIT:-240}" ${PYTHON:-python3} tools/run_as_script.py "$nb" --record "$work/$lesson" \
          >"$work/$lesson.log" 2>&1
      echo "$lesson: exit $?, $((SECONDS - start)) s" | tee -a "$work/$lesson.log" ) &
done
wait
mkdir -p "$out" && tar -czf "$out/records.tar.gz" -C "$work" .
