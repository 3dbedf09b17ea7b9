"""`pmoss sim` commands: help, list, describe, run, and errors that name the field."""

import pytest
from typer.testing import CliRunner

from pmoss.contracts.errors import ContractError
from pmoss.sim.cli import app

runner = CliRunner()


@pytest.mark.parametrize("cmd", [[], ["list"], ["describe"], ["fidelity"], ["run"]])
def test_help(cmd):
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_list_and_describe():
    assert "nvidia-grace" in runner.invoke(app, ["list"]).output
    out = runner.invoke(app, ["describe", "ibm-power8"]).output
    assert "source:" in out and "l4_mib: 64.0" in out


def test_run_prints_throughput_and_slices():
    result = runner.invoke(app, ["run", "-m", "intel-snb-4s", "-w", "ycsb-c", "--kind", "sn-mixed", "--n-slices", "32", "--n-records", "100000", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "Mq/s" in result.output and "source=sim" in result.output


@pytest.mark.parametrize(
    "args, field",
    [(["run", "-m", "nope", "-w", "ycsb-c"], "machine"), (["run", "-m", "intel-snb-4s", "-w", "nope"], "workload"),
     (["run", "-m", "intel-snb-4s", "-w", "ycsb-c", "--kind", "learned"], "kind"),
     (["run", "-m", "intel-snb-4s", "-w", "ycsb-c", "--n-slices", "0"], "n_slices"),
     (["describe", "nope"], "machine"), (["fidelity", "--oracle-budget", "0"], "oracle_budget")],
)
def test_bad_input_raises_contract_error_naming_the_field(args, field):
    result = runner.invoke(app, args)
    assert isinstance(result.exception, ContractError) and field in str(result.exception)
