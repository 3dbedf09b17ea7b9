#!/bin/bash
# (a record of the fourteenth session's probe: the paths are that session's scratch workspace and critics)
# expert-iteration probe: fine-tune models/base on the best measured proposals of each training snapshot
set -e
TOP=${1:-2}; STEPS=${2:-300}
cd /tmp/grid3
export PATH=/tmp/grid3/.venv/bin:$PATH PYTHONPATH=/work/main/src MLFLOW_TRACKING_URI=sqlite:////tmp/s14/ei/mlflow.db
unset PYTHONDONTWRITEBYTECODE
O=/tmp/s14/ei/top$TOP-$STEPS; rm -rf $O; mkdir -p $O
python - <<PY
import json
from pathlib import Path
from pmoss.contracts.snapshot import read_raw, episodes_to_table, write_parquet_atomic
rows = read_raw(Path("datasets/raw/proposals")).to_pylist()
by = {}
for r in rows:
    by.setdefault(json.loads(r["schedule_provenance"])["snapshot"], []).append(r)
keep = [r for rs in by.values() for r in sorted(rs, key=lambda r: -r["throughput_qps"])[:$TOP]]
kinds = {}
for r in keep: kinds[json.loads(r["schedule_provenance"])["candidate"].rstrip("0123456789")] = kinds.get(json.loads(r["schedule_provenance"])["candidate"].rstrip("0123456789"), 0) + 1
print(len(by), "snapshots,", len(keep), "kept", kinds)
write_parquet_atomic(episodes_to_table(keep), Path("$O/raw/part.parquet"))
PY
python -m pmoss dataset build $O/raw --output $O/data --val 0.1 --test 0.1
t0=$(date +%s)
python -m pmoss train $O/data --output $O/policy --init models/base --config training/dt-grid.yaml --max-steps $STEPS --quiet > $O/train.log 2>&1
echo "train $(( $(date +%s)-t0 )) s"; tail -1 $O/train.log
for S in 0 1 2; do
python /work/main/benchmarks/critic_ranking.py datasets/pools/val-paper.yaml --policy $O/policy --critic /tmp/s12/rw1-s0/critic --critic /tmp/s12/rw1-s1/critic --critic /tmp/s12/rw1-s2/critic --ensemble --n-slices 128 --seed $S --out $O/val-s$S.json 2>&1 | grep -v rw1- | tail -2 | sed "s/^/seed $S /"
done
