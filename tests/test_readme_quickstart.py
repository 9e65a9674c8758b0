"""The README's quick start runs as written (in a fresh folder, the suite's environment; a fresh venv
with `pip install` of the repository runs the same block)."""
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> str:
    """The first python block under '## Quick start'."""
    section = README.read_text().split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_quick_start_runs_as_written(tmp_path):
    (tmp_path / "quick_start.py").write_text(quick_start())
    done = subprocess.run([sys.executable, "quick_start.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "M_t = α_t M_{t-1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ"
    assert any("form:chunk" in line and line.endswith("ok") for line in lines)
    assert not any(line.endswith("FAILED") for line in lines)
    assert lines[-1] == "True"  # the saved model generates what the original did
    assert (tmp_path / "tiny-hybrid" / "config.json").is_file()
