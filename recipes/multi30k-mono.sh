#!/usr/bin/env bash
# Multi30k with monolingual captions: the parallel-only teachers of recipes/multi30k.sh back-translate the other
# language's task-2 captions, each direction's teacher is trained again on real + synthetic pairs (a second seed
# too, for an ensemble), and the teacher that scores highest on validation (parallel-only, with synthetic data, or
# the ensemble) forward-translates the source captions and the real sources for a 6+2-layer student, which is
# scored with CTranslate2 int8 and exported. Results, the choices
# made on the validation set and timings: docs/results-multi30k.md.
#
#   recipes/multi30k-mono.sh [OUT]            # default OUT: multi30k-run (the multi30k recipe's folder)
#   make multi30k-mono MIRROR=path/to/multi30k MONO_MIRROR=path/to/multi30k-task2
#
# Environment:
#   NMT          the nmt command (default: nmt)
#   MIRROR       task 1's files (as recipes/multi30k.sh); MONO_MIRROR: task 2's (default: the upstream URLs)
#   DIRECTIONS   default "en-de de-en"; both at the same time, one process each
#   THREADS      torch threads per direction (default 1: two directions fill two cores)
#   AVERAGE      step checkpoints averaged (default 5)
#   BEAM, LENPEN the teachers' test search and the forward translation's (default 6 and 1.2)
#   BT_ARGS      the back-translation's search (default: beam 6, lenpen 1.2, the forward translation's: sampling and
#                the other choices not yet compared on validation, see docs/results-multi30k.md)
#   LID          drop captions the language detector gives less than this probability (%) of their language
#   SYNTH_ARGS   `nmt prepare` options of the real + synthetic data (default: --tag-synthetic)
#   ENSEMBLE     1: also train a second seed of each teacher and distil from both where they score higher
#                together on validation (default 1); 0: one teacher
#   TRAIN_ARGS   extra `nmt train` options of every teacher (the parallel-only ones too)
#   STUDENT_TRAIN_ARGS  extra `nmt train` options of the students (over the multi30k-student preset)
#   DISTILL_ARGS, PREPARE_ARGS  extra options of every `nmt distill` and of the synthetic data's `nmt prepare`
#   MONO_LINES   use the first N captions of each language (default: all), for a quick trial
#
# Every step is skipped or resumed when its output is already there, so the whole can run in several sittings;
# OUT/<direction>/mono/steps.tsv has each step's wall time. stdout gets one JSON line per direction: the
# parallel-only teacher's, the teacher's with synthetic data, the ensemble's and the student's test scores.
set -euo pipefail

OUT=${1:-multi30k-run}
NMT=${NMT:-nmt}
MIRROR=${MIRROR:-}
MONO_MIRROR=${MONO_MIRROR:-}
DIRECTIONS=${DIRECTIONS:-"en-de de-en"}
THREADS=${THREADS:-1}
AVERAGE=${AVERAGE:-5}
BEAM=${BEAM:-6}
LENPEN=${LENPEN:-1.2}
BT_ARGS=${BT_ARGS:-"--beam 6 --lenpen 1.2"}
LID=${LID:-10}
SYNTH_ARGS=${SYNTH_ARGS:-"--tag-synthetic"}
ENSEMBLE=${ENSEMBLE:-1}
TRAIN_ARGS=${TRAIN_ARGS:-}
STUDENT_TRAIN_ARGS=${STUDENT_TRAIN_ARGS:-}
DISTILL_ARGS=${DISTILL_ARGS:-}
PREPARE_ARGS=${PREPARE_ARGS:-}
MONO_LINES=${MONO_LINES:-}

HERE="$(dirname "${BASH_SOURCE[0]}")"
RECIPE=multi30k-mono
# shellcheck source=recipes/common.sh
source "$HERE/common.sh"  # log, logged, each_direction

mkdir -p "$OUT"
log "the parallel-only teachers (recipes/multi30k.sh; skipped where done)"
NMT=$NMT MIRROR=$MIRROR DIRECTIONS=$DIRECTIONS THREADS=$THREADS AVERAGE=$AVERAGE BEAM=$BEAM LENPEN=$LENPEN \
    TRAIN_ARGS=$TRAIN_ARGS "$HERE/multi30k.sh" "$OUT" >"$OUT/parallel.jsonl"
log "task 2's captions -> $OUT/mono"
logged "$OUT/mono.log" $NMT download multi30k-mono --out "$OUT/mono" ${MONO_MIRROR:+--mirror "$MONO_MIRROR"} \
    ${MIRROR:+--mirror "$MIRROR"} >/dev/null
MONO="$OUT/mono/mono"  # the captions: MONO.en, MONO.de
if [ -n "$MONO_LINES" ]; then
    mkdir -p "$OUT/mono/first-$MONO_LINES"
    for lang in en de; do head -n "$MONO_LINES" "$MONO.$lang" >"$OUT/mono/first-$MONO_LINES/mono.$lang"; done
    MONO="$OUT/mono/first-$MONO_LINES/mono"
fi

timed() {  # DIR STEP COMMAND...: COMMAND, its wall time appended to DIR/steps.tsv
    local dir=$1 step=$2 start=$SECONDS
    shift 2
    "$@"
    echo -e "$step\t$((SECONDS - start))" >>"$dir/steps.tsv"
}

teacher_run() {  # DIR SEED: train, average and score the teacher of DIR's data with SEED
    local dir=$1 seed=$2 src=$3 tgt=$4 suffix=${2/#1/}
    logged "$dir/train$suffix.log" $NMT train --data "$dir/data" --out "$dir/run$suffix" --preset multi30k \
        --seed "$seed" --threads "$THREADS" $TRAIN_ARGS
    logged "$dir/average$suffix.log" $NMT average "$dir/run$suffix" --last "$AVERAGE" --out "$dir/averaged$suffix.pt"
}

scores() {  # OUT.json SRC TGT SPLIT MODEL...: the models' scores on OUT/raw/SPLIT (torch fp32, the test's search)
    local json=$1 src=$2 tgt=$3 split=$4 models=()
    shift 4
    for m in "$@"; do models+=(-m "$m"); done
    [ -s "$json" ] || { logged "${json%.json}.log" $NMT eval "${models[@]}" --src "$OUT/raw/$split.$src" \
        --ref "$OUT/raw/$split.$tgt" --beam "$BEAM" --lenpen "$LENPEN" --threads "$THREADS" --json >"$json.tmp" &&
        mv "$json.tmp" "$json"; }
}

bleu() { grep -A1 '"BLEU 13a cased"' "$1" | sed -n 's/.*"score": \([0-9.]*\).*/\1/p'; }  # of `nmt eval --json`
higher() { awk -v a="$(bleu "$1")" -v b="$2" 'BEGIN {exit !(a > b)}'; }  # JSON's BLEU above the number given

direction() {  # SRC TGT: back-translation, the teachers, forward translation and the student of one direction
    local src=$1 tgt=$2 dir="$OUT/$1-$2/mono" back="$OUT/$2-$1/averaged.pt"
    mkdir -p "$dir"
    # back-translation: the TGT-SRC teacher translates TGT captions (real TGT, synthetic SRC)
    [ -s "$dir/bt/report.json" ] || timed "$dir" back-translate logged "$dir/bt.log" $NMT distill -m "$back" \
        --train "$MONO" --src "$tgt" --tgt "$src" --out "$dir/bt" --lid "$LID" --threads "$THREADS" \
        $BT_ARGS $DISTILL_ARGS >/dev/null
    if [ ! -s "$dir/data/meta.json" ]; then
        timed "$dir" prepare logged "$dir/prepare.log" $NMT prepare --bpe "$OUT/bpe.model" --train "$OUT/raw/train" \
            --synthetic "$dir/bt/train" $SYNTH_ARGS --valid "$OUT/raw/valid" --test "$OUT/raw/test" --src "$src" \
            --tgt "$tgt" --out "$dir/data" $PREPARE_ARGS >"$dir/prepare.json"
    fi
    [ -s "$dir/averaged.pt" ] || timed "$dir" teacher teacher_run "$dir" 1 "$src" "$tgt"
    scores "$dir/test.json" "$src" "$tgt" test "$dir/averaged.pt"
    # the teacher that distils is chosen on validation: the synthetic data's, or the parallel-only one where that
    # scores higher (at short budgets it does: docs/results-multi30k.md), or the ensemble of two seeds where higher
    scores "$dir/valid.json" "$src" "$tgt" valid "$dir/averaged.pt"
    scores "$dir/valid-parallel.json" "$src" "$tgt" valid "$OUT/$src-$tgt/averaged.pt"
    local teachers=("$dir/averaged.pt") best
    best=$(bleu "$dir/valid.json")
    if higher "$dir/valid-parallel.json" "$best"; then
        teachers=("$OUT/$src-$tgt/averaged.pt")
        best=$(bleu "$dir/valid-parallel.json")
    fi
    if [ "$ENSEMBLE" = 1 ]; then
        [ -s "$dir/averaged2.pt" ] || timed "$dir" teacher-seed-2 teacher_run "$dir" 2 "$src" "$tgt"
        scores "$dir/valid-ensemble.json" "$src" "$tgt" valid "$dir/averaged.pt" "$dir/averaged2.pt"
        scores "$dir/test-ensemble.json" "$src" "$tgt" test "$dir/averaged.pt" "$dir/averaged2.pt"
        if higher "$dir/valid-ensemble.json" "$best"; then
            teachers=("$dir/averaged.pt" "$dir/averaged2.pt")
        fi
    fi
    log "$src-$tgt distils from ${teachers[*]} (validation BLEU: $(bleu "$dir/valid-parallel.json") parallel-only, \
$(bleu "$dir/valid.json") with synthetic data)"
    local models=()
    for m in "${teachers[@]}"; do models+=(-m "$m"); done
    # forward translation: the real sources (the n-best closest to the reference) and the SRC captions
    [ -s "$dir/ft-real/report.json" ] || timed "$dir" forward-real logged "$dir/ft-real.log" $NMT distill \
        "${models[@]}" --train "$OUT/raw/train" --src "$src" --tgt "$tgt" --out "$dir/ft-real" --beam "$BEAM" \
        --lenpen "$LENPEN" --interpolate chrf --threads "$THREADS" $DISTILL_ARGS >/dev/null
    [ -s "$dir/ft-mono/report.json" ] || timed "$dir" forward-mono logged "$dir/ft-mono.log" $NMT distill \
        "${models[@]}" --train "$MONO" --src "$src" --tgt "$tgt" --out "$dir/ft-mono" --beam "$BEAM" \
        --lenpen "$LENPEN" --lid "$LID" --threads "$THREADS" $DISTILL_ARGS >/dev/null
    local st="$dir/student"
    mkdir -p "$st"
    if [ ! -s "$st/data/meta.json" ]; then
        timed "$dir" student-prepare logged "$st/prepare.log" $NMT prepare --bpe "$OUT/bpe.model" \
            --train "$dir/ft-real/train" --synthetic "$dir/ft-mono/train" --no-tag-synthetic --valid "$OUT/raw/valid" \
            --test "$OUT/raw/test" --src "$src" --tgt "$tgt" --out "$st/data" $PREPARE_ARGS >"$st/prepare.json"
    fi
    if [ ! -s "$st/averaged.pt" ]; then
        timed "$dir" student logged "$st/train.log" $NMT train --data "$st/data" --out "$st/run" \
            --preset multi30k-student --threads "$THREADS" $STUDENT_TRAIN_ARGS
        logged "$st/average.log" $NMT average "$st/run" --last "$AVERAGE" --out "$st/averaged.pt"
    fi
    # the student as it is served: CTranslate2, int8, its own search (greedy: the preset's default)
    [ -s "$st/test.json" ] || { logged "$st/eval.log" $NMT eval --model "$st/averaged.pt" --src "$OUT/raw/test.$src" \
        --ref "$OUT/raw/test.$tgt" --engine ctranslate2 --int8 --threads "$THREADS" --json >"$st/test.json.tmp" &&
        mv "$st/test.json.tmp" "$st/test.json"; }
    [ -s "$st/ct2-int8/model.bin" ] ||
        logged "$st/export.log" $NMT export "$st/averaged.pt" "$st/ct2-int8" --quantization int8
}

# (not under `||`: that would turn set -e off inside the directions)
each_direction direction "back-translate, teachers (log: $OUT/{d}/mono/train.log), forward-translate, student" \
    "$OUT/<direction>/mono/*.log"
for d in $DIRECTIONS; do
    dir="$OUT/$d/mono"
    ensemble=$([ -s "$dir/test-ensemble.json" ] && tr -d '\n' <"$dir/test-ensemble.json" || echo null)
    echo "{\"direction\": \"$d\", \"parallel\": $(tr -d '\n' <"$OUT/$d/test.json"), \"synthetic\": $(tr -d '\n' \
<"$dir/test.json"), \"ensemble\": $ensemble, \"student\": $(tr -d '\n' <"$dir/student/test.json")}"
done
