"""L2MAC: Large Language Model Automatic Computer for Extensive Code Generation (Holt, Luyten, van der Schaar,
ICLR 2024).

    from iclr24.llm import get_model
    from iclr24.l2mac import L2MAC, SingleContext
    codebase = L2MAC(get_model(), context_tokens=4096, max_steps=8).run("Write a URL shortener in Flask ...")
    codebase.files.snapshot("out/")            # the file store, written to a folder
    codebase.steps, codebase.final_check         # per-step log; syntax + tests of the result (in the sandbox)

The model writes a plan (the instruction registry); each step runs in a fresh context over a shared
file store, with tool calls checked by the control unit; tests and programs run in iclr24.sandbox.
"""

from iclr24.l2mac.filestore import FileStore
from iclr24.l2mac.l2mac import L2MAC, Codebase, SingleContext, StepLog, detect_cycle
from iclr24.l2mac.simulated import SimulatedCoder
from iclr24.l2mac.tasks import BOOKSHOP, ONE_STEP_TASKS, CodingTask
from iclr24.l2mac.tools import TOOLS, CheckResult, Toolbox, ToolCall, ToolCallError, parse_tool_call

__all__ = ["BOOKSHOP", "L2MAC", "ONE_STEP_TASKS", "TOOLS", "CheckResult", "Codebase", "CodingTask", "FileStore",
           "SimulatedCoder", "SingleContext", "StepLog", "ToolCall", "ToolCallError", "Toolbox", "detect_cycle",
           "parse_tool_call"]
