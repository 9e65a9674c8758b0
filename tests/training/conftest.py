"""Fixtures of the training tests."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from training_helpers import BASE, merge


@pytest.fixture
def write_config(tmp_path):
    """write_config(name, **sections) -> path of a YAML config whose runs go to tmp_path/runs."""
    def _write(name: str, update: dict | None = None) -> Path:
        data = merge(BASE, {"output_dir": str(tmp_path / "runs"), **(update or {})})
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path
    return _write

