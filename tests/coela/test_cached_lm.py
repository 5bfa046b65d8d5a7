"""PrefixCachedLM: the same greedy replies as the wrapped model, with prompt prefixes and drafts reused."""

import pytest

from iclr24.coela.cached_lm import PrefixCachedLM, lookup_draft
from iclr24.llm import get_model


def test_lookup_draft_copies_what_followed_the_latest_match():
    assert lookup_draft([5, 6, 7, 8, 9, 5, 6], ngram=2, length=2) == [7, 8]
    assert lookup_draft([1, 2, 3, 1, 2, 4, 1, 2], ngram=2, length=3) == [4, 1, 2]   # the latest occurrence
    assert lookup_draft([1, 2, 9, 2], ngram=3, length=5) == [9, 2]                   # falls back to n = 1
    assert lookup_draft([1, 2, 9, 2], ngram=3, length=5, min_ngram=2) == []          # unless n = 1 is too short
    assert lookup_draft([1, 2, 9, 1, 2], ngram=3, length=5, min_ngram=2) == [9, 1, 2]
    assert lookup_draft([1, 2, 3], ngram=3) == []
    assert lookup_draft([7], ngram=3) == []


def test_wrap_leaves_a_backend_without_torch_weights_alone():
    scripted = get_model("scripted", outputs=["A"])
    assert PrefixCachedLM.wrap(scripted) is scripted


@pytest.fixture(scope="module")
def embedded():
    pytest.importorskip("transformers")
    try:
        return get_model("embedded")
    except ImportError as err:
        pytest.skip(f"embedded model not installed: {err}")


def test_greedy_replies_equal_the_wrapped_model(embedded):
    cached = PrefixCachedLM(embedded, keep=2)
    head = "You are alice, one of two agents in a house. Your goal: move the apple and the cup to the kitchen.\n"
    prompts = [[{"role": "user", "content": head + tail}] for tail in (
        "Available plans:\nA. go to kitchen\nB. explore current room office\nAnswer with the letter.",
        "I am in the office. Available plans:\nA. go grasp target object apple\nB. go to kitchen\nAnswer.",
        "Write one short message to your partner.\nMessage:")]
    for prompt, max_tokens in zip(prompts, (12, 12, 24)):
        want = embedded.generate(prompt, max_tokens=max_tokens, temperature=0.0)[0]
        got = cached.generate(prompt, max_tokens=max_tokens, temperature=0.0)[0]
        assert (got.text, got.finish_reason, got.prompt_tokens, got.completion_tokens) == \
            (want.text, want.finish_reason, want.prompt_tokens, want.completion_tokens)
    assert len(cached._caches) == 2                    # the oldest prompt's cache was dropped
    assert max(len(key) for key in cached._caches) > 30


def test_constrained_greedy_replies_equal_the_wrapped_model(embedded):
    if not embedded.capabilities.grammar:
        pytest.skip("llguidance is not installed")
    cached = PrefixCachedLM(embedded, keep=2)
    head = "You are bob. Your goal: move the apple to the kitchen.\nAvailable plans:\nA. go to kitchen\n" \
           "B. explore current room office\nC. go grasp target object apple\n"
    options = {"type": "regex", "pattern": "(A\\. go to kitchen|B\\. explore current room office|"
                                           "C\\. go grasp target object apple)"}
    for tail in ("Which plan is best?", "You hold nothing. Which plan is best?"):
        prompt = [{"role": "user", "content": head + tail}]
        want = embedded.generate(prompt, max_tokens=16, temperature=0.0, response_format=options)[0]
        got = cached.generate(prompt, max_tokens=16, temperature=0.0, response_format=options)[0]
        assert got.text in ("A. go to kitchen", "B. explore current room office", "C. go grasp target object apple")
        assert (got.text, got.finish_reason, got.completion_tokens) == \
            (want.text, want.finish_reason, want.completion_tokens)
    assert len(cached._caches) == 2                    # constrained calls are cached like plain ones


def test_tokens_the_grammar_forces_take_no_forward_pass(embedded):
    if not embedded.capabilities.grammar:
        pytest.skip("llguidance is not installed")
    from iclr24.llm import choose

    cached = PrefixCachedLM(embedded)
    passes = []
    forward = cached._forward
    cached._forward = lambda ids, cache, last_only=False: passes.append(len(ids)) or forward(ids, cache, last_only)
    lines = ['A. send a message: "I found the apple in the kitchen."', "B. go grasp target object apple",
             "C. go to kitchen"]
    prompt = [{"role": "user", "content": "Available plans:\n" + "\n".join(lines) + "\nAnswer with one plan."}]
    choice = choose(cached, prompt, lines)
    want = choose(embedded, prompt, lines)
    assert choice == want
    # the prompt, then at most one pass per token the grammar leaves open (here: the letter); not one per token
    assert len(passes) <= 2 < len(embedded.tokenize(choice.option))


@pytest.mark.parametrize("response_format", [
    {"type": "regex", "pattern": "Answer: (yes|no) because [a-z ]{1,40}"},
    {"type": "json_schema", "json_schema": {"name": "plan", "schema": {
        "type": "object", "properties": {"room": {"enum": ["kitchen", "office"]}, "why": {"type": "string"}},
        "required": ["room", "why"], "additionalProperties": False}}},
], ids=["regex", "json"])
def test_free_choices_after_forced_tokens_equal_the_wrapped_model(embedded, response_format):
    # forced tokens are fed to the model with the next pass: a later free token must see them
    if not embedded.capabilities.grammar:
        pytest.skip("llguidance is not installed")
    cached = PrefixCachedLM(embedded)
    prompt = [{"role": "user", "content": "Is the kitchen the goal room? Say which room to visit and why."}]
    want = embedded.generate(prompt, max_tokens=24, response_format=response_format)[0]
    got = cached.generate(prompt, max_tokens=24, response_format=response_format)[0]
    assert (got.text, got.finish_reason) == (want.text, want.finish_reason)
