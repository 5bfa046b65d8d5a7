"""ToRA's loop and the baselines, driven by a scripted model: stops, rounds, error feedback, truncation."""

import pytest

from iclr24.llm import get_model
from iclr24.tora import (
    CoTSolver,
    DirectSolver,
    PALSolver,
    SandboxExecutor,
    ToolOutput,
    ToRASolver,
    extract_program,
    majority_vote,
    truncate_output,
)
from iclr24.tora.solver import LIMIT_NOTE


def scripted(*outputs):
    return get_model("scripted", outputs=list(outputs))


def program(code):
    return f"Compute.\n```python\n{code}\n```\n"


def test_program_runs_in_the_sandbox_and_its_output_is_fed_back():
    # the scripted model "hallucinates" an output block; the stop string cuts it and the real output is used
    llm = scripted(program("print(12 * 34)") + "```output\n999\n```", r"So it is $\boxed{408}$.")
    t = ToRASolver(llm).solve("What is 12 * 34?")
    assert t.answer == "408" and t.finish == "answer"
    assert t.programs == ["print(12 * 34)"] and t.outputs[0].text == "408" and t.outputs[0].ok
    assert "```output\n408\n```" in t.solution and "999" not in t.solution
    assert llm.calls[1]["prompt"].endswith("```output\n408\n```\n")
    assert llm.calls[0]["stop"] == ["</s>", "---", "```output"]


def test_a_trajectory_grades_strictly_or_as_the_official_grader():
    t = ToRASolver(scripted(r"So $\boxed{2500}$.")).solve("What is 25% as a number?")
    assert not t.is_correct("25") and t.is_correct("25", mode="official")  # official accepts 100x


def test_error_feedback_is_the_last_traceback_line():
    llm = scripted(program("print(x)"), program("x = 3\nprint(x * 2)"), r"$\boxed{6}$")
    t = ToRASolver(llm).solve("Double three.")
    assert [o.ok for o in t.outputs] == [False, True]
    assert t.outputs[0].text == "NameError: name 'x' is not defined"
    assert "NameError: name 'x' is not defined" in llm.calls[1]["prompt"]
    assert t.answer == "6"


def test_rounds_exhausted_appends_the_limit_note_and_states_no_answer_of_the_models_own():
    for extraction, answer in (("model_text", None), ("official", "1")):
        llm = scripted(*[program(f"print({i})") for i in range(3)])
        t = ToRASolver(llm, max_tool_rounds=2, extraction=extraction).solve("Loop forever?")
        assert len(llm.calls) == 2 and len(t.programs) == 2
        assert t.finish == "max_rounds" and t.solution.endswith(LIMIT_NOTE) and t.final_text == ""
        assert t.answer == answer and t.extraction == extraction  # official: the last output block decides


#: A program whose output holds ``\\boxed{999}``; its code does not (a boxed answer in a round's text ends the loop).
BOXED_BY_A_PROGRAM = program("print(chr(92) + 'boxed{999}')")


@pytest.mark.parametrize("conclusion, model_text", [
    ("So the answer is 408.", "408"),  # the model states its own answer
    ("So that is what it prints.", None),  # the model states none
    (r"It is $\boxed{408}$.", "408"),
])
def test_a_program_printing_a_boxed_answer_decides_only_in_official_extraction(conclusion, model_text):
    """Issue #59: what a program prints never becomes the graded answer in model-text mode (the reproduction's);
    in official mode it does, as in ToRA's code, which reads the word "boxed" anywhere in the solution first."""
    for extraction, expected in (("model_text", model_text), ("official", "999" if "boxed" not in conclusion
                                                                          else "408")):
        t = ToRASolver(scripted(BOXED_BY_A_PROGRAM, conclusion), extraction=extraction).solve("What is 12 * 34?")
        assert t.outputs[0].ok and t.outputs[0].text == r"\boxed{999}"  # it ran in the sandbox and printed that
        assert t.final_text == conclusion and t.answer == expected
        assert t.is_correct("999") is (expected == "999") and t.to_dict()["extraction"] == extraction


def test_a_program_breaking_out_of_its_output_block_cannot_answer_in_model_text_mode():
    """Text-level parsing could be fooled by a program that prints the closing fence and then a box; the
    model-text answer comes from the rounds the model wrote, not from splitting the solution."""
    escape = program("print(chr(96) * 3)\nprint(chr(92) + 'boxed{999}')")  # the fence, then the box
    t = ToRASolver(scripted(escape, "So the total is 408.")).solve("What is 12 * 34?")
    assert "```\n\\boxed{999}\n```" in t.solution and t.answer == "408"
    assert ToRASolver(scripted()).read_answer(t, "official") == "999"  # ToRA's own extraction is fooled


def test_an_unknown_extraction_is_refused():
    with pytest.raises(ValueError, match="extraction must be one of"):
        ToRASolver(scripted("1"), extraction="strict")
    t = ToRASolver(scripted("1")).solve("?")
    with pytest.raises(ValueError, match="extraction must be one of"):
        ToRASolver(scripted("1")).read_answer(t, "lenient")
    with pytest.raises(ValueError, match="extraction must be one of"):
        PALSolver(scripted("1")).read_answer(t, "lenient")


def test_a_program_with_a_lone_surrogate_is_a_failed_run_fed_back_to_the_model():
    """Issue #59: such a program cannot be written as UTF-8, so the sandbox refuses it (a ValueError); the
    solver reports it to the model as a program error, as ToRA's code does (Python's own message), and goes on."""
    llm = scripted(program("print('\ud800')"), program("print(12 * 34)"), r"So it is $\boxed{408}$.")
    t = ToRASolver(llm).solve("What is 12 * 34?")
    error = "UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800' in position 7: surrogates not allowed"
    assert [o.ok for o in t.outputs] == [False, True] and t.outputs[0].text == error
    assert f"```output\n{error}\n```" in llm.calls[1]["prompt"]  # fed back as any program error is
    assert t.answer == "408" and t.finish == "answer"
    pal = PALSolver(scripted(program("print('\ud800')"))).solve("?")
    assert not pal.outputs[0].ok and pal.answer is None and pal.finish == "answer"


def test_a_boxed_answer_ends_the_trajectory_without_running_its_program():
    calls = []
    llm = scripted(r"It is $\boxed{5}$." + "\n```python\nprint(1)\n```\n")
    t = ToRASolver(llm, executor=lambda code: calls.append(code) or ToolOutput("1", True)).solve("?")
    assert t.answer == "5" and not calls and t.finish == "answer"


def test_token_limit_ends_the_trajectory():
    llm = scripted("x" * 50 + "\n```python\nprint(1)\n```\n")
    t = ToRASolver(llm, max_tokens=20).solve("?")
    assert t.finish == "length" and not t.programs


def test_output_truncation():
    assert truncate_output("a" * 100) == "a" * 100
    long = "".join(str(i % 10) for i in range(300))
    cut = truncate_output(long)
    assert cut == long[:50] + "..." + long[-50:] and len(cut) == 103
    llm = scripted(program("print('a' * 300 + 'b' * 300)"), r"$\boxed{0}$")
    assert ToRASolver(llm).solve("?").outputs[0].text == "a" * 200 + "..." + "b" * 200  # ToRA: 200 + ... + 200
    llm = scripted(program("print('a' * 300 + 'b' * 300)"), r"$\boxed{0}$")
    executor = SandboxExecutor(feedback="last_line")
    assert ToRASolver(llm, executor=executor).solve("?").outputs[0].text == "a" * 50 + "..." + "b" * 50


def test_official_feedback_is_the_whole_output_done_when_silent_and_the_error_line_on_failure():
    official, last_line = SandboxExecutor(), SandboxExecutor(feedback="last_line")
    out = official("print('a')\nprint('b')\n")
    assert out == ToolOutput("a\nb", True, False, pytest.approx(0, abs=10), out.isolation)
    assert out.isolation.startswith("bwrap")  # the sandbox's account of the run travels with the output
    assert last_line("print('a')\nprint('b')\n").text == "b"
    assert official("x = 1").text == "Done" and last_line("x = 1").text == ""
    failed = official("print('partial')\n1 / 0")
    assert not failed.ok and failed.text == "ZeroDivisionError: division by zero"  # what it printed is dropped


def test_executor_timeout_and_exit_status():
    out = SandboxExecutor(timeout_s=1).__call__("while True:\n    pass")
    assert out.timed_out and not out.ok and out.text == "Timeout Error"
    out = SandboxExecutor().__call__("import sys\nsys.exit(3)")
    assert not out.ok and "status 3" in out.text


def test_executor_rejects_bad_settings():
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        SandboxExecutor(timeout_s=0)
    with pytest.raises(ValueError, match="max_chars"):
        SandboxExecutor(max_chars=1)
    with pytest.raises(ValueError, match="feedback must be one of"):
        SandboxExecutor(feedback="everything")


def test_extract_program_takes_the_last_closed_block():
    text = "```python\na = 1\n```\nthen\n```python\nb = 2\nprint(b)\n```\n```python\nunclosed"
    assert extract_program(text) == "b = 2\nprint(b)"
    assert extract_program("no code") is None


def test_pal_answers_with_its_programs_output_and_cot_never_runs_code():
    for extraction in ("model_text", "official"):  # PAL's answer is what its program prints, in either mode
        pal = PALSolver(scripted("The answer is 5.\n```python\nprint(6 * 7)\n```\n"), extraction=extraction)
        t = pal.solve("?")
        assert t.answer == "42" and t.finish == "answer" and LIMIT_NOTE not in t.solution
    failed = PALSolver(scripted("```python\nx = 6 * 7\nprint(y)\n```\n")).solve("?")
    assert not failed.outputs[0].ok and failed.answer is None  # not 7, the last number in its code

    def refuse(code):
        raise AssertionError("chain of thought must not run programs")

    llm = scripted("```python\nprint(1)\n```\nThe answer is 3.\n\nQuestion: another")
    cot = CoTSolver(llm, executor=refuse).solve("?")
    assert cot.answer == "3" and not cot.programs
    assert llm.calls[0]["stop"] == ["</s>", "---", "```output", "\n\n"]  # ToRA's vLLM script adds a blank line


def test_direct_stops_at_the_end_of_the_line():
    llm = scripted("17\nQuestion: next")
    t = DirectSolver(llm).solve("?")
    assert t.answer == "17" and "\n" in llm.calls[0]["stop"] and llm.calls[0]["max_tokens"] == 24


def test_batch_and_prefixes():
    llm = get_model("scripted", outputs=lambda prompt, i: r"$\boxed{%d}$" % len(prompt))
    solver = ToRASolver(llm, chat=False)
    a, b = solver.solve_batch(["one", "three"], prefixes=["", "Known: "])
    assert b.solution.startswith("Known: ") and a.answer != b.answer
    with pytest.raises(ValueError, match="one string per question"):
        solver.solve_batch(["one"], prefixes=["a", "b"])


def test_solve_many_votes_over_samples():
    answers = iter(["4", "5", "4", "7", "7", "7"])
    llm = get_model("scripted", outputs=lambda prompt, i: r"$\boxed{%s}$" % next(answers))
    v1, v2 = ToRASolver(llm).solve_many(["a", "b"], n_samples=3)
    assert (v1.answer, v1.agreement) == ("4", pytest.approx(2 / 3))
    assert (v2.answer, v2.agreement) == ("7", 1.0)
    assert llm.calls[0]["temperature"] == 0.6
    with pytest.raises(ValueError, match="temperature > 0"):
        ToRASolver(llm).solve_many(["a"], n_samples=2, temperature=0)
    with pytest.raises(ValueError, match="vote must be"):
        ToRASolver(llm).solve_many(["a"], vote="unanimous")


def test_solve_many_takes_a_custom_vote():
    llm = get_model("scripted", outputs=lambda prompt, i: r"$\boxed{%d}$" % i)
    vote, = ToRASolver(llm).solve_many(["a"], n_samples=3, vote=lambda answers: (max(answers), 1))
    assert vote.answer == "2" and vote.agreement == pytest.approx(1 / 3)


def test_majority_vote_groups_equivalent_answers():
    assert majority_vote(["1/2", "3", "0.5", None]) == ("1/2", 2)
    assert majority_vote([None, None]) == (None, 0)
    assert majority_vote(["2", "3"]) == ("2", 1)  # ties go to the first seen


def test_chat_layout_uses_the_backends_template():
    class ChatModel:
        name = "chat"

        def __init__(self):
            self.inner = scripted(r"$\boxed{1}$")

        def generate(self, prompt, **kwargs):
            return self.inner.generate(prompt, **kwargs)

        def format_chat(self, messages):
            return "|".join(f"{m['role']}:{m['content'][:10]}" for m in messages) + "|assistant:"

    llm = ChatModel()
    ToRASolver(llm).solve("What is one?")
    prompt = llm.inner.calls[0]["prompt"]
    assert prompt.startswith("system:") and prompt.endswith("user:What is on|assistant:")
    assert "Question:" in ToRASolver(llm, chat=False).prompt_for("q")
    with pytest.raises(ValueError, match="chat=True needs a backend"):
        ToRASolver(scripted(), chat=True)


def test_a_chat_server_gets_messages_with_each_output_as_a_user_turn():
    llm = get_model("scripted", outputs=[program("print(6 * 7)"), r"So $\boxed{42}$."], chat=True)
    solver = ToRASolver(llm)
    t = solver.solve("What is 6 * 7?")
    assert solver.layout == "messages" and t.answer == "42"
    first, second = (call["prompt"] for call in llm.calls)
    assert first[0]["role"] == "system" and first[-1] == {"role": "user", "content": "What is 6 * 7?"}
    # the worked examples take the same turns: the output of each example's program is a user turn
    assert any(m["role"] == "user" and m["content"].startswith("```output\n") for m in first[:-1])
    assert second[:len(first)] == first
    assert second[len(first):] == [{"role": "assistant", "content": program("print(6 * 7)").rstrip()},
                                   {"role": "user", "content": "```output\n42\n```"}]
    assert "```output\n42\n```" in t.solution  # the trajectory reads the same in every layout
    assert ToRASolver(llm, chat=False).layout == "text"
    with pytest.raises(ValueError, match="cannot continue an assistant message"):
        solver.solve_batch(["q"], prefixes=["partial"])


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_tool_rounds": 0}, ValueError, "max_tool_rounds must be"),
    ({"max_tokens": 0}, ValueError, "max_tokens must be"),
    ({"prompt": "physics"}, ValueError, "examples must be one of"),
    ({"prompt": 3}, TypeError, "prompt must be"),
])
def test_solver_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ToRASolver(scripted(), **kwargs)


def test_bad_questions_and_llm():
    solver = ToRASolver(scripted())
    with pytest.raises(TypeError, match="single string"):
        solver.solve_batch("one question")
    with pytest.raises(ValueError, match=r"questions\[0\] must be a non-empty string"):
        solver.solve_batch([""])
    with pytest.raises(TypeError, match="llm must be a LanguageModel"):
        ToRASolver(object())


def test_trajectory_to_dict_round_trips_to_json():
    import json

    llm = scripted(program("print(2)"), r"$\boxed{2}$")
    record = ToRASolver(llm).solve("?").to_dict()
    assert json.loads(json.dumps(record))["rounds"][0]["output"] == "2"
    assert record["completion_tokens"] > 0


@pytest.mark.parametrize("examples", ["gsm", "math"])
def test_every_worked_example_is_consistent(examples):
    """Each example's program prints the output it shows, and each written answer grades as its answer."""
    from iclr24.tora import EXAMPLES, extract_answer, is_equivalent

    for ex in EXAMPLES[examples]:
        assert SandboxExecutor()(ex.program).text == ex.output
        assert is_equivalent(ex.output, ex.answer)
        for style in ("cot", "tora"):
            assert extract_answer(ex.solution(style)) == ex.answer
