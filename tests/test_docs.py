"""The documentation: the site builds strict (a broken link or anchor fails), the README's links
resolve, and the layout table names every package that exists and nothing that does not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "architecture.md"


def test_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links to the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def _layout_rows() -> dict[str, str]:
    rows = re.findall(r"^\| `([^`]+)/` \| (.+) \|$", LAYOUT.read_text(), flags=re.MULTILINE)
    return dict(rows)


def test_layout_table_matches_the_tree() -> None:
    rows = _layout_rows()
    missing = [folder for folder in rows if not (ROOT / folder).is_dir()]
    assert not missing, f"the layout table names folders that do not exist: {missing}"
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    unlisted = [name for name in packages if name not in rows]
    assert not unlisted, f"top-level packages missing from the layout table: {unlisted}"
    for folder, text in rows.items():
        for sub in re.findall(r"`([a-z_]+)/`", text):
            assert (ROOT / folder / sub).is_dir(), f"{folder}/ row names {sub}/, not in the tree"
