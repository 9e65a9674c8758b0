"""`assocmem verify` reports as it goes: a line on stderr before torch is imported, one as each shape's
derivation starts and one per pair with k/n, so a slow run is told from a hung one; the table on stdout is
unchanged."""
import json

from assocmem.cli import main as cli


def test_verify_prints_a_line_per_pair_as_it_goes(tmp_path, capsys):
    assert cli(["verify", "linear_attention", "--no-large", "--seq-len", "4", "--json", str(tmp_path / "v.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    rows = json.loads((tmp_path / "v.json").read_text())
    assert err[0].startswith("verify (") and err[0].endswith("linear_attention: loading torch and the forms ...")
    assert any(line.endswith("spec 1/1: linear_attention") for line in err)
    assert any("linear_attention: the derivation at B=2, T=4, H=2, K=8, V=6 ..." in line for line in err)
    pairs = [line for line in err if " linear_attention [" in line]
    n = len(rows)
    assert [line.split("[", 1)[1].split("]", 1)[0] for line in pairs] == [f"{k}/{n}" for k in range(1, n + 1)]
    for line, row in zip(pairs, rows):
        assert f"] {row['pair']}: " in line and line.endswith("pass" if row["passed"] else "FAIL")
