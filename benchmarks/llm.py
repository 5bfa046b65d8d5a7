"""Structured generation's cost: tokens per second with and without a grammar, on the embedded SmolLM2.

The peer a user would otherwise pick is plain ``generate`` (free text, then parse and hope). Both run greedy on the
same chat prompt, one thread, interleaved, best of ``repeats``; the ratio is the grammar engine's overhead (llguidance
computing the token mask each step). Greedy is used so both produce a full JSON answer of similar length.

    python benchmarks/llm.py [repeats]
"""

from __future__ import annotations

import sys
import time

import torch

from iclr24.llm import get_model

SCHEMA = {"type": "object", "properties": {"tool": {"enum": ["read_file", "write_file", "run_tests"]},
                                           "path": {"type": "string", "maxLength": 24}},
          "required": ["tool", "path"], "additionalProperties": False}
FORMATS = {"free text": None,
           "JSON schema": {"type": "json_schema", "json_schema": {"name": "call", "schema": SCHEMA}},
           "regex": {"type": "regex", "pattern": r"(read|write|run) [a-z_]{1,12}\.py"}}
CHAT = [{"role": "user", "content": 'Which tool reads main.py? Reply as JSON like {"tool": ..., "path": ...}.'}]


def tokens_per_second(llm, response_format, max_tokens: int = 32) -> float:
    start = time.perf_counter()
    out = llm.generate(CHAT, max_tokens=max_tokens, response_format=response_format)[0]
    return out.completion_tokens / (time.perf_counter() - start)


def main(repeats: int = 3) -> None:
    torch.set_num_threads(1)
    llm = get_model("embedded")
    llm.generate(CHAT, max_tokens=4)  # warm-up: the weights
    tokens_per_second(llm, FORMATS["JSON schema"])  # and llguidance's tokenizer, built once (~1 s)
    best = dict.fromkeys(FORMATS, 0.0)
    for _ in range(repeats):
        for name, fmt in FORMATS.items():
            best[name] = max(best[name], tokens_per_second(llm, fmt))
    print(f"{'output':14} {'tokens/s':>9} {'vs free text':>13}")
    for name, rate in best.items():
        print(f"{name:14} {rate:9.1f} {rate / best['free text']:12.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
