"""Every code block of README.md runs (issue 57: a README line read ``spec.budget.pulls`` after the
attribute had become ``draft_budget``, and nothing noticed).

Python blocks run as written, one namespace each; a block that loads a model is marked ``model``
(Gemma, run in CI). The vLLM block needs vLLM: it is skipped here and run by ``.ci/vllm_env`` in
the vLLM environment (``-k vllm``). Bash blocks: the lines that run
``trellis`` commands run through the installed command line (the install commands are what CI
itself runs); the ``text`` synopsis is not code.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = [(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1)
          for m in re.finditer(r"^```(\w+)\n(.*?)^```$", README, flags=re.M | re.S)]
MODEL = re.compile(r"\bload\(|generate\(None|\bsolve\(")


def _python_blocks():
    for lang, code, line in BLOCKS:
        if lang != "python":
            continue
        marks = [pytest.mark.model, pytest.mark.slow] if MODEL.search(code) else []
        vllm = "from vllm import" in code
        if vllm and importlib.util.find_spec("vllm") is None:
            marks.append(pytest.mark.skip(reason="needs vLLM: .ci/vllm_env runs it in the vLLM environment"))
        yield pytest.param(code, id=f"README.md:{line}" + ("-vllm" if vllm else ""), marks=marks)


def _cli_lines():
    for lang, code, line in BLOCKS:
        if lang != "bash":
            continue
        for i, cmd in enumerate(code.splitlines()):
            if cmd.startswith("trellis "):
                yield pytest.param(cmd, id=f"README.md:{line + 1 + i}", marks=[pytest.mark.model, pytest.mark.slow])


def test_the_readme_has_blocks_to_run():
    assert sum(1 for lang, _, _ in BLOCKS if lang == "python") >= 8
    assert any(lang == "bash" and "trellis generate" in code for lang, code, _ in BLOCKS)


@pytest.mark.parametrize("code", list(_python_blocks()))
def test_python_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    exec(compile(code, "README.md", "exec", dont_inherit=True), {"__name__": "readme_block"})


@pytest.mark.parametrize("cmd", list(_cli_lines()))
def test_cli_line_runs(cmd, tmp_path):
    argv = shlex.split(cmd)
    r = subprocess.run([sys.executable, "-m", "trellis", *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                       timeout=900, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip(), r.stderr[-2000:]
    if "--include Paris" in cmd:
        assert "Paris" in r.stdout, r.stdout  # the MCTS example's reward is the phrase's presence
