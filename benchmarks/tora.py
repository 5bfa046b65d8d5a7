"""ToRA's loop on the embedded model: our batched, prefix-cached decoding vs transformers' ``generate``
one prompt at a time (what a ToRA loop written on transformers does), and the sandbox vs a bare
subprocess per program.

Same model (SmolLM2-135M-Instruct, float32, one thread), same problems and prompts, greedy;
the answers of the two paths are compared, and the times given as ratios measured in one run.
The official ToRA runs programs with ``exec`` in a process pool (no isolation at all); the
closest isolated peer is a fresh ``python -c`` per program, which is what we compare with.

    python benchmarks/tora.py [n_problems]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

from iclr24.llm import get_model
from iclr24.sandbox import run_python
from iclr24.tora import ToRASolver, gsm_problems


class OnePromptAtATime:
    """The same model without ``generate_batch``: the solver then calls ``generate`` once per prompt."""

    def __init__(self, model) -> None:
        self.model, self.name = model, model.name

    def generate(self, prompt, **kwargs):
        return self.model.generate(prompt, **kwargs)

    def format_chat(self, messages):
        return self.model.format_chat(messages)


def main(n_problems: int = 16) -> None:
    torch.set_num_threads(1)
    llm = get_model()
    questions = [p.question for p in gsm_problems(n_problems, seed=7, steps=(1,))]
    timings, answers = {}, {}
    for label, model in (("transformers generate, one prompt", OnePromptAtATime(llm)), ("ours, batched", llm)):
        start = time.perf_counter()
        trajectories = ToRASolver(model, max_tokens=160).solve_batch(questions)
        timings[label] = time.perf_counter() - start
        answers[label] = [t.answer for t in trajectories]
        tokens = sum(t.completion_tokens for t in trajectories)
        print(f"{label:>36}: {timings[label]:6.1f} s for {n_problems} problems, {tokens / timings[label]:5.1f} "
              f"new tokens/s")
    same = sum(a == b for a, b in zip(*answers.values()))
    print(f"speed-up of the ToRA loop: {timings['transformers generate, one prompt'] / timings['ours, batched']:.2f}x; "
          f"identical answers on {same}/{n_problems} problems")

    program = "x = 1245 * 36\nprint(x)"
    sandbox, bare = [], []
    for _ in range(10):  # interleaved, so both see the same machine load
        start = time.perf_counter()
        run_python(program, timeout_s=5)
        sandbox.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=5, check=True)
        bare.append(time.perf_counter() - start)
    print(f"per program: sandbox {statistics.median(sandbox) * 1e3:.0f} ms, bare subprocess "
          f"{statistics.median(bare) * 1e3:.0f} ms, ratio {statistics.median(sandbox) / statistics.median(bare):.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
