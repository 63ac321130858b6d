#!/usr/bin/env bash
# Distilled students of the Multi30k models: each direction's teacher (recipes/multi30k.sh's averaged model)
# translates the training corpus (nmt distill), a 6+2-layer student trains on its translations, is averaged,
# scored with CTranslate2 int8 and greedy search, and exported (int8). Results: docs/results-multi30k.md.
#
#   recipes/multi30k-student.sh [OUT]         # OUT: the multi30k recipe's folder (default multi30k-run)
#   make multi30k-student MIRROR=../shared/data/multi30k   # the teachers first (make multi30k), then this
#
# Environment:
#   NMT          the nmt command (default: nmt)
#   DIRECTIONS   default "en-de de-en"; both at the same time, one process each
#   THREADS      torch threads per direction (default 1: two directions fill two cores)
#   AVERAGE      step checkpoints averaged (default 5)
#   BEAM, LENPEN the teacher's search while distilling (default 6 and 1.2, as its test); its n-best closest to
#                the reference by chrF is kept (--interpolate chrf)
#   DISTILL_ARGS extra `nmt distill` options (default: none), e.g. its filters: --max-ratio 2 --max-repeats 2
#   PREPARE_ARGS extra `nmt prepare` options for the student's data (default: none)
#   TRAIN_ARGS   extra `nmt train` options over the multi30k-student preset (default: none; its budget is 2,700 s)
#
# Every step is skipped or resumed when its output is already there (the distillation goes on chunk by chunk).
# stdout gets one JSON line per direction: the student's scores, its training time, the distillation's report.
set -euo pipefail

OUT=${1:-multi30k-run}
NMT=${NMT:-nmt}
DIRECTIONS=${DIRECTIONS:-"en-de de-en"}
THREADS=${THREADS:-1}
AVERAGE=${AVERAGE:-5}
BEAM=${BEAM:-6}
LENPEN=${LENPEN:-1.2}
DISTILL_ARGS=${DISTILL_ARGS:-}
PREPARE_ARGS=${PREPARE_ARGS:-}
TRAIN_ARGS=${TRAIN_ARGS:-}

RECIPE=multi30k-student
# shellcheck source=recipes/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, logged, each_direction

for d in $DIRECTIONS; do
    if [ ! -s "$OUT/$d/averaged.pt" ]; then
        log "no teacher at $OUT/$d/averaged.pt: run recipes/multi30k.sh $OUT (make multi30k) first"
        exit 1
    fi
done

student() {  # SRC TGT: distil, prepare, train, average, score and export the student of one direction
    local src=$1 tgt=$2 dir="$OUT/$1-$2"
    local st="$dir/student"
    mkdir -p "$st"
    logged "$st/distill.log" $NMT distill -m "$dir/averaged.pt" --train "$OUT/raw/train" --src "$src" --tgt "$tgt" \
        --out "$st/distilled" --beam "$BEAM" --lenpen "$LENPEN" --interpolate chrf --threads "$THREADS" $DISTILL_ARGS >/dev/null
    if [ ! -s "$st/data/meta.json" ]; then
        logged "$st/prepare.log" $NMT prepare --bpe "$OUT/bpe.model" --train "$st/distilled/train" \
            --valid "$OUT/raw/valid" --test "$OUT/raw/test" --src "$src" --tgt "$tgt" --out "$st/data" $PREPARE_ARGS >"$st/prepare.json.tmp"
        mv "$st/prepare.json.tmp" "$st/prepare.json"
    fi
    local start=$SECONDS
    logged "$st/train.log" $NMT train --data "$st/data" --out "$st/run" --preset multi30k-student --threads "$THREADS" \
        $TRAIN_ARGS
    [ -s "$st/train.seconds" ] || echo "$((SECONDS - start))" >"$st/train.seconds"
    logged "$st/average.log" $NMT average "$st/run" --last "$AVERAGE" --out "$st/averaged.pt"
    # The student as it is served: CTranslate2, int8, its own search (greedy: the preset's default).
    logged "$st/eval.log" $NMT eval --model "$st/averaged.pt" --src "$OUT/raw/test.$src" --ref "$OUT/raw/test.$tgt" \
        --engine ctranslate2 --int8 --threads "$THREADS" --save-hyp "$st/test.hyp.$tgt" --json >"$st/test.json.tmp"
    mv "$st/test.json.tmp" "$st/test.json"
    [ -s "$st/ct2-int8/model.bin" ] ||
        logged "$st/export.log" $NMT export "$st/averaged.pt" "$st/ct2-int8" --quantization int8
}

# (not under `||`: that would turn set -e off inside the directions)
each_direction student "distil, prepare, train the student (log: $OUT/{d}/student/train.log), average, eval, export" \
    "$OUT/<direction>/student/*.log"  # a failure exits 1 (set -e)
for d in $DIRECTIONS; do
    st="$OUT/$d/student"
    log "$d: student trained in $(cat "$st/train.seconds") s; test scores in $st/test.json"
    echo "{\"direction\": \"$d\", \"train_seconds\": $(cat "$st/train.seconds"), \"scores\": $(tr -d '\n' <"$st/test.json"), \"distilled\": $(tr -d '\n' <"$st/distilled/report.json")}"
done
