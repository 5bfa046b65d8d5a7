"""L2MAC's control loop with scripted models: feedback, overflow, limits, cycles, the plan; the simulated coder
and the bookshop task's own integrity."""

import json
import re
import sys
import types
from dataclasses import replace

import pytest

from iclr24.l2mac import BOOKSHOP, L2MAC, SimulatedCoder, SingleContext, detect_cycle, prompts
from iclr24.l2mac.evaluate import features_percent
from iclr24.l2mac.simulated import render_module, render_tests
from iclr24.l2mac.tools import tool_call_text
from iclr24.llm import get_model
from iclr24.llm.scripted import ScriptedModel

BUGGY = "def f(x):\n    return x + 1\n"
FIXED = "def f(x):\n    return 2 * x\n"
TEST = "from lib import f\n\ndef test_f():\n    assert f(3) == 6\n"


def agent(on_failure=True, big=""):
    """A scripted model that writes lib.py with a bug, and fixes it only when a failed check names test_f."""
    def reply(messages, _):
        last = messages[-1]["content"]
        if "with write_plan" in last:
            return tool_call_text("write_plan", steps=["Write lib.py with f(x) = 2x and its test."])
        if prompts.SUMMARISE in last:
            return "lib.py has f and its test."
        if prompts.OVERFLOW in last:
            return "SUMMARY-7: big.py is written; lib.py is next."
        if on_failure and "FAILED test_lib.py::test_f" in last:
            return tool_call_text("write_files", files=[{"path": "lib.py", "contents": FIXED}])
        files = re.findall(r"Files(?: so far)?: (\[[^\]]*\])", last)[-1]
        if big and "big.py" not in files:
            return tool_call_text("write_files", files=[{"path": "big.py", "contents": big}])
        if "lib.py" not in files:
            return tool_call_text("write_files", files=[{"path": "lib.py", "contents": BUGGY},
                                                       {"path": "test_lib.py", "contents": TEST}])
        return tool_call_text("step_complete")
    return ScriptedModel(reply)


def test_a_failing_test_is_fed_back_and_fixed():
    llm = agent()
    codebase = L2MAC(llm, context_tokens=8000).run("Write lib.py.")
    step = codebase.steps[0]
    assert (step.status, step.summary) == ("complete", "lib.py has f and its test.")
    assert codebase.files["lib.py"] == FIXED and codebase.final_check.passed
    fix_prompt = next(c["prompt"] for c in llm.calls if "FAILED test_lib.py::test_f" in c["prompt"][-1]["content"])
    assert "assert 4 == 6" in fix_prompt[-1]["content"]  # pytest's own words reach the model
    assert fix_prompt[-1]["content"].startswith("Result of write_files:\nwrote lib.py, test_lib.py\nTest run results")


def test_without_feedback_the_bug_stays():
    codebase = L2MAC(agent(on_failure=False), context_tokens=8000, max_calls_per_step=6).run("Write lib.py.")
    assert codebase.steps[0].status == "call_limit" and codebase.steps[0].failed_checks >= 2
    assert codebase.files["lib.py"] == BUGGY and not codebase.final_check.passed
    unchecked = L2MAC(agent(on_failure=False), context_tokens=8000, enable_tests=False).run("Write lib.py.")
    assert unchecked.steps[0].status == "complete" and not unchecked.final_check.passed


def test_overflow_restarts_the_step_with_its_goal_and_the_summary():
    llm = agent(big="# padding\n" * 150)  # 1,500 characters: the step's context overflows after writing it
    codebase = L2MAC(llm, context_tokens=3200, reply_tokens=2000).run("Write lib.py.")
    step = codebase.steps[0]
    assert step.status == "complete" and step.overflows == 1
    asked = [i for i, c in enumerate(llm.calls) if c["prompt"][-1]["content"] == prompts.OVERFLOW]
    assert len(asked) == 1
    restart = llm.calls[asked[0] + 1]["prompt"]
    assert len(restart) == 3  # system, task, and the step's opening: the old exchanges are gone
    assert "Write lib.py with f(x) = 2x" in restart[-1]["content"]
    assert "SUMMARY-7: big.py is written" in restart[-1]["content"]
    assert all(codebase_call["context_tokens"] <= 3200 for codebase_call in codebase.trace)


def test_the_loop_stops_at_its_limits():
    many = ScriptedModel(lambda messages, _: tool_call_text("write_plan", steps=[f"step {i}" for i in range(9)])
                         if "with write_plan" in messages[-1]["content"] else tool_call_text("list_files"))
    codebase = L2MAC(many, context_tokens=20000, max_steps=2, max_calls_per_step=3).run("Do things.")
    assert codebase.plan == ["step 0", "step 1"]
    assert [s.status for s in codebase.steps] == ["call_limit", "call_limit"]
    assert [s.calls for s in codebase.steps] == [3, 3] and codebase.llm_calls == 1 + 6


def test_a_repeating_conversation_raises_the_temperature():
    llm = ScriptedModel(lambda messages, _: tool_call_text("write_plan", steps=["one"])
                        if "with write_plan" in messages[-1]["content"] else tool_call_text("list_files"))
    L2MAC(llm, context_tokens=20000, max_calls_per_step=6).run("Do it.")
    temperatures = [c["temperature"] for c in llm.calls[1:]]
    assert temperatures[:2] == [0.0, 0.0] and max(temperatures) == 1.0
    assert temperatures[2] == pytest.approx(0.4) and temperatures[3] == pytest.approx(0.8)


def test_detect_cycle():
    assert detect_cycle(["a", "b", "a", "b"]) and detect_cycle(list("xabcabc"))
    assert not detect_cycle(["a", "b", "c", "a"]) and not detect_cycle(["a", "a"])


def test_a_plan_is_repaired_once_then_the_task_is_the_one_step():
    garbage = ScriptedModel(["no plan here", "still none", tool_call_text("step_complete"), "done"])
    codebase = L2MAC(garbage, context_tokens=20000).run("Write x.")
    assert codebase.plan == ["The task:\nWrite x."] and codebase.steps[0].status == "complete"
    assert "not a valid tool call" in garbage.calls[1]["prompt"][-1]["content"]
    repaired = ScriptedModel(["oops", tool_call_text("write_plan", steps=["a"]), tool_call_text("step_complete"),
                              "done"])
    assert L2MAC(repaired, context_tokens=20000).run("Write x.").plan == ["a"]


def test_a_reply_cut_at_the_context_limit_is_not_repaired_into_a_write():
    cut = tool_call_text("write_files", files=[{"path": "a.py", "contents": "x = 1\n" * 400}])
    llm = ScriptedModel(lambda messages, i: tool_call_text("write_plan", steps=["a"]) if i == 0 else cut)
    codebase = L2MAC(llm, context_tokens=2600, reply_tokens=2000, max_calls_per_step=2,
                     max_retries_per_step=0).run("Write a.py.")
    assert codebase.steps[0].parse_failures >= 1 and "a.py" not in codebase.files   # free: may be anything
    assert codebase.steps[0].cut_replies == 0
    # under a grammar the cut reply is a valid prefix: unfinished, not malformed, and counted apart
    bare = {"tool": "write_files", "arguments": {"files": [{"path": "a.py", "contents": "x = 1\n" * 400}]}}
    llm = get_model("scripted", outputs=lambda messages, i: json.dumps({"tool": "write_plan", "arguments": {
        "steps": ["a"]}}) if i == 0 else json.dumps(bare), grammar=True)
    codebase = L2MAC(llm, context_tokens=2600, reply_tokens=2000, max_calls_per_step=2,
                     max_retries_per_step=0).run("Write a.py.")
    assert codebase.steps[0].cut_replies >= 1 and codebase.steps[0].parse_failures == 0
    assert "a.py" not in codebase.files


@pytest.mark.parametrize("kwargs, match", [({"context_tokens": 100}, "context_tokens must be >= 256"),
                                           ({"reply_tokens": 8}, "reply_tokens must be >= 64"),
                                           ({"max_steps": 0}, "max_steps must be >= 1"),
                                           ({"timeout_s": 0}, "timeout_s must be finite and > 0")])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L2MAC(agent(), **kwargs)
    with pytest.raises(ValueError, match="task must be a non-empty str"):
        L2MAC(agent()).run("  ")


# --- the simulated coder on the bookshop task -----------------------------------------------------

def two_modules():
    modules = BOOKSHOP.modules[:2]
    kept = [f"test_hidden_{m.name}" for m in modules]  # scored by their call scripts (hidden_cases)
    return replace(BOOKSHOP, modules=modules, hidden_tests={name: BOOKSHOP.hidden_tests[name] for name in kept},
                   hidden_cases={name: BOOKSHOP.hidden_cases[name] for name in kept})


def test_l2mac_fixes_every_injected_bug_and_the_baseline_runs_out_of_context():
    task = two_modules()
    coder = SimulatedCoder(task, bug_rate=1.0, seed=0)
    codebase = L2MAC(coder, context_tokens=1280).run(task.spec)
    assert codebase.steps_completed == 2 and coder.bugs_injected == coder.bugs_fixed == 6
    assert features_percent(dict(codebase.files), task).percent == 100.0
    single = SingleContext(SimulatedCoder(task, bug_rate=1.0, seed=0), context_tokens=1280).run(task.spec)
    assert single.steps[0].status == "context_full" and len(single.files) < len(codebase.files)
    json.dumps(codebase.to_dict())


def test_bookshop_reference_passes_and_every_bug_is_caught():
    """Each function's bug fails its own visible test and at least one hidden test; the reference fails none."""
    def failures(buggy: set[str], tests: dict[str, str]) -> set[str]:
        saved = {name: sys.modules.get(name) for name in [m.name[:-3] for m in BOOKSHOP.modules]}
        try:
            for module in BOOKSHOP.modules:  # dependency order: each imports only earlier ones
                mod = types.ModuleType(module.name[:-3])
                exec(compile(render_module(module, buggy), module.name, "exec"), mod.__dict__)
                sys.modules[mod.__name__] = mod
            failed = set()
            for file, source in tests.items():
                namespace = {}
                exec(compile(source, file, "exec"), namespace)
                for name, fn in namespace.items():
                    if name.startswith("test_") and callable(fn):
                        try:
                            fn()
                        except BaseException:  # pytest.raises fails with an outcome, not an Exception
                            failed.add(f"{file}::{name}")
            return failed
        finally:
            for name, mod in saved.items():
                if mod is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = mod

    visible = {m.test_file: render_tests(m) for m in BOOKSHOP.modules}
    assert failures(set(), {**visible, **BOOKSHOP.hidden_tests}) == set()
    for module in BOOKSHOP.modules:
        for function in module.functions:
            assert f"{module.test_file}::test_{function.name}" in failures({function.name}, visible), function.name
            assert failures({function.name}, BOOKSHOP.hidden_tests), f"no hidden test catches {function.name}'s bug"


def test_the_simulated_coder_labels_itself_and_validates():
    assert SimulatedCoder(BOOKSHOP).name.startswith("simulated-coder")
    with pytest.raises(ValueError, match="bug_rate must be in"):
        SimulatedCoder(BOOKSHOP, bug_rate=1.5)


def test_the_next_step_receives_the_previous_steps_summary():
    def reply(messages, _):
        last = messages[-1]["content"]
        if "with write_plan" in last:
            return tool_call_text("write_plan", steps=["first", "second"])
        if prompts.SUMMARISE in last:
            return "SUMMARY-OF-" + ("FIRST" if "Do this step: first" in messages[2]["content"] else "SECOND")
        return tool_call_text("step_complete")

    llm = ScriptedModel(reply)
    L2MAC(llm, context_tokens=20000).run("Two steps.")
    openings = [c["prompt"][2]["content"] for c in llm.calls if len(c["prompt"]) == 3 and c["prompt"][2][
        "content"].startswith("Do this step")]
    assert "Do this step: second" in openings[-1] and "SUMMARY-OF-FIRST" in openings[-1]
    assert "Summary of the previous step: (none)" in openings[0]


def test_a_step_is_given_up_when_its_overflow_retries_are_spent():
    huge = tool_call_text("write_files", files=[{"path": "big.py", "contents": "# x\n" * 300}])
    llm = ScriptedModel(lambda messages, i: tool_call_text("write_plan", steps=["a", "b"]) if i == 0 else
                        "still working" if messages[-1]["content"] == prompts.OVERFLOW else huge)
    codebase = L2MAC(llm, context_tokens=2600, reply_tokens=1500, max_retries_per_step=2,
                     enable_tests=False).run("Write big.py.")
    assert [s.status for s in codebase.steps] == ["gave_up", "gave_up"]  # the run goes on to the next step
    assert [s.overflows for s in codebase.steps] == [3, 3]


def test_a_step_whose_opening_cannot_fit_is_given_up_at_once():
    llm = ScriptedModel(lambda messages, i: tool_call_text("write_plan", steps=["a"]))
    codebase = L2MAC(llm, context_tokens=2600).run("y" * 3000)  # the task alone is over the budget
    assert codebase.steps[0].status == "gave_up" and codebase.steps[0].calls == 0


def test_the_temperature_anneals_once_the_conversation_stops_repeating():
    def reply(messages, i):
        if i == 0:
            return tool_call_text("write_plan", steps=["one"])
        return tool_call_text("list_files") if i <= 4 else tool_call_text("view_files", files=[f"f{i}.py"])

    llm = ScriptedModel(reply)
    L2MAC(llm, context_tokens=40000, max_calls_per_step=9, enable_tests=False).run("Do it.")
    temperatures = [round(c["temperature"], 6) for c in llm.calls[1:]]
    peak = temperatures.index(max(temperatures))
    after = temperatures[peak:peak + 4]
    assert max(temperatures) >= 0.8 and after == sorted(after, reverse=True)
    assert after[0] - after[1] == pytest.approx(0.1) and after[1] - after[2] == pytest.approx(0.1)


def test_shrink_drops_oldest_exchanges_first_and_the_latest_failure_last():
    loop = L2MAC(ScriptedModel(["x"]), context_tokens=1200)
    base = [{"role": "system", "content": "s" * 300}, {"role": "user", "content": "t" * 200},
            {"role": "user", "content": "Do this step: step"}]
    exchanges = [{"role": "assistant", "content": "old write " + "a" * 200},
                 {"role": "user", "content": "The step is not complete: FAILED test_x.py::test_y"},
                 {"role": "assistant", "content": "new write " + "b" * 300},
                 {"role": "user", "content": "Result of write_files: wrote x.py"}]
    kept = loop._shrink(base + exchanges)
    assert kept[:3] == base
    assert kept[3]["content"].startswith("The step is not complete")  # kept though it is older
    assert all("old write" not in m["content"] for m in kept)


def test_a_write_reports_the_checks_as_the_official_tool_does():
    from iclr24.l2mac import FileStore, Toolbox
    from iclr24.l2mac.tools import ToolCall

    box = Toolbox(FileStore({"test_lib.py": TEST}))
    result = box(ToolCall("write_files", {"files": [{"path": "lib.py", "contents": BUGGY}]}))
    assert result.startswith("wrote lib.py\nTest run results:") and "FAILED test_lib.py::test_f" in result
    fixed = box(ToolCall("write_files", {"files": [{"path": "lib.py", "contents": FIXED}]}))
    assert fixed == "wrote lib.py\nAll tests passed."
    quiet = Toolbox(FileStore({"test_lib.py": TEST}), enable_tests=False)
    assert quiet(ToolCall("write_files", {"files": [{"path": "lib.py", "contents": BUGGY}]})) == "wrote lib.py"


def test_runs_count_their_model_calls_on_a_bar_only_when_asked(monkeypatch):
    from tests.progress_probe import bars

    recorder = bars(monkeypatch)

    def many():
        return ScriptedModel(lambda messages, _: tool_call_text("write_plan", steps=["step 0", "step 1"])
                             if "with write_plan" in messages[-1]["content"] else tool_call_text("list_files"))

    quiet = L2MAC(many(), context_tokens=20000, max_calls_per_step=3).run("Do things.")
    SingleContext(many(), context_tokens=20000, max_calls=3).run("Do things.")
    assert recorder.added == []                                  # the default: no bar, even on a terminal
    loud = L2MAC(many(), context_tokens=20000, max_calls_per_step=3).run("Do things.", progress=True)
    single = SingleContext(many(), context_tokens=20000, max_calls=3).run("Do things.", progress=True)
    # L2MAC cannot know its number of calls ahead; the baseline's limit is its total
    assert recorder.added == [("L2MAC model calls", None), ("single-context model calls", 3)]
    assert recorder.advanced == {"L2MAC model calls": loud.llm_calls, "single-context model calls": single.llm_calls}
    assert loud.llm_calls == 1 + 2 * 3 and single.llm_calls == 3
    assert loud.to_dict() == quiet.to_dict()                     # the bar changes nothing else


def test_every_status_and_call_kind_a_run_records_is_one_its_type_names():
    from typing import get_args

    from iclr24.l2mac.l2mac import CallKind, StepStatus

    task = two_modules()
    huge = tool_call_text("write_files", files=[{"path": "big.py", "contents": "# x\n" * 300}])
    overflowing = ScriptedModel(lambda messages, i: tool_call_text("write_plan", steps=["a"]) if i == 0 else
                                "still working" if messages[-1]["content"] == prompts.OVERFLOW else huge)
    runs = [L2MAC(SimulatedCoder(task, bug_rate=1.0, seed=0), context_tokens=1280).run(task.spec),   # complete
            SingleContext(SimulatedCoder(task, bug_rate=1.0, seed=0), context_tokens=1280).run(task.spec),  # full
            L2MAC(overflowing, context_tokens=2600, reply_tokens=1500, max_retries_per_step=1,
                  enable_tests=False).run("Write big.py."),                                           # gave_up
            L2MAC(agent(on_failure=False), context_tokens=8000, max_calls_per_step=4).run("Write lib.py.")]  # limit
    statuses = {step.status for run in runs for step in run.steps}
    kinds = {call["kind"] for run in runs for call in run.trace}
    assert statuses == set(get_args(StepStatus)) - {"running"}
    assert kinds == set(get_args(CallKind))
