"""Tiny float64 models: every test here runs with one intra-op thread (tests/conftest.py)."""
import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield
