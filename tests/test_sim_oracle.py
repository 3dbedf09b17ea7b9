"""Oracle: a valid one-core schedule, at least as good as the best one-core heuristic."""

import pytest

from pmoss.contracts.errors import ContractError
from pmoss.contracts.policies import generate
from pmoss.sim import load_sim_machine, oracle, throughput

N, N_REC = 32, 200_000


@pytest.mark.parametrize("name, workload", [("amd-milan-nps4", "ycsb-c"), ("intel-snb-4s", "rsi-20-30-50")])
def test_oracle_beats_every_one_core_heuristic(name, workload):
    m = load_sim_machine(name)
    sched, x = oracle(m, workload, "dense", N, seed=0, budget=200, n_records=N_REC)
    sched.validate_for(m)
    assert sched.kind == "learned" and sched.provenance["generator"] == "oracle"
    assert x == pytest.approx(throughput(m, workload, "dense", [sched], n_records=N_REC)[0], rel=1e-9)
    heuristics = [generate(k, m, N, s) for k in ("sn-grouped", "sn-spread", "sn-mixed", "sn-random") for s in range(4)]
    assert x >= throughput(m, workload, "dense", heuristics, n_records=N_REC).max() * (1 - 1e-9)


def test_oracle_is_deterministic_by_seed():
    a = oracle("intel-snb-4s", "ycsb-a", "dense", N, seed=3, budget=100, n_records=N_REC)
    b = oracle("intel-snb-4s", "ycsb-a", "dense", N, seed=3, budget=100, n_records=N_REC)
    assert a[0].core == b[0].core and a[1] == b[1]


def test_oracle_budget_too_small():
    with pytest.raises(ContractError, match="budget"):
        oracle("intel-snb-4s", "ycsb-a", "dense", N, seed=0, budget=3)
