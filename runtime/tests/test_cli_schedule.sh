#!/bin/sh
# pmoss-runtime reads --schedule and --switch-schedule only from regular files
# of at most 64 MiB, before loading any keys: a FIFO, /dev/zero or a larger
# file is refused at once with one line naming the file and the limit (#42:
# /dev/zero grew to 2.1 GB, a FIFO blocked forever).
# usage: test_cli_schedule.sh PMOSS_RUNTIME
set -u
bin=${1:?path to pmoss-runtime}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkfifo "$work/fifo"
truncate -s 65M "$work/big.json"
fail=0
# expect OPTION FILE MESSAGE: exit status 1 within 10 s, stderr exactly one line with MESSAGE
expect() {
    timeout 10 "$bin" --keys 1000000 --seconds 5 "$1" "$2" >"$work/out" 2>"$work/err"
    rc=$?
    if [ "$rc" -ne 1 ] || [ "$(wc -l <"$work/err")" -ne 1 ] ||
       ! grep -qF "pmoss-runtime: $2: $3" "$work/err"; then
        echo "FAIL: $1 $2: exit $rc (124: timed out), stderr:"; cat "$work/err"
        fail=1
    else
        echo "ok: $1 $2: $(cat "$work/err")"
    fi
}
regular="not a regular file; a schedule is read only from a regular file of at most 64 MiB"
expect --schedule "$work/fifo" "$regular"
expect --schedule /dev/zero "$regular"
expect --switch-schedule "$work/fifo" "$regular"
expect --schedule "$work/big.json" "larger than 64 MiB"
exit $fail
