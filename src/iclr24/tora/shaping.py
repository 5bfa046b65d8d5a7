"""Output space shaping (ToRA, Sec. 2.4): widen the set of trajectories a model is trained to imitate.

1. Sample several trajectories per training question from the imitation-learned policy.
2. Keep the valid ones: the answer is correct and every program ran without an error.
3. For each invalid trajectory, let a teacher continue from its prefixes (cut after each round
   of rationale, program and output) and keep the completions that are valid.
4. Drop duplicates and keep at most a few trajectories per question.

The result is a JSONL training corpus (one trajectory a line). Training a model on it is out
of scope here; this is the data side, runnable end to end with small models.

    from iclr24.tora import ToRASolver, shape_outputs
    report = shape_outputs(problems, policy=ToRASolver(small_llm), teacher=ToRASolver(big_llm),
                           n_samples=4, path="corpus.jsonl")
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from iclr24.core.checks import check_int
from iclr24.core.io import write_text_atomic
from iclr24.tora.answers import normalize_answer
from iclr24.tora.data import Problem
from iclr24.tora.solver import ToRASolver, Trajectory, with_output

__all__ = ["ShapingReport", "is_valid", "shape_outputs"]


@dataclass(frozen=True)
class ShapingReport:
    """What the pipeline did: trajectories ``sampled``, of them ``valid``; teacher completions ``tried`` from
    prefixes of invalid ones, of them ``corrected``; ``kept`` records after dedupe and the cap, and the
    questions they cover."""

    sampled: int
    valid: int
    tried: int
    corrected: int
    duplicates: int
    kept: int
    questions_covered: int
    records: list[dict]


def is_valid(trajectory: Trajectory, reference: str) -> bool:
    """Correct final answer, every program ran without error, and the trajectory ended on its own."""
    return (trajectory.is_correct(reference) and all(o.ok for o in trajectory.outputs)
            and trajectory.finish == "answer")


def shape_outputs(problems: Sequence[Problem], policy: ToRASolver, teacher: ToRASolver | None = None, *,
                  n_samples: int = 4, temperature: float = 0.7, max_per_question: int = 4, seed: int = 0,
                  path: str | os.PathLike | None = None) -> ShapingReport:
    """Sample, validate, correct and dedupe trajectories into a training corpus.

    Args:
        problems: training questions with reference answers.
        policy: the solver whose outputs are shaped (sampled at ``temperature``).
        teacher: completes prefixes of invalid trajectories greedily (ToRA: GPT-4 / CodeLLaMA-34B);
            None skips the correction step.
        n_samples: trajectories sampled per question (ToRA: 64).
        max_per_question: trajectories kept per question (ToRA: 4).
        path: where to write the corpus as JSONL (atomically); None writes nothing.
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("max_per_question", max_per_question, minimum=1)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to sample different trajectories, got {temperature!r}")
    problems = list(problems)
    # 1. sample from the policy
    flat = [p for p in problems for _ in range(n_samples)]
    samples = policy.solve_batch([p.question for p in flat], temperature=temperature, seed=seed)
    candidates: list[tuple[Problem, Trajectory, str, int]] = []
    invalid: list[tuple[Problem, Trajectory]] = []
    # 2. keep the valid ones
    for problem, t in zip(flat, samples):
        if is_valid(t, problem.answer):
            candidates.append((problem, t, "policy", 0))
        else:
            invalid.append((problem, t))
    valid = len(candidates)
    # 3. the teacher continues from every round boundary of an invalid trajectory
    tried = corrected = 0
    if teacher is not None and invalid:
        jobs = [(problem, k, _prefix(t, k)) for problem, t in invalid for k in range(len(t.rounds))]
        completions = teacher.solve_batch([p.question for p, _, _ in jobs], prefixes=[x for _, _, x in jobs])
        tried = len(jobs)
        for (problem, k, _), t in zip(jobs, completions):
            if is_valid(t, problem.answer):
                candidates.append((problem, t, "teacher", k))
                corrected += 1
    # 4. dedupe and cap per question
    records, seen, per_question, duplicates = [], set(), {}, 0
    for problem, t, origin, k in candidates:
        key = (problem.question, " ".join(t.solution.split()))
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        if per_question.get(problem.question, 0) >= max_per_question:
            continue
        per_question[problem.question] = per_question.get(problem.question, 0) + 1
        records.append({"question": problem.question, "answer": problem.answer, "solution": t.solution,
                        "pred": normalize_answer(t.answer or ""), "origin": origin, "prefix_rounds": k,
                        "id": problem.id, "source": problem.source})
    if path is not None:
        write_text_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in records))
    return ShapingReport(len(samples), valid, tried, corrected, duplicates, len(records), len(per_question), records)


def _prefix(t: Trajectory, k: int) -> str:
    """The solution after its first ``k`` rounds, each with its program's output, as the policy saw it."""
    return "".join(r.text if r.output is None else with_output(r.text, r.output) for r in t.rounds[:k])
