"""Print pip constraints that pin every dependency of pyproject.toml at the lowest version its range
allows (``name>=X`` -> ``name==X``), for ``make test-oldest``. Ranges without a lower bound are
skipped, and so is an extra that names other extras of assocmem (``assocmem[test]``): pass those
extras themselves. Usage: python .ci/lower_bounds.py [EXTRA ...] > oldest.txt"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
for requirement in requirements:
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)", requirement)
    floor = re.search(r">=\s*([0-9][^,;\s]*)", match.group(3))
    if floor:
        print(f"{match.group(1)}=={floor.group(1)}")
