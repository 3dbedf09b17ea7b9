#!/usr/bin/env bash
# The paper grid's mask-only control without re-running the grid (~2 h here): mask-only is the
# untrained network of the grid's policy shape (training/dt-grid.yaml) with the normalisation of
# the grid's offline dataset, so rebuilding that dataset (the same params give the same bytes)
# and one training step for the bundle's config and stats (its weights are replaced by
# untrained_like's) give the very control the grid's evaluate stage builds. evaluate then runs
# the baselines and mask-only (five initialisations, the median; no oracle) on the grid's cells
# and POWER8. Check before reading: the baselines' throughputs and mask-only's seed-0 headline
# (vs_best_s0) must equal the grid record's (benchmarks/results/paper-grid). source=sim.
#
#   benchmarks/grid_mask_control.sh /tmp/grid     # ~8 min on 2 cores; writes OUT/eval, OUT/eval-unseen
set -euo pipefail
case ${1:-} in -h|--help|"") sed -n '2,11p' "$0" | cut -c3-; exit $([ -n "${1:-}" ] && echo 0 || echo 2);; esac
out=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
pmoss=${PMOSS:-$repo/.venv/bin/pmoss}
mkdir -p "$out" && cd "$out"
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$PWD/mlflow.db}  # not the project's store
# the grid's params (benchmarks/results/paper-grid/params.yaml): offline.*, build.*, pretrain.config, evaluate.*
"$pmoss" collect "$repo/datasets/pools/paper.yaml" --output raw --episodes-per-cell 100 --n-slices 128 --search-runs 4 --search-budgets 250,1000,2000 --quiet
"$pmoss" dataset build raw --output offline --val 0.1 --test 0.1
"$pmoss" train offline --output one-step --config "$repo/training/dt-grid.yaml" --max-steps 1 --quiet
"$pmoss" evaluate "$repo/datasets/pools/eval-paper.yaml" --model one-step=one-step --n-slices 128 --no-oracle --output eval --quiet
"$pmoss" evaluate "$repo/datasets/pools/eval-unseen-paper.yaml" --model one-step=one-step --n-slices 128 --no-oracle --output eval-unseen --quiet
