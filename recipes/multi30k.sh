#!/usr/bin/env bash
# Multi30k en-de and de-en on a CPU: download, bpe, prepare, train, average, eval.
# Results, the experiments behind the settings, and timings: docs/results-multi30k.md.
#
#   recipes/multi30k.sh [OUT]                 # default OUT: multi30k-run
#   MIRROR=../shared/data/multi30k recipes/multi30k.sh
#
# Environment:
#   NMT         the nmt command (default: nmt)
#   MIRROR      local folder or base URL with the upstream Multi30k files (default: the upstream URLs)
#   DIRECTIONS  default "en-de de-en"; both train at the same time, one process each
#   THREADS     torch threads per direction (default 1: two directions fill two cores)
#   VOCAB       joint BPE vocabulary (default 6000)
#   AVERAGE     step checkpoints averaged (default 5)
#   BEAM, LENPEN  test-time search (default 6 and 1.2, chosen on the validation set)
#   TRAIN_ARGS  extra `nmt train` options, which override the preset (default: none)
#
# Every step is skipped or resumed when its output is already there, so rerunning after an
# interruption carries on. stdout gets one JSON line of scores per direction; logs go to OUT/.
set -euo pipefail

OUT=${1:-multi30k-run}
NMT=${NMT:-nmt}
MIRROR=${MIRROR:-}
DIRECTIONS=${DIRECTIONS:-"en-de de-en"}
THREADS=${THREADS:-1}
VOCAB=${VOCAB:-6000}
AVERAGE=${AVERAGE:-5}
BEAM=${BEAM:-6}
LENPEN=${LENPEN:-1.2}
TRAIN_ARGS=${TRAIN_ARGS:-}

RECIPE=multi30k
# shellcheck source=recipes/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, logged, each_direction

mkdir -p "$OUT"
log "download -> $OUT/raw"
logged "$OUT/download.log" $NMT download multi30k --out "$OUT/raw" ${MIRROR:+--mirror "$MIRROR"}

if [ ! -s "$OUT/bpe.model" ]; then
    log "bpe: joint vocabulary of $VOCAB"
    logged "$OUT/bpe.log" $NMT bpe --train "$OUT/raw/train.en" "$OUT/raw/train.de" --vocab-size "$VOCAB" \
        --out "$OUT/bpe.model"
fi

direction() {  # SRC TGT: prepare, train, average, translate and score one direction under OUT/SRC-TGT
    local src=$1 tgt=$2 dir="$OUT/$1-$2"
    mkdir -p "$dir"
    if [ ! -s "$dir/data/meta.json" ]; then
        logged "$dir/prepare.log" $NMT prepare --bpe "$OUT/bpe.model" --train "$OUT/raw/train" --valid "$OUT/raw/valid" \
            --test "$OUT/raw/test" --src "$src" --tgt "$tgt" --out "$dir/data" >"$dir/prepare.json.tmp"
        mv "$dir/prepare.json.tmp" "$dir/prepare.json"  # a failed rerun keeps the previous report
    fi
    local start=$SECONDS
    logged "$dir/train.log" $NMT train --data "$dir/data" --out "$dir/run" --preset multi30k --threads "$THREADS" $TRAIN_ARGS
    # Wall time of the training that finished the run (a rerun that finds it done keeps the figure).
    [ -s "$dir/train.seconds" ] || echo "$((SECONDS - start))" >"$dir/train.seconds"
    logged "$dir/average.log" $NMT average "$dir/run" --last "$AVERAGE" --out "$dir/averaged.pt"
    logged "$dir/eval.log" $NMT eval --model "$dir/averaged.pt" --src "$OUT/raw/test.$src" --ref "$OUT/raw/test.$tgt" \
        --beam "$BEAM" --lenpen "$LENPEN" --threads "$THREADS" --save-hyp "$dir/test.hyp.$tgt" --json >"$dir/test.json.tmp"
    mv "$dir/test.json.tmp" "$dir/test.json"  # a failed rerun keeps the previous scores
}

# (not under `||`: that would turn set -e off inside the directions)
each_direction direction "prepare, train (log: $OUT/{d}/train.log), average, eval" "$OUT/<direction>/*.log"  # fails: exit 1
for d in $DIRECTIONS; do
    log "$d: trained in $(cat "$OUT/$d/train.seconds") s; test scores in $OUT/$d/test.json"
    echo "{\"direction\": \"$d\", \"train_seconds\": $(cat "$OUT/$d/train.seconds"), \"scores\": $(tr -d '\n' <"$OUT/$d/test.json")}"
done
