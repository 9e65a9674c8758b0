"""`assocmem bench scaling`: rows, per-token ratios, the table and the CLI's refusals (no timing assertions)."""
import json

import pytest

from assocmem.training.bench.scaling import markdown_table, run_scaling
from assocmem.cli import main


def test_rows_per_token_and_ratio_to_the_shortest():
    rows = run_scaling(("mamba2", "gated_deltanet"), (96, 48), repeats=1, log=lambda *a: None)
    assert [(r["family"], r["T"]) for r in rows] == [("mamba2", 48), ("mamba2", 96),
                                                      ("gated_deltanet", 48), ("gated_deltanet", 96)]
    for r in rows:
        assert r["us_per_token"] == pytest.approx(1e3 * r["ms"] / r["T"], rel=1e-12)
        assert r["saved_mb"] > 0 and r["mode"] == "fwdbwd" and r["form"] == "chunk"
    for fam in ("mamba2", "gated_deltanet"):
        short, long = (r for r in rows if r["family"] == fam)
        assert short["vs_shortest"] == 1.0
        assert long["vs_shortest"] == pytest.approx(long["us_per_token"] / short["us_per_token"], rel=1e-12)
        assert long["saved_mb"] > short["saved_mb"]  # saved for backward grows with T
    table = markdown_table(rows).splitlines()
    assert table[0] == "| family | form | mode | T=48 | T=96 | longest / shortest |"
    assert table[2].startswith("| mamba2 | chunk | fwdbwd | ")
    assert table[2].endswith(f"| {rows[1]['vs_shortest']:.2f} |")


def test_cli_writes_json_and_refuses_a_preset_without_chunk_form(tmp_path, capsys):
    out = tmp_path / "scaling.json"
    assert main(["bench", "scaling", "--families", "retnet", "--seq-lens", "32", "--repeats", "1",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["family"], r["T"]) for r in rows] == [("retnet", 32)]
    assert main(["bench", "scaling", "--families", "softmax", "--seq-lens", "32"]) == 2
    assert "preset 'softmax' has no chunk form" in capsys.readouterr().err
    assert main(["bench", "scaling", "--families", "retnet", "--seq-lens", "32", "--json", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
