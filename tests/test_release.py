"""The version scheme of docs/sharing.md: pyproject's version has a CHANGELOG section, and the
installed package reports a version of that form."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def _project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_is_major_minor_patch():
    assert SEMVER.match(_project_version()), _project_version()


def test_changelog_has_a_section_for_the_version_and_its_sections_descend():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (\S+)", text, flags=re.M)
    assert sections and sections[0] == _project_version(), (sections[:1], _project_version())
    as_tuples = [tuple(int(p) for p in s.split(".")) for s in sections]
    assert all(SEMVER.match(s) for s in sections), sections
    assert as_tuples == sorted(as_tuples, reverse=True) and len(set(as_tuples)) == len(as_tuples), sections


def test_installed_version_matches_pyproject():
    import assocmem

    assert assocmem.__version__ == _project_version(), (
        f"installed metadata says {assocmem.__version__}, pyproject.toml {_project_version()}: reinstall (make setup)")
