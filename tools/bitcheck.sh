#!/usr/bin/env bash
# Do two versions of nmt compute the same numbers? Runs, with each version's code and the same inputs:
# the demo with a fixed BPE model (youtokentome's learner is not deterministic), 100 updates of the
# multi30k preset, and beam 4 / greedy / n-best / int8 translations of 200 test sentences; then
# compares every checkpoint tensor (weights and Adam state), every logged number but the timings, and
# the translations (tools/fingerprint.py). Prints "identical" or the differences.
#
#   tools/bitcheck.sh OLD_COMMIT [NEW_TREE] [WORK]    # e.g. tools/bitcheck.sh ffa10fb . /tmp/bitcheck
#   MULTI30K=path/to/multi30k (default ../shared/data/multi30k); PYTHON (default .venv/bin/python)
set -euo pipefail
OLD=$1; NEW=$(cd "${2:-.}" && pwd); WORK=${3:-/tmp/nmt-bitcheck}
PY=$(cd "$(dirname "${PYTHON:-.venv/bin/python}")" && pwd)/$(basename "${PYTHON:-.venv/bin/python}")
MULTI30K=$(cd "${MULTI30K:-../shared/data/multi30k}" && pwd)
rm -rf "$WORK"; mkdir -p "$WORK"
git -C "$NEW" worktree add -q --detach "$WORK/old-tree" "$OLD"
trap 'git -C "$NEW" worktree remove --force "$WORK/old-tree"' EXIT
TOOLS=$NEW/tools
export OMP_NUM_THREADS=1
nmt() { PYTHONPATH=$TREE "$PY" -m nmt "$@"; }

# Inputs both versions share: a BPE model and a prepared Multi30k store (made with the new version).
TREE=$NEW
nmt bpe --train "$NEW/nmt/sample_data/train.en" "$NEW/nmt/sample_data/train.de" --vocab-size 1000 \
    --out "$WORK/demo-bpe.model" 2>/dev/null
nmt download multi30k --mirror "$MULTI30K" --out "$WORK/raw" 2>/dev/null
nmt bpe --train "$WORK/raw/train.en" "$WORK/raw/train.de" --vocab-size 6000 --out "$WORK/bpe.model" 2>/dev/null
nmt prepare --bpe "$WORK/bpe.model" --train "$WORK/raw/train" --valid "$WORK/raw/valid" --src en --tgt de \
    --out "$WORK/data" >/dev/null 2>&1
head -200 "$WORK/raw/test.en" > "$WORK/test200.en"

for side in old new; do
    if [ $side = old ]; then TREE=$WORK/old-tree; else TREE=$NEW; fi
    OUT=$WORK/$side; mkdir -p "$OUT"
    echo "[$side] demo with the fixed BPE model" >&2
    PYTHONPATH=$TREE "$PY" "$TOOLS/demo_fixed_bpe.py" "$OUT/demo" "$WORK/demo-bpe.model" > "$OUT/demo.stdout" 2>/dev/null
    echo "[$side] 100 updates of the multi30k preset, then translations" >&2
    nmt train --data "$WORK/data" --out "$OUT/run" --preset multi30k --threads 1 --max-updates 100 \
        --save-interval 50 --valid-interval 50 --valid-bleu-sentences 100 2>/dev/null
    M=$OUT/run/checkpoint_00000100.pt
    # nmt's own (torch) engine on both sides: a version with --engine would otherwise pick CTranslate2
    ENGINE=(); nmt translate --help 2>/dev/null | grep -q -- "--engine" && ENGINE=(--engine torch)
    nmt translate -m "$M" "${ENGINE[@]}" --threads 1 -i "$WORK/test200.en" --beam 4 > "$OUT/beam4.de" 2>/dev/null
    nmt translate -m "$M" "${ENGINE[@]}" --threads 1 -i "$WORK/test200.en" --beam 1 > "$OUT/greedy.de" 2>/dev/null
    nmt translate -m "$M" "${ENGINE[@]}" --threads 1 -i "$WORK/test200.en" --beam 4 --nbest 3 > "$OUT/nbest.de" 2>/dev/null
    nmt translate -m "$M" "${ENGINE[@]}" --threads 1 -i "$WORK/test200.en" --beam 4 --int8 > "$OUT/int8.de" 2>/dev/null
    (cd "$OUT" && "$PY" "$TOOLS/fingerprint.py" . demo.stdout demo/test.hyp.de beam4.de greedy.de nbest.de int8.de) \
        > "$WORK/$side.fp"
done
if diff "$WORK/old.fp" "$WORK/new.fp"; then
    echo "identical: $(wc -l < "$WORK/new.fp") fingerprints (checkpoint tensors, logged numbers, outputs)"
else
    exit 1
fi
