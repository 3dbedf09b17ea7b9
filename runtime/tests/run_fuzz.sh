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
# Seed corpus: a valid schedule of each shape (schema versions 1 and 2).
printf '%s' '{"schema_version":1,"machine":"m","n_slices":2,"kind":"sn-grouped","node":[0,1],"core":[1,2],"provenance":{"seed":1,"g":["a",1.5e-3,true,null]}}' >"$work/corpus/one_core.json"
printf '%s' '{"schema_version":1,"machine":"m","n_slices":1,"kind":"os-default","node":[-1],"core":[-1]}' >"$work/corpus/os.json"
printf '%s' '{"schema_version":2,"machine":"m","n_slices":4,"kind":"learned","node":[0,0,1,1],"core":[1,1,2,-1],"width":["thread","core","l3","node"],"provenance":{"model":"pmoss-dt","version":"3"}}' >"$work/corpus/groups.json"
printf '%s' '{"schema_version":2,"machine":"m","n_slices":2,"kind":"sn-hot","node":[0,1],"core":[1,2],"width":"l3"}' >"$work/corpus/one_width.json"
printf '%s' '{"schema_version":2,"machine":"","n_slices":2,"kind":"sn-numa","node":[0,1],"core":[-1,2],"width":"node"}' >"$work/corpus/sn_numa.json"
exec "$work/fuzz_schedule_json" -max_total_time="$secs" -max_len=4096 -timeout=5 \
    -print_final_stats=1 "$work/corpus"
