"""ToRA: tool-integrated reasoning for mathematical problem solving.

Zhibin Gou, Zhihong Shao, Yeyun Gong, Yelong Shen, Yujiu Yang, Minlie Huang, Nan Duan, Weizhu
Chen. "ToRA: A Tool-Integrated Reasoning Agent for Mathematical Problem Solving". ICLR 2024.
https://arxiv.org/abs/2309.17452

    from iclr24.llm import get_model
    from iclr24.tora import ToRASolver, gsm_problems
    solver = ToRASolver(get_model(), prompt="gsm")       # programs run in iclr24.sandbox
    problems = gsm_problems(8, seed=0)
    trajectories = solver.solve_batch([p.question for p in problems])
    accuracy = sum(t.is_correct(p.answer) for t, p in zip(trajectories, problems)) / len(problems)
"""

from iclr24.tora.answers import EXTRACTION_MODES, extract_answer, find_boxed, is_equivalent, normalize_answer, to_number
from iclr24.tora.data import Problem, gsm_problems, load_champ, load_gsm8k, load_jsonl, load_math
from iclr24.tora.executor import Executor, SandboxExecutor, ToolOutput, extract_program, truncate_output
from iclr24.tora.prompts import EXAMPLES, WorkedExample, build_messages, build_prompt, tora_model_prompt
from iclr24.tora.shaping import ShapingReport, is_valid, shape_outputs
from iclr24.tora.solver import (
    CoTSolver,
    DirectSolver,
    PALSolver,
    Round,
    ToRASolver,
    Trajectory,
    Vote,
    majority_vote,
)

__all__ = [
    "EXAMPLES",
    "EXTRACTION_MODES",
    "CoTSolver",
    "DirectSolver",
    "Executor",
    "PALSolver",
    "Problem",
    "Round",
    "SandboxExecutor",
    "ShapingReport",
    "ToRASolver",
    "ToolOutput",
    "Trajectory",
    "Vote",
    "WorkedExample",
    "build_messages",
    "build_prompt",
    "extract_answer",
    "extract_program",
    "find_boxed",
    "gsm_problems",
    "is_equivalent",
    "is_valid",
    "load_champ",
    "load_gsm8k",
    "load_jsonl",
    "load_math",
    "majority_vote",
    "normalize_answer",
    "shape_outputs",
    "to_number",
    "tora_model_prompt",
    "truncate_output",
]
