"""What the README and docs/ tell a user holds in a clone of this repository: the two commands
come first, every file they link to exists inside it, and no install line names a package no
index serves."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
TEXTS = [REPO / "README.md", *DOCS, REPO / "bench" / "NOTES.md"]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_two_commands_come_first_and_stay_as_they_are() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert sections[0] == "Two commands on a fresh machine", sections
    first = readme.split("## ")[1]
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -qq -e . && .venv/bin/proctor run -- "
        "python3 -c \"print('hello from a supervised run')\" && .venv/bin/proctor runs list"
    ) in first
    assert 'bash .ci/setup.sh && .venv/bin/python -m pytest -m "not gpu"' in first
    assert "contributors" in first  # root and system packages are the contributor's, not the user's


def test_no_install_line_names_a_package_no_index_serves() -> None:
    """proctor is not on any index: `pip install 'proctor[eval]'` fails for every user."""
    wrong = re.compile(r"pip install\s+['\"]?proctor(\[|\s|['\"]|$)")
    hint = re.compile(r"install proctor\[")
    found = []
    for path in [*TEXTS, *sorted((REPO / "src").rglob("*.py"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if wrong.search(line) or hint.search(line):
                found.append(f"{_rel(path)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_linked_file_is_in_the_repository() -> None:
    missing = []
    for path in TEXTS:
        text = path.read_text(encoding="utf-8")
        # Markdown links and images to local files, and any path written to leave the repository.
        targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
        targets += re.findall(r"`(\.\./[^`\s]+)`", text)
        for target in targets:
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            resolved = (path.parent / target).resolve()
            if not resolved.is_relative_to(REPO) or not resolved.exists():
                missing.append(f"{_rel(path)}: {target}")
    assert not missing, "\n".join(missing)


def test_user_docs_hold_no_lab_notes() -> None:
    """Measurements live in bench/NOTES.md; docs/bench.md is a user's reference."""
    bench = (REPO / "docs" / "bench.md").read_text(encoding="utf-8")
    assert len(bench.splitlines()) < 800
    for lab in ("## Capacity", "## Rate (bench/", "### Agreement with", "Measured on the H200"):
        assert lab not in bench, lab
        assert lab.lstrip("#").strip() in (REPO / "bench" / "NOTES.md").read_text(encoding="utf-8")
