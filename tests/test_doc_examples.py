"""Issue #61: every ```python block in README.md and docs/*.md runs as written.

Each block runs in a fresh interpreter, in an empty temporary folder, with one torch thread, the package's cache
(``ICLR24_CACHE``) inherited and ``ICLR24_LLM`` dropped, so ``get_model()`` is the embedded model and nothing
reaches the network. The script pads the block with blank lines so that a traceback's line numbers are the page's.
docs/reference/ is generated API reference, not prose, and is not searched.

A block opts out only with an HTML comment (invisible on the rendered site) on the line before its fence:

- ``<!-- example: skip (reason) -->``: not run; the reason is required and names what the block needs that a test
  cannot have (a network server such as an ``openai:`` model, a user-supplied checkpoint).
- ``<!-- example: continues -->``: runs after the page's previous block, in the same script (a page that builds
  one object across several blocks).

Every block is a test of its own, named "page:line" (the fence's line), so a failure points at the page. A block
that makes one of the calls in ``SLOW`` runs only with ``-m slow``; every page keeps a block that runs by default.
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # glob does not descend into docs/reference
# One torch thread (OMP_NUM_THREADS covers the intra-op pool only when torch reads it first); on the page's line 1,
# which is always its own (a fence comes first).
PREAMBLE = "import torch; torch.set_num_threads(1)"
TIMEOUT_S = 300  # a block takes under a minute on a 2-core machine; the timeout only ends a hung one
# Blocks that cost much for what they add run only with ``-m slow``: the library call is tested elsewhere, and the
# page has a faster block that runs by default (checked below). Keyed by a call the block makes.
SLOW = {"run_flower_simulation(": "starts a Ray cluster (~45 s of wall clock); tests/federated/test_flower.py "
                                  "runs Flower by default"}

FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip(?:\s*\((.*)\))?$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # the opening fence's line, 1-based
    code: str
    skip: str | None = None  # the reason, "" when the directive gave none
    continues: bool = False

    @property
    def id(self) -> str:
        page = self.page.relative_to(ROOT).as_posix() if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.line}"

    @property
    def slow(self) -> bool:
        return any(call in self.code for call in SLOW)


def _directive(lines: list[str], fence: int, page: Path) -> tuple[str | None, bool]:
    """(skip reason or None, continues) from the comment on the line before ``fence`` (0-based)."""
    if fence == 0:
        return None, False
    match = DIRECTIVE.match(lines[fence - 1])
    if match is None:
        return None, False
    text = match.group(1)
    if text == "continues":
        return None, True
    skip = SKIP.match(text)
    if skip is None:
        raise ValueError(f"{page.name}:{fence}: unknown example directive {text!r} "
                         "(expected 'skip (reason)' or 'continues')")
    return (skip.group(1) or "").strip(), False


def extract(page: Path) -> list[Example]:
    """The page's ```python blocks, in order; a fence inside a list item is dedented by its own indent."""
    lines = page.read_text(encoding="utf-8").splitlines()
    examples, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, language = opening.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page.name}:{i + 1}: a fence that is never closed")
        if language == "python":
            body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
            skip, continues = _directive(lines, i, page)
            examples.append(Example(page, i + 1, "\n".join(body), skip, continues))
        i = end + 1
    return examples


EXAMPLES = [example for page in PAGES for example in extract(page)]


def script(example: Example, examples: list[Example] = EXAMPLES) -> str:
    """The example, after the blocks it continues, each at its own lines of the page."""
    chain = [example]
    same_page = [e for e in examples if e.page == example.page]
    while chain[0].continues:
        earlier = [e for e in same_page if e.line < chain[0].line]
        assert earlier, f"{chain[0].id} continues, but no block comes before it on its page"
        chain.insert(0, earlier[-1])
    lines = [PREAMBLE]
    for block in chain:
        assert block.skip is None, f"{example.id} continues {block.id}, which is skipped: skip it too"
        lines += [""] * (block.line - len(lines))  # the block's first line is the page's line block.line + 1
        lines += block.code.splitlines()
    return "\n".join(lines) + "\n"


def test_every_page_is_searched_and_every_skip_says_why():
    pages = {e.page.relative_to(ROOT).as_posix() for e in EXAMPLES}
    assert "README.md" in pages and "docs/tora.md" in pages and len(EXAMPLES) >= 30
    assert not any("reference" in page for page in pages)
    for example in EXAMPLES:
        if example.skip is not None:
            # A reason names what the block needs that a test cannot have, in a few words at least.
            assert len(example.skip.split()) >= 3, f"{example.id}: '<!-- example: skip -->' needs a (reason)"
    # Every page with examples runs at least one of them by default.
    for page in pages:
        assert any(e.skip is None and not e.slow for e in EXAMPLES if e.page.relative_to(ROOT).as_posix() == page), page


def test_directives_are_parsed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```python\na = 1\n```\n<!-- example: continues -->\n```python\nprint(a)\n```\n"
                    "<!-- example: skip (needs an openai: server) -->\n```python\nb\n```\n```bash\nls\n```\n"
                    "- item\n\n  ```python\n  c = 2\n  ```\n")
    first, second, third, fourth = extract(page)
    assert (first.line, first.code, first.skip, first.continues) == (2, "a = 1", None, False)
    assert (second.line, second.continues) == (6, True)
    assert third.skip == "needs an openai: server"
    assert (fourth.line, fourth.code) == (18, "c = 2")
    # A continuing block runs after the one before it, each line at its page line (tracebacks point at the page).
    lines = script(second, [first, second, third, fourth]).splitlines()
    assert lines[0] == PREAMBLE and (lines[2], lines[6]) == ("a = 1", "print(a)") and len(lines) == 7
    with pytest.raises(AssertionError, match="which is skipped"):
        script(Example(page, 14, "b", continues=True), [third, Example(page, 14, "b", continues=True)])

    page.write_text("<!-- example: skipp -->\n```python\na\n```\n")
    with pytest.raises(ValueError, match="unknown example directive"):
        extract(page)


def _marks(example: Example) -> list:
    if example.skip is not None:
        return [pytest.mark.skip(reason=example.skip)]
    return [pytest.mark.slow] if example.slow else []


@pytest.mark.parametrize("example", [pytest.param(e, id=e.id, marks=_marks(e)) for e in EXAMPLES])
def test_example_runs(example, tmp_path):
    path = tmp_path / (example.page.relative_to(ROOT).as_posix().replace("/", "_").replace(".", "_") + ".py")
    path.write_text(script(example), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "ICLR24_LLM"}
    # The hub's offline switches make a download attempt an error here instead of a silent network call.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, path.name], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, (f"{example.id} failed (line numbers are the page's):\n"
                                  f"{proc.stderr[-4000:]}\n--- stdout ---\n{proc.stdout[-2000:]}")
