import pytest

from iclr24.interp import TEXT_TEMPLATES, english_paragraphs, ioi_prompts


def test_ioi_prompts_repeat_the_subject_and_the_counterfactual_repeats_the_io():
    prompts = ioi_prompts(50, seed=3)
    assert prompts == ioi_prompts(50, seed=3) and prompts != ioi_prompts(50, seed=4)
    for p in prompts:
        assert p.text.count(p.s) == 2 and p.text.count(p.io) == 1
        assert p.counterfactual.count(p.io) == 2 and p.counterfactual.count(p.s) == 1
        # the two differ at the second subject only
        assert p.text.rsplit(p.s, 1)[0] == p.counterfactual.rsplit(p.io, 1)[0]
        first = p.text.index(p.io) < p.text.index(p.s)
        assert p.order == ("ABB" if first else "BAB")
    assert {p.order for p in prompts} == {"ABB", "BAB"}
    assert {p.template for p in ioi_prompts(20, templates=[1, 2])} <= {1, 2}


def test_ioi_prompts_bad_arguments():
    with pytest.raises(ValueError, match=r"templates must be indices in \[0, 8\)"):
        ioi_prompts(3, templates=[len(TEXT_TEMPLATES)])
    with pytest.raises(ValueError, match="at least 2 names"):
        ioi_prompts(3, names=["Mary"])


def test_single_token_names_only_with_a_tokenizer():
    def tokenizer(text, add_special_tokens=False):  # "Bartholomew" is two tokens here
        return {"input_ids": [1, 2] if "Bartholomew" in text else [1]}

    names = {p.io for p in ioi_prompts(40, names=["Mary", "John", "Bartholomew"], tokenizer=tokenizer)}
    assert names == {"Mary", "John"}


def test_english_paragraphs_are_prose_and_deterministic():
    paragraphs = english_paragraphs(50, seed=1)
    assert paragraphs == english_paragraphs(50, seed=1) and len(set(paragraphs)) == 50
    assert all(8 <= len(p.split()) <= 48 and ">>>" not in p for p in paragraphs)
    with pytest.raises(ValueError, match="fewer than n=100000"):
        english_paragraphs(100_000)


def test_position_swap_keeps_the_names_and_flips_the_order():
    for p in ioi_prompts(20, seed=5):
        q = p.swap_positions()
        assert (q.io, q.s, q.template, q.place, q.object) == (p.io, p.s, p.template, p.place, p.object)
        assert {p.order, q.order} == {"ABB", "BAB"} and q.swap_positions() == p
        assert q.text.count(p.s) == 2 and q.text.endswith(p.text[p.text.rindex(p.s):])  # same second half


def test_fixed_length_uses_single_token_fillers_and_needs_a_tokenizer():
    def tokenizer(text, add_special_tokens=False):  # "basketball" and "restaurant" are two tokens here
        return {"input_ids": [1, 2] if text.strip() in ("basketball", "restaurant") else [1]}

    prompts = ioi_prompts(60, tokenizer=tokenizer, fixed_length=True)
    assert {p.object for p in prompts}.isdisjoint({"basketball"}) and {p.place for p in prompts}.isdisjoint(
        {"restaurant"})
    with pytest.raises(ValueError, match="fixed_length needs the tokenizer"):
        ioi_prompts(3, fixed_length=True)
