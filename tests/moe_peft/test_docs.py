"""Every Python block of docs/moe_peft.md runs as written, each on its own (#61: a block used names it never
defined and asked a Llama wrapper for a T5 site)."""

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "moe_peft.md"


def blocks() -> list[str]:
    if not DOC.is_file():
        return []
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_page_has_blocks():
    if not DOC.is_file():
        pytest.skip("docs/ is not beside the tests (an installed package)")
    assert len(blocks()) >= 4


@pytest.mark.parametrize("index", range(len(blocks())))
def test_each_block_runs_by_itself(index, capsys):
    source = blocks()[index]
    if "transformers" in source:
        pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    state = torch.random.get_rng_state()
    try:
        exec(compile(source, f"{DOC.name} block {index + 1}", "exec"), {"__name__": f"moe_peft_doc_{index}"})
    finally:
        torch.random.set_rng_state(state)
    printed = capsys.readouterr().out
    if "print_trainable_parameters()   # trainable params:" in source:  # the count the comment shows
        shown = re.search(r"print_trainable_parameters\(\)\s+# (trainable params: .*)", source).group(1)
        assert printed.splitlines()[0] == shown
