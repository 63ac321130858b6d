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
