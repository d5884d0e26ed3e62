"""The README stays short and true: its set-up commands work, its test command is the one CI runs,
its links lead somewhere, and it carries the peer table of the committed benchmark run."""

import re
import shlex
from pathlib import Path

import onnx
import pytest

from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_SCRIPT = ROOT / ".ci" / "run"
VENV_PREFIX = "python3 -m venv .venv && . .venv/bin/activate && "
MAX_LINES = 160  # two peer tables: torch's default exports and the plain ones
PEER_TOOLS = ("onnxfold", "onnxruntime", "onnxsim", "onnxslim", "onnxscript")


def readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def bash_lines() -> list[str]:
    """The lines inside the README's ```bash blocks."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines()]


def ci_test_command() -> str:
    """The line of .ci/run that follows its comment naming it the README's test command."""
    lines = CI_SCRIPT.read_text(encoding="utf-8").splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("# The README's test command")]
    assert len(marks) == 1, ".ci/run must mark the README's test command with one comment"
    return lines[marks[0] + 1].strip()


def fold_command() -> list[str]:
    """The set-up command that installs and folds the bundled model, from `onnxfold optimize` on."""
    found = [line for line in bash_lines()
             if line.startswith(VENV_PREFIX + "pip install . && onnxfold optimize ")]
    assert len(found) == 1, "README: one set-up command installs and folds the bundled model"
    return shlex.split(found[0].split(" && ")[-1])


def test_readme_is_short():
    assert len(readme_lines()) <= MAX_LINES


def test_test_command_is_the_one_ci_runs():
    command = ci_test_command()
    assert command.startswith("pip install ") and "python -m pytest" in command
    assert VENV_PREFIX + command in bash_lines()


def test_fold_command_folds_the_bundled_model(tmp_path):
    argv = fold_command()
    assert argv[:2] == ["onnxfold", "optimize"] and argv[-2] == "-o"
    model = ROOT / argv[2]
    assert model.is_file(), f"the README folds {argv[2]}, which is not in the repository"
    out = tmp_path / argv[-1]
    proc = run_cli(*argv[1:-1], out, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "nodes" in proc.stdout and out.is_file()
    before, after = onnx.load(str(model)), onnx.load(str(out))
    assert len(after.graph.node) < len(before.graph.node)


def markdown_links(path: Path) -> list[str]:
    """Relative link targets of a markdown file (no URLs, no in-page anchors)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))
    return [t.split("#")[0] for t in targets
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", ["README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_lead_to_files(page):
    path = ROOT / page
    missing = [t for t in markdown_links(path) if not (path.parent / t).exists()]
    assert not missing, f"{page} links to missing files: {missing}"


def test_readme_links_its_docs_pages():
    linked = {t for t in markdown_links(README) if t.startswith("docs/")}
    for page in ("policy.md", "exactness.md", "trust.md", "benchmarks.md", "ARCHITECTURE.md"):
        assert f"docs/{page}" in linked


def test_readme_carries_the_dated_peer_table():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Against", 1)[1].split("\n## ", 1)[0]
    assert "bench/results/peers.md" in section
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", section), "the peer table says when it was run"
    header = next(line for line in section.splitlines() if line.startswith("| model"))
    for tool in PEER_TOOLS:
        assert tool in header
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| model")]
    assert len(rows) >= 3, "the peer table has a row per measured export"
    assert (ROOT / "bench" / "results" / "peers.md").is_file()
