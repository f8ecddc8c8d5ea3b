# cli_harness.sh - the shell harness shared by the command's test scripts (sourced, not run).
#
# The sourcing script sets MIMI (the binary) and T (its temporary folder) first. `run` runs the
# command with stdout and stderr captured in $T; `check NAME CONDITION...` reports one case as
# "ok - NAME" or "not ok - NAME" (with the exit status and stderr); `finish` prints the closing
# "N passed, M failed" line and returns the verdict.

PASSED=0
FAILED=0
RC=0

# run ARGS...: runs the command, stdout to $T/stdout, stderr to $T/stderr, status in $RC.
run() {
    "$MIMI" "$@" >"$T/stdout" 2>"$T/stderr"
    RC=$?
}

# check NAME CONDITION...: evaluates the condition (a command) and reports the case.
check() {
    local name=$1
    shift
    if "$@"; then
        echo "ok - $name"
        PASSED=$((PASSED + 1))
    else
        echo "not ok - $name"
        echo "#   exit status $RC; stderr:"
        sed 's/^/#   /' "$T/stderr" 2>/dev/null | head -n 20
        FAILED=$((FAILED + 1))
    fi
}

finish() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

rc_is() { [ "$RC" -eq "$1" ]; }
stderr_has() { grep -qF -- "$1" "$T/stderr"; }
stdout_has() { grep -qF -- "$1" "$T/stdout"; }
absent() { [ ! -e "$1" ]; }
no_temp_files() { [ -z "$(find "$T" -name '*.tmp.*' -print)" ]; }
size_is() { [ -f "$1" ] && [ "$(wc -c <"$1")" -eq "$2" ]; }

# wait_size PATH BYTES: waits up to 30 s (for streams through FIFOs) for the file to reach BYTES; prints its size.
wait_size() {
    local s=0 i
    for i in $(seq 300); do
        s=$(wc -c <"$1" 2>/dev/null || echo 0)
        [ "$s" -ge "$2" ] && break
        sleep 0.1
    done
    echo "$s"
}

# le16 N / le32 N: N as little-endian bytes, for writing files byte by byte.
le16() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))"; }
le32() { le16 $(($1 & 65535)); le16 $((($1 >> 16) & 65535)); }
