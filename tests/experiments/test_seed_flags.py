"""--seed of `assocmem verify` and --seeds, --jobs, --threads of every experiment are typed at parse
time (cli/types.py): a value outside 0..2**32 - 1 (or a count below 1) exits 2 naming the flag and the
range, before any work; an experiment refuses a seed given twice."""
from __future__ import annotations

import pytest

from assocmem.cli import main


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("value, says", [("-1", "must be an integer >= 0, got '-1'"),
                                         ("4294967296", "must be a seed from 0 to 4294967295, got '4294967296'"),
                                         ("1.5", "must be an integer >= 0, got '1.5'")])
def test_verify_seed_is_a_seed(capsys, value, says):
    assert f"argument --seed: {says}" in _refused(["verify", "gdn", "--seed", value], capsys)


@pytest.mark.parametrize("argv, says", [
    (["--seeds", "0", "-3"], "argument --seeds: must be an integer >= 0, got '-3'"),
    (["--seeds", "4294967296"], "argument --seeds: must be a seed from 0 to 4294967295, got '4294967296'"),
    (["--seeds", "x"], "argument --seeds: must be an integer >= 0, got 'x'"),
    (["--jobs", "0"], "argument --jobs: must be an integer >= 1, got '0'"),
    (["--text-seed", "-2"], "argument --text-seed: must be an integer >= 0, got '-2'"),
])
def test_experiment_seeds_and_counts_are_typed(tmp_path, capsys, argv, says):
    assert says in _refused(["experiment", "leak", "--out", str(tmp_path / "o"), *argv], capsys)
    assert not (tmp_path / "o").exists()


def test_experiment_threads_are_a_count(tmp_path, capsys):
    err = _refused(["experiment", "hybrid", "--threads", "0", "--out", str(tmp_path / "o")], capsys)
    assert "argument --threads: must be an integer >= 1, got '0'" in err


def test_a_seed_given_twice_is_refused_before_any_work(tmp_path, capsys):
    assert main(["experiment", "leak", "--seeds", "1", "2", "1", "--out", str(tmp_path / "o")]) == 2
    assert ("assocmem experiment leak: --seeds: [1] given more than once; each seed runs once (into "
            "<out>/seed_<s>)") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_largest_seed_is_accepted(capsys):
    from assocmem.cli import build_parser

    args = build_parser().parse_args(["verify", "gdn", "--seed", "4294967295"])
    assert args.seed == 4294967295
