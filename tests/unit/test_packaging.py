"""pyproject.toml, constraints.txt and environment.yml describe the same environment."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return {_name(r) for r in project["dependencies"] + extras}


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_name(name)] = version
    return pins


def _environment_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        match = re.match(r"\s+-\s+([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            pins[_name(match.group(1))] = match.group(2)
    return pins


def test_environment_yml_lists_exactly_the_pyproject_requirements():
    assert set(_environment_pins()) == _pyproject_requirements()


def test_environment_yml_versions_match_constraints():
    pins = _constraints()
    mismatched = {n: (v, pins.get(n)) for n, v in _environment_pins().items() if pins.get(n, "").split("+")[0] != v}
    assert mismatched == {}, f"environment.yml and constraints.txt disagree: {mismatched}"


def test_every_requirement_is_pinned_and_torch_is_the_local_wheel():
    pins = _constraints()
    assert pins["torch"] == "2.13.0"
    assert _pyproject_requirements() <= set(pins), _pyproject_requirements() - set(pins)


def test_gitignore_keeps_generated_and_private_files_out():
    ignored = set((ROOT / ".gitignore").read_text().split())
    assert {".venv/", "data/", "submitted/", "autograded/", "feedback/", "gradebook.db"} <= ignored


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_no_pin_brings_a_package_that_costs_seconds_at_every_import_of_nbformat():
    """jsonschema 4.24+ imports rfc3987-syntax, which builds Earley parsers at import (5 s of
    every nbgrader run on the 2-core CI machine); constraints.txt pins the jsonschema before it."""
    import importlib.util

    pins = _constraints()
    assert "rfc3987-syntax" not in pins, "rfc3987-syntax is back in constraints.txt"
    major, minor = (int(part) for part in pins["jsonschema"].split(".")[:2])
    assert (major, minor) < (4, 24), f"jsonschema {pins['jsonschema']} imports rfc3987-syntax (5 s per process)"
    assert importlib.util.find_spec("rfc3987_syntax") is None, (
        "rfc3987_syntax is installed in this environment: pip uninstall rfc3987-syntax lark (make setup never installs it)")
