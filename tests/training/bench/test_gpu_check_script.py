"""`.ci/gpu_check.sh` with DEVICE=cpu: the device script's four parts at tiny sizes on this machine, each
leaving its results in $OUT (about a minute: slow)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_gpu_check_runs_every_part_on_cpu(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == ["smoke", "verify", "mixers", "models"]
    assert all(": exit 0 in " in line for line in summary), summary
    assert {p.name for p in tmp_path.iterdir()} == {"gpu_check.log", "summary.txt", "smoke.json", "mixers.json",
                                                   "mixers.md", "models.json", "models.md"}
    assert all(r["status"] == "ok" for r in json.loads((tmp_path / "smoke.json").read_text())["rows"])
    mixers = json.loads((tmp_path / "mixers.json").read_text())
    assert mixers["config"]["naive_fla"] and {r["family"] for r in mixers["rows"]} == {"gated_deltanet", "sca"}
    assert "derived vs form:chunk" in (tmp_path / "gpu_check.log").read_text()  # verify's table
    assert "assocmem from" in (tmp_path / "gpu_check.log").read_text()
