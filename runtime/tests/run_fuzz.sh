#!/bin/sh
# Bounded libFuzzer run of the schedule JSON reader.
# usage: run_fuzz.sh WORKDIR SECONDS   (exit 77 = skipped: no clang/libFuzzer)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?workdir}
secs=${2:-20}
mkdir -p "$work/corpus"
if ! command -v clang >/dev/null 2>&1; then
    echo "SKIPPED: clang not found (apt-get install clang libclang-rt-14-dev)"
    exit 77
fi
if ! clang -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
        -I"$here/../include" -I"$here/../src" \
        "$here/fuzz_schedule_json.c" "$here/../src/schedule.c" "$here/../src/topology.c" \
        "$here/../src/util.c" -ljansson -o "$work/fuzz_schedule_json" 2>"$work/build.log"; then
    echo "SKIPPED: clang cannot build a libFuzzer target here:"; cat "$work/build.log"
    exit 77
fi
# Seed corpus: a valid schedule of each shape (schema versions 1 and 2), the same files
# tests/test_schedule_contract.py reads on Python's side of the contract.
cp "$here"/schedules/*.json "$work/corpus/"
exec "$work/fuzz_schedule_json" -max_total_time="$secs" -max_len=4096 -timeout=5 \
    -print_final_stats=1 "$work/corpus"
