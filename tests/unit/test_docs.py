"""README is the front door: short, its two commands present, every relative link in it and in docs/ alive.

Plain file reading, no project imports: the README and docs are checked as a newcomer reads them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# [text](target) and ![alt](target); the target ends at the first space or closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path of one machine: where a file lies on the author's machine says nothing to a reader.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|tmp|root|home|Users|mnt|scratch)/")


def _links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
    return LINK.findall(text)


def test_readme_has_at_most_200_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail into docs/ and link it"


def test_readme_has_the_two_commands_and_the_fast_tier():
    text = README.read_text(encoding="utf-8")
    block = "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S))
    assert re.search(r"^\./dev\.sh run\b", block, flags=re.M), "README's command block lacks ./dev.sh run"
    assert re.search(r"^\./dev\.sh test\b", block, flags=re.M), "README's command block lacks ./dev.sh test"
    assert "./dev.sh test --fast" in text


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file(path):
    broken = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a web address or an anchor in the same page
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in _links(README)}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


def test_readme_shows_every_screenshot():
    shots = sorted(p.name for p in (ROOT / "docs" / "screenshots").glob("*.png"))
    assert shots
    linked = {Path(t).name for t in _links(README) if t.startswith("docs/screenshots/")}
    assert set(shots) <= linked, f"screenshots not shown in README.md: {sorted(set(shots) - linked)}"


@pytest.mark.parametrize("name", ["README.md", "BENCHMARKS.md", *[f"docs/{p.name}" for p in DOCS]])
def test_no_machine_specific_paths(name):
    hits = [line.strip()[:120] for line in (ROOT / name).read_text(encoding="utf-8").splitlines() if MACHINE_PATH.search(line)]
    assert not hits, f"{name} names paths of one machine (describe the machine in words instead): {hits}"


def test_bench_prints_its_command_without_this_machines_directories():
    from bench.common import command

    cmd = command("python -m bench", ["--only", "modalities", "--out", "/tmp/m/modalities.md", "--json=/work/x/m.json",
                                      "--set", "a=1"])
    assert cmd == "python -m bench --only modalities --out modalities.md --json=m.json --set a=1"
    assert command("python -m bench", []) == "python -m bench" and not MACHINE_PATH.search(cmd)
