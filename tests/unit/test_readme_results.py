"""The README's results are the committed study's, not hand-copied numbers."""

import shutil

from tests.support import REPO_ROOT
from tools.readme_block import END, START, main

FILES = ("README.md", "metrics/test.json", "reports/findings.json", "reports/ranking.csv")


def test_readme_results_match_the_committed_metrics_and_report():
    assert main(["--root", str(REPO_ROOT), "--check"]) == 0


def test_a_hand_edited_number_in_the_readme_fails_the_check(tmp_path):
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    readme = tmp_path / "README.md"
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    block, tail = rest.split(END, 1)
    number = next(w for w in block.split() if w[:1].isdigit() and "." in w)
    readme.write_text(head + START + block.replace(number, "99.99", 1) + END + tail)
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert main(["--root", str(tmp_path)]) == 0  # regenerated: consistent again
    assert main(["--root", str(tmp_path), "--check"]) == 0
