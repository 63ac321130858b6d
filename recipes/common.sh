# What the recipes share; sourced by each (after it sets RECIPE, the name its log lines begin with).

log() { echo "[$RECIPE $(date +%H:%M:%S)] $*" >&2; }

logged() {  # LOG COMMAND...: COMMAND's stderr goes to LOG; when it fails, the end of LOG goes to stderr too
    local log=$1
    shift
    "$@" 2>>"$log" || {
        local rc=$?
        log "failed (exit $rc): $*"
        tail -n 3 "$log" >&2
        return "$rc"
    }
}

each_direction() {  # FUNCTION WHAT LOGS: FUNCTION SRC TGT for every one of $DIRECTIONS at once, a process each;
    # WHAT (its {d} the direction) is logged as each starts; when one fails, where its LOGS are, and return 1
    local fn=$1 what=$2 logs=$3 d pid status=0 pids=()
    for d in $DIRECTIONS; do
        log "$d: ${what//\{d\}/$d}"
        "$fn" "${d%-*}" "${d#*-}" &
        pids+=("$!")
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    if [ "$status" != 0 ]; then
        log "a direction failed; its logs are in $logs; rerun to resume"
        return 1
    fi
}
