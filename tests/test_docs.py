"""README.md and docs/: README stays a guide and the pages stay connected.

- README.md has at most 300 lines, and its only dates (YYYY-MM-DD) stand in its
  "Latest figures" section: dated measurements live in docs/measurements.md.
- Every relative link of README.md and docs/*.md (``[text](target)`` and
  ``![alt](target)``) names a file that exists, and its ``#anchor``, if any, a
  heading of the target (GitHub's slugs). Links to http(s) and mailto are not
  checked.
- Every entry of docs/measurements.md (each ``##`` heading) names a date and a
  commit, and the entries run newest first.
- No date and no commit in the library's source or the params files: a figure
  that needs one is an entry of docs/measurements.md, and the comment points there.

Each check is a function of a folder that returns its problems; the tests run it
on this repository and on a small copy broken on purpose, to show it can fail.
Standard library and pytest only.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
LATEST_FIGURES = "Latest figures"
MEASUREMENTS = "docs/measurements.md"

DATE = re.compile(r"(?<![\w-])(\d{4}-\d{2}-\d{2})(?![\w-])")
COMMIT = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
# [text](target) or ![alt](target), the text possibly wrapped over lines, an
# optional "title" after the target.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
EXTERNAL = ("http://", "https://", "mailto:")


def documents(root: Path) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
            if p.exists()]


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text with fenced code blocks blanked (line
    numbers stay), so a ``# comment`` in a shell block is no heading."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line number from 1, level, title) of every heading outside code blocks."""
    return [(i, len(m.group(1)), m.group(2))
            for i, line in enumerate(prose_lines(text), 1)
            if (m := HEADING.match(line))]


def slug(title: str) -> str:
    """GitHub's anchor of a heading: links reduced to their text, lower case,
    punctuation dropped except hyphens (and underscores, which are word
    characters), spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated slug gets -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for _, _, title in headings(path.read_text(encoding="utf-8")):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code blocks and code spans."""
    text = "\n".join(prose_lines(path.read_text(encoding="utf-8")))
    return LINK.findall(INLINE_CODE.sub("", text))


def broken_links(root: Path) -> list[str]:
    """Relative links of README.md and docs/*.md whose file or anchor is missing."""
    problems = []
    for doc in documents(root):
        name = doc.relative_to(root).as_posix()
        for target in links(doc):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                problems.append(f"{name}: link to {target}: no file {file_part}")
                continue
            if not anchor:
                continue
            if dest.suffix != ".md" or dest.is_dir():
                problems.append(f"{name}: link to {target}: an anchor into a file "
                                "that has no headings")
            elif anchor not in anchors(dest):
                problems.append(f"{name}: link to {target}: no heading with the "
                                f"anchor #{anchor} in {file_part or name}")
    return problems


def readme_too_long(root: Path) -> list[str]:
    n = len((root / "README.md").read_text(encoding="utf-8").splitlines())
    return [f"README.md has {n} lines, more than {README_MAX_LINES}"] \
        if n > README_MAX_LINES else []


def dates_outside_latest_figures(root: Path) -> list[str]:
    """Dates in README.md outside its "Latest figures" section (the section
    runs from that heading to the next heading of the same or a higher level)."""
    text = (root / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    inside: set[int] = set()
    marks = headings(text)
    for k, (line, level, title) in enumerate(marks):
        if title.strip() == LATEST_FIGURES:
            end = next((ln for ln, lv, _ in marks[k + 1:] if lv <= level), len(lines) + 1)
            inside.update(range(line, end))
    problems = [f"README.md:{i}: a date ({', '.join(DATE.findall(line))}) outside the "
                f'"{LATEST_FIGURES}" section: dated measurements go in {MEASUREMENTS}'
                for i, line in enumerate(lines, 1)
                if i not in inside and DATE.search(line)]
    if not inside:
        problems.append(f'README.md has no "{LATEST_FIGURES}" section')
    return problems


def measurement_entry_problems(root: Path) -> list[str]:
    """Each ``##`` entry of docs/measurements.md names a date and a commit; the
    entries run newest first (the latest date a heading names decides)."""
    path = root / MEASUREMENTS
    if not path.exists():
        return [f"no {MEASUREMENTS}"]
    problems, previous = [], None
    entries = [(line, title) for line, level, title
               in headings(path.read_text(encoding="utf-8")) if level == 2]
    if not entries:
        problems.append(f"{MEASUREMENTS} has no entries (## headings)")
    for line, title in entries:
        dates = DATE.findall(title)
        if not dates:
            problems.append(f"{MEASUREMENTS}:{line}: entry without a date: {title}")
        if not COMMIT.search(title):
            problems.append(f"{MEASUREMENTS}:{line}: entry without a commit: {title}")
        if dates:
            newest = max(dates)
            if previous is not None and newest > previous:
                problems.append(f"{MEASUREMENTS}:{line}: entry of {newest} after one of "
                                f"{previous}: newest first")
            previous = newest
    return problems


PLACEHOLDER = re.compile(r"\b(TBD|TODO|FIXME|XXX)\b|_TBD\b")


def placeholders(root: Path) -> list[str]:
    """A figure or sentence left to fill in (TBD, TODO...) in README or docs/."""
    return [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in documents(root)
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if PLACEHOLDER.search(line)]


# A commit in source: 7 to 40 hex digits with a letter and a digit among them
# (a plain number is no commit).
SOURCE_COMMIT = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])")


def dated_source(root: Path) -> list[str]:
    """A date or a commit in fwcompare/**.py or params/**.yaml: it belongs in
    docs/measurements.md, which the comment names instead."""
    files = sorted([*root.glob("fwcompare/**/*.py"), *root.glob("params/**/*.yaml")])
    return [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if DATE.search(line) or SOURCE_COMMIT.search(line)]


CHECKS = (broken_links, readme_too_long, dates_outside_latest_figures,
          measurement_entry_problems, placeholders, dated_source)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_repository(check):
    assert check(ROOT) == []


def test_readme_links_into_every_docs_page():
    linked = {t.partition("#")[0] for t in links(ROOT / "README.md")}
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set()


# A small repository that passes every check, then broken one way at a time.

GOOD_README = """# Tool

Read [the method](docs/method.md#how-it-times), [its runs](docs/measurements.md),
and [this page's end](#latest-figures). ![The report](docs/pic.png)
```bash
# a shell comment, not a heading; [no link](missing.md) in code
```
Some `[code](missing.md)` too.

## Latest figures

The report of 2026-11-25 (commit abc1234) took 20 minutes.
"""
GOOD_METHOD = """# Method

## How it times

Blocks of calls. See [the runs](measurements.md#2026-11-25-quick-report-commit-abc1234)
and the [duplicate](#step) [headings](#step-1).

### Step

### Step
"""
GOOD_MEASUREMENTS = """# Measurements

Newest first.

## 2026-11-25, quick report, commit abc1234

20 minutes.

## 2026-11-24, test suite, commits 1234abc and def5678

12 minutes.
"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(GOOD_README)
    (tmp_path / "docs" / "method.md").write_text(GOOD_METHOD)
    (tmp_path / "docs" / "measurements.md").write_text(GOOD_MEASUREMENTS)
    (tmp_path / "docs" / "pic.png").write_bytes(b"\x89PNG\r\n")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_every_check_passes_on_the_small_copy(tiny):
    assert [p for check in CHECKS for p in check(tiny)] == []


def test_slugs_follow_githubs_rule():
    assert slug("Harness fidelity (benchmarks/)") == "harness-fidelity-benchmarks"
    assert slug("`fwcompare compare`: two runs") == "fwcompare-compare-two-runs"
    assert slug("2026-11-25, quick report, commit abc1234") == \
        "2026-11-25-quick-report-commit-abc1234"
    assert slug("See [the runs](x.md) here") == "see-the-runs-here"


@pytest.mark.parametrize("old,new,expected", [
    ("docs/method.md#how", "docs/methods.md#how", "no file docs/methods.md"),
    ("#how-it-times", "#how-it-counts", "no heading with the anchor #how-it-counts"),
    ("(#latest-figures)", "(#latest)", "no heading with the anchor #latest"),
    ("docs/pic.png)", "docs/picture.png)", "no file docs/picture.png"),
    ("![The report](docs/pic.png)", "![The report](docs/pic.png#top)", "has no headings"),
])
def test_broken_links_are_found(tiny, old, new, expected):
    _edit(tiny / "README.md", old, new)
    problems = broken_links(tiny)
    assert len(problems) == 1 and expected in problems[0]


def test_a_broken_link_in_a_docs_page_and_a_missing_duplicate_are_found(tiny):
    _edit(tiny / "docs" / "method.md", "(#step-1)", "(#step-2)")
    _edit(tiny / "docs" / "method.md", "commit-abc1234)", "commit-abc9999)")
    problems = broken_links(tiny)
    assert len(problems) == 2 and all(p.startswith("docs/method.md") for p in problems)


def test_a_wrapped_link_text_is_still_a_link(tiny):
    _edit(tiny / "README.md", "[the method](docs/method.md#how-it-times)",
          "[the\nmethod](docs/nothing.md)")
    assert broken_links(tiny) == ["README.md: link to docs/nothing.md: no file docs/nothing.md"]


def test_a_long_readme_is_found(tiny):
    _edit(tiny / "README.md", "Some ", "line\n" * README_MAX_LINES)
    assert "more than 300" in readme_too_long(tiny)[0]


def test_a_date_outside_latest_figures_is_found(tiny):
    _edit(tiny / "README.md", "Some ", "Measured on 2026-11-24: 5 s. Some ")
    problems = dates_outside_latest_figures(tiny)
    assert len(problems) == 1 and "README.md:8" in problems[0]


def test_a_date_after_latest_figures_is_found(tiny):
    path = tiny / "README.md"
    path.write_text(path.read_text() + "\n## Licence\n\nSince 2026-01-01.\n")
    assert len(dates_outside_latest_figures(tiny)) == 1


def test_a_readme_without_latest_figures_is_found(tiny):
    _edit(tiny / "README.md", "## Latest figures", "## Figures")
    problems = dates_outside_latest_figures(tiny)
    assert any("no \"Latest figures\"" in p for p in problems)


@pytest.mark.parametrize("old,new,expected", [
    ("## 2026-11-24, test suite, commits 1234abc and def5678", "## 2026-11-24, test suite",
     "without a commit"),
    ("## 2026-11-24, test suite", "## The test suite", "without a date"),
    ("## 2026-11-24, test suite", "## 2026-11-26, test suite", "newest first"),
])
def test_bad_measurement_entries_are_found(tiny, old, new, expected):
    _edit(tiny / "docs" / "measurements.md", old, new)
    problems = measurement_entry_problems(tiny)
    assert len(problems) == 1 and expected in problems[0]


def test_a_placeholder_is_found(tiny):
    _edit(tiny / "README.md", "took 20 minutes", "took INSTALL_TIME_TBD")
    assert placeholders(tiny) == ["README.md:12: The report of 2026-11-25 (commit abc1234) "
                                  "took INSTALL_TIME_TBD."]


def test_a_date_or_a_commit_in_source_is_found(tiny):
    (tiny / "fwcompare").mkdir()
    (tiny / "fwcompare" / "a.py").write_text("X = 1  # 0x1f2e3d4c, 1234567 and 1e-8 are none\n"
                                              "Y = 2  # 4.2 s (2-core EPYC, 2026-11-25)\n")
    (tiny / "params" / "s").mkdir(parents=True)
    (tiny / "params" / "s" / "quick.yaml").write_text("max_time_s: 1.0  # was 2.0 before e7dacd5\n")
    assert dated_source(tiny) == ["fwcompare/a.py:2: Y = 2  # 4.2 s (2-core EPYC, 2026-11-25)",
                                  "params/s/quick.yaml:1: max_time_s: 1.0  # was 2.0 before e7dacd5"]
