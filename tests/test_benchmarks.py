"""Every script under benchmarks/ answers --help (run against the installed package, no source path)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

SCRIPTS = sorted((ROOT / "benchmarks").glob("*/*.py"))


def test_every_study_has_a_readme_and_the_index_lists_it():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    studies = sorted(p for p in (ROOT / "benchmarks").iterdir() if p.is_dir())
    assert studies and SCRIPTS
    for study in studies:
        assert (study / "README.md").exists(), study.name
        assert f"[{study.name}]({study.name}/)" in index, study.name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_answers_help(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=100,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "usage:" in run.stdout
    assert "sys.path" not in script.read_text(), f"{script.name}: scripts import the installed package"
