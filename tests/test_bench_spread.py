"""Figures with their spread (pmoss.bench): a ratio whose range includes 1.0 is noise."""

import pytest

from pmoss.bench import WITHIN_NOISE, Spread, interleaved, ratio_spread, sign_test, verdict


def test_spread_of_repeats() -> None:
    s = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.lo, s.hi, s.n) == (2.5, 1.0, 10.0, 4)
    assert s.format() == "2.50 [1.00-10.00]" and s.format(scale=10, digits=1) == "0.2 [0.1-1.0]"
    assert s.as_dict() == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    with pytest.raises(ValueError, match="no values"):
        Spread.of([])


def test_verdict_win_loss_and_noise() -> None:
    base = [1.0, 1.0, 1.0]
    assert verdict(ratio_spread([1.2, 1.3, 1.25], base)) == "win"
    assert verdict(ratio_spread([0.7, 0.8, 0.75], base)) == "loss"
    # the case: a 1.9x median whose rounds straddle 1.0 is no win
    assert verdict(ratio_spread([1.9, 0.95, 2.1], base)) == WITHIN_NOISE
    assert verdict(ratio_spread([1.0, 1.2, 1.3], base)) == WITHIN_NOISE  # touching 1.0 counts
    # a single run has no spread: never a win, however large
    assert verdict(ratio_spread([1.9], [1.0])) == WITHIN_NOISE
    # lower is better (latency): above 1.0 is a loss
    assert verdict(ratio_spread([1.2, 1.3], [1.0, 1.0]), higher_is_better=False) == "loss"
    assert verdict(ratio_spread([0.5, 0.6], [1.0, 1.0]), higher_is_better=False) == "win"


def test_sign_test_counts_paired_rounds() -> None:
    # 9 of 10 rounds higher: p = 2 x (1 + 10) / 1024 (binomial tail, two-sided)
    assert sign_test([2.0] * 9 + [0.5], [1.0] * 10) == {"a_higher": 9, "n": 10, "p": 22 / 1024}
    # an even split says nothing, however large the ratios; ties are dropped
    even = sign_test([100.0, 0.01, 5.0, 0.2, 1.0], [1.0] * 5)
    assert (even["a_higher"], even["n"], even["p"]) == (2, 4, 1.0)
    assert sign_test([1.0], [1.0]) == {"a_higher": 0, "n": 0, "p": 1.0}
    with pytest.raises(ValueError, match="equal counts"):
        sign_test([1.0, 2.0], [1.0])


def test_ratio_pairs_rounds_when_counts_match() -> None:
    # round-paired: load drift that hits both sides alike cancels (2.0 every round)
    paired = ratio_spread([2.0, 4.0, 8.0], [1.0, 2.0, 4.0])
    assert (paired.lo, paired.hi) == (2.0, 2.0) and verdict(paired) == "win"
    # unequal counts: every cross ratio, so the range widens and here crosses 1.0
    cross = ratio_spread([2.0, 4.0], [1.0, 2.0, 4.0])
    assert (cross.lo, cross.hi, cross.n) == (0.5, 4.0, 6) and verdict(cross) == WITHIN_NOISE
    with pytest.raises(ValueError, match="positive"):
        ratio_spread([1.0], [0.0])


def test_interleaved_rotates_the_order() -> None:
    calls: list[tuple[str, int]] = []

    def run(name: str):
        def one(r: int) -> float:
            calls.append((name, r))
            return float(r)

        return one

    out = interleaved({"a": run("a"), "b": run("b"), "c": run("c")}, repeats=3)
    assert out == {"a": [0.0, 1.0, 2.0], "b": [0.0, 1.0, 2.0], "c": [0.0, 1.0, 2.0]}
    assert [n for n, _ in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    with pytest.raises(ValueError, match="repeats"):
        interleaved({"a": run("a")}, repeats=0)


def test_a_record_says_which_simd_code_it_was_measured_with(tmp_path, monkeypatch):
    import json

    from pmoss.bench import write_record

    monkeypatch.delenv("PMOSS_NATIVE_SIMD", raising=False)
    pinned = json.loads(write_record("x", "m", 1.0, "s", "b", 2.0, out=tmp_path / "a.json").read_text())
    monkeypatch.setenv("PMOSS_NATIVE_SIMD", "1")
    native = json.loads(write_record("x", "m", 1.0, "s", "b", 2.0, out=tmp_path / "b.json").read_text())
    assert pinned["simd"] == "avx2 (pmoss pin)" and native["simd"] == "native" and pinned["ratio"] == 0.5
