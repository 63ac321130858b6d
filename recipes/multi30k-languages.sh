#!/usr/bin/env bash
# Multi30k in four languages (en, de, fr, cs) on a CPU: one multilingual model against one bilingual model per
# direction, at equal total compute. Results and the reasoning: docs/results-multi30k.md ("Many languages").
#
#   MIRROR=path/to/multi30k recipes/multi30k-languages.sh [OUT]      # default OUT: multi30k-languages
#
# Two comparisons at equal compute:
#   one-to-many   en -> de, fr, cs: one model of UPDATES updates against three bilingual models of UPDATES/3 each
#   many-to-one   de, fr, cs -> en: likewise
# Compute is counted in updates (each of at most 4,096 padded tokens), not seconds: a run of N updates on one thread
# is the same run however busy the machine is, so the comparison does not depend on what else ran. Every model is
# the `multi30k` preset (`nmt train --preset multi30k --threads 1`) with its schedule scaled to its length: warmup
# over the first 20% of the updates, the cosine tail over the last 20%, a checkpoint every 5%, the last 5 averaged;
# scored on test_2016_flickr (beam 6, length penalty 1.2), as recipes/multi30k.sh does.
# The bilingual models have a joint BPE of their two languages (6,000 pieces, the recipe's); the multilingual ones
# one joint BPE of all four (8,000 pieces) and a target-language tag on every source.
#
# Environment:
#   NMT      the nmt command (default: nmt)
#   MIRROR   folder with the upstream Multi30k files in the four languages (train, val, test_2016_flickr)
#   UPDATES  updates of a multilingual model (default 1500); a bilingual model gets a third
#   STAGES   what to run, in order (default "bilingual multilingual")
#   JOBS     trainings at the same time, one core each (default 2)
#   VOCAB_PAIR, VOCAB_ALL  the joint BPE of two languages (default 6000) and of all four (default 8000)
#
# Every step is skipped when its output is there, so rerunning resumes. stdout gets one JSON line per model and
# direction; logs go to OUT/.
set -euo pipefail

OUT=${1:-multi30k-languages}
NMT=${NMT:-nmt}
MIRROR=${MIRROR:?set MIRROR to a folder with the Multi30k files (train.en.gz, val.en.gz, test_2016_flickr.en.gz, ...)}
UPDATES=${UPDATES:-1500}
STAGES=${STAGES:-"bilingual multilingual"}
JOBS=${JOBS:-2}
VOCAB_PAIR=${VOCAB_PAIR:-6000}  # the joint BPE of a bilingual model (the recipe's)
VOCAB_ALL=${VOCAB_ALL:-8000}  # the joint BPE of the four languages
BILINGUAL=(en-de en-fr en-cs de-en fr-en cs-en)
EVAL=(--beam 6 --lenpen 1.2 --threads 1 --json)

RECIPE=languages
# shellcheck source=recipes/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # log, logged

scored() {  # DIR MODEL SRC TGT [EVAL OPTIONS]: score MODEL on the test set of SRC-TGT into DIR/test.SRC-TGT.json
    local dir=$1 model=$2 src=$3 tgt=$4
    shift 4
    local json="$dir/test.$src-$tgt.json"
    if [ ! -s "$json" ]; then
        logged "$dir/eval.log" $NMT eval --model "$model" --src "$MIRROR/test_2016_flickr.$src.gz" \
            --ref "$MIRROR/test_2016_flickr.$tgt.gz" "${EVAL[@]}" "$@" --save-hyp "$dir/test.hyp.$src-$tgt" >"$json.tmp"
        mv "$json.tmp" "$json"
    fi
    echo "{\"model\": \"$(basename "$dir")\", \"direction\": \"$src-$tgt\", \"scores\": $(cat "$json")}"
}

trained() {  # DIR UPDATES: train DIR/data for UPDATES, then average the last 5 checkpoints into DIR/averaged.pt
    local dir=$1 updates=$2 start=$SECONDS
    logged "$dir/train.log" $NMT train --data "$dir/data" --out "$dir/run" --preset multi30k --threads 1 \
        --max-time 0 --max-updates "$updates" --warmup $((updates / 5)) --save-interval $((updates / 20)) \
        --valid-interval $((updates / 2)) --valid-bleu-sentences 0
    [ -s "$dir/train.seconds" ] || echo "$((SECONDS - start))" >"$dir/train.seconds"
    [ -s "$dir/averaged.pt" ] || logged "$dir/average.log" $NMT average "$dir/run" --last 5 --out "$dir/averaged.pt"
}

bilingual() {  # SRC TGT
    local src=$1 tgt=$2 dir="$OUT/bilingual/$1-$2" pair
    log "bilingual $src-$tgt ($((UPDATES / 3)) updates)"
    pair=$(printf '%s\n' "$1" "$2" | sort | paste -sd-)
    mkdir -p "$dir" "$OUT/bpe"
    if [ ! -s "$OUT/bpe/$pair.model" ]; then  # one BPE per language pair, shared by both directions
        logged "$OUT/bpe/$pair.log" $NMT bpe --train "$MIRROR/train.${pair%-*}.gz" "$MIRROR/train.${pair#*-}.gz" \
            --vocab-size "$VOCAB_PAIR" --threads 1 --out "$OUT/bpe/$pair.model"
    fi
    [ -s "$dir/data/meta.json" ] || logged "$dir/prepare.log" $NMT prepare --bpe "$OUT/bpe/$pair.model" \
        --train "$MIRROR/train" --valid "$MIRROR/val" --src "$src" --tgt "$tgt" --threads 1 --out "$dir/data" >/dev/null
    trained "$dir" $((UPDATES / 3))
    scored "$dir" "$dir/averaged.pt" "$src" "$tgt"
}

multilingual() {  # NAME PAIR...: one model of every PAIR (SRC-TGT)
    local name=$1 dir="$OUT/multilingual/$1" pairs=() p
    shift
    log "$name: $* ($UPDATES updates)"
    mkdir -p "$dir" "$OUT/bpe"
    for p in "$@"; do pairs+=(--pair "$p"); done
    if [ ! -s "$OUT/bpe/all.model" ]; then
        logged "$OUT/bpe/all.log" $NMT bpe --train "$MIRROR"/train.{en,de,fr,cs}.gz --vocab-size "$VOCAB_ALL" \
            --threads 1 --out "$OUT/bpe/all.model"
    fi
    [ -s "$dir/data/meta.json" ] || logged "$dir/prepare.log" $NMT prepare --bpe "$OUT/bpe/all.model" \
        --train "$MIRROR/train" --valid "$MIRROR/val" "${pairs[@]}" --threads 1 --out "$dir/data" >/dev/null
    trained "$dir" "$UPDATES"
    for p in "$@"; do scored "$dir" "$dir/averaged.pt" "${p%-*}" "${p#*-}" --tgt-lang "${p#*-}"; done
}

run_limited() {  # COMMAND...: at most JOBS at a time
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    "$@" &
}

mkdir -p "$OUT"
for stage in $STAGES; do
    case $stage in
    bilingual)
        for d in "${BILINGUAL[@]}"; do run_limited bilingual "${d%-*}" "${d#*-}"; done ;;
    multilingual)
        run_limited multilingual one-to-many en-de en-fr en-cs
        run_limited multilingual many-to-one de-en fr-en cs-en ;;
    *) log "unknown stage $stage (bilingual, multilingual)"; exit 2 ;;
    esac
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n; done  # a failed job fails the recipe (set -e)
