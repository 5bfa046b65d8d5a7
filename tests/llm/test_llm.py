import json
import time
from types import SimpleNamespace

import pytest
import torch

from iclr24.llm import LoggedModel, apply_stop, get_model
from iclr24.llm.scripted import ScriptedModel
from tests.http_stub import JSONHandler, serving


def test_apply_stop_cuts_at_the_earliest_stop():
    assert apply_stop("a = 1\n```output\n2", ["```output", "\n"]) == ("a = 1", True)
    assert apply_stop("no stop here", ["###"]) == ("no stop here", False)


def test_get_model_by_name_environment_and_errors(monkeypatch):
    assert isinstance(get_model("scripted", outputs=["x"]), ScriptedModel)
    monkeypatch.setenv("ICLR24_LLM", "scripted")
    assert isinstance(get_model(outputs=["x"]), ScriptedModel)
    with pytest.raises(ValueError, match=r"unknown language-model backend 'gpt5'; expected one of \['embedded'"):
        get_model("gpt5")


def test_scripted_model_applies_stop_limits_and_records_calls():
    model = ScriptedModel(["The answer is 4.\nQuestion: next", "abcdefgh"])
    first, = model.generate("2+2?", stop=["\nQuestion:"], temperature=0.0, seed=1)
    assert (first.text, first.finish_reason) == ("The answer is 4.", "stop")
    second, = model.generate("more", max_tokens=3)
    assert (second.text, second.finish_reason) == ("abc", "length")
    assert [c["prompt"] for c in model.calls] == ["2+2?", "more"] and model.calls[0]["stop"] == ["\nQuestion:"]
    with pytest.raises(IndexError, match="ran out of outputs after 2 calls"):
        model.generate("again")
    with pytest.raises(ValueError, match="max_tokens must be a positive int, got 0"):
        model.generate("x", max_tokens=0)


def test_logged_model_writes_every_call(tmp_path):
    model = LoggedModel(ScriptedModel(lambda prompt, i: f"reply {i}"), tmp_path / "calls.jsonl")
    model.generate("one", n=2)
    model.generate([{"role": "user", "content": "two"}], stop=("x",))
    records = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in records] == ["one", [{"role": "user", "content": "two"}]]
    assert [o["text"] for o in records[0]["outputs"]] == ["reply 0", "reply 1"]
    assert records[1]["kwargs"]["stop"] == ["x"]


# --- the OpenAI-compatible backend against a local stub server ---------------------------------------------


class _Stub(JSONHandler):
    requests: list = []
    fail_first = 0
    status = 200

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.requests.append((self.path, body))
        if _Stub.fail_first > 0:
            _Stub.fail_first -= 1
            return self._send(500, {"error": {"message": "overloaded"}})
        if _Stub.status != 200:
            return self._send(_Stub.status, {"error": {"message": "bad key", "type": "invalid_request_error"}})
        n = body.get("n", 1)
        if self.path.endswith("/chat/completions"):
            # choice i says "chat" and i + 1 more tokens: a different length per choice
            choices = [{"index": i, "message": {"role": "assistant", "content": "chat" + " x" * (i + 1)},
                        "finish_reason": "stop",
                        "logprobs": {"content": [{"token": t, "logprob": -0.5 * k, "top_logprobs": []}
                                                 for k, t in enumerate(["chat"] + [" x"] * (i + 1))]}
                        if body.get("logprobs") else None} for i in range(n)]
            used = sum(i + 2 for i in range(n))
        else:
            top = {" Paris": -0.1, " Lyon": -2.5} if body.get("logprobs") else None
            echo = body["prompt"] if str(body.get("prompt", "")).startswith("echo") else None
            used = 2 * n
            # with logprobs the text is what its one token spells
            choices = [{"index": i, "text": echo or (" Paris" if top else f"text {i}"), "finish_reason": "length",
                        "logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.1], "top_logprobs": [top],
                                     "text_offset": [0]} if top else None} for i in range(n)]
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": choices, "usage": {"prompt_tokens": 5, "completion_tokens": used,
                                                       "total_tokens": 5 + used}})


@pytest.fixture
def stub():
    _Stub.requests, _Stub.fail_first, _Stub.status = [], 0, 200
    with serving(_Stub) as url:
        yield url


def test_openai_backend_chat_and_text(stub):
    model = get_model("openai", model="local", base_url=stub, api_key="k", max_retries=0)
    chat = model.generate([{"role": "user", "content": "hi"}], max_tokens=8, stop=["\n"], seed=3, n=2)
    assert [c.text for c in chat] == ["chat x", "chat x x"] and chat[0].prompt_tokens == 5
    assert chat[0].logprobs is None and model.capabilities.chat_template
    text, = model.generate("Once", max_tokens=4)
    assert (text.text, text.finish_reason) == ("text 0", "length")
    (path, body), _ = _Stub.requests
    assert path == "/v1/chat/completions" and body["stop"] == ["\n"] and body["seed"] == 3 and body["n"] == 2
    assert not model.capabilities.full_logits
    with pytest.raises(NotImplementedError, match="top 20 logprobs"):
        model.next_token_logprobs([1, 2])


def test_openai_backend_top_p_system_and_per_token_logprobs(stub):
    model = get_model("openai", model="local", base_url=stub, max_retries=0)
    a, b = model.generate([{"role": "user", "content": "hi"}], system="Be brief.", top_p=0.9, temperature=0.7,
                          n=2, logprobs=True)
    body = _Stub.requests[-1][1]
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and body["top_p"] == 0.9
    assert body["logprobs"] is True
    assert a.tokens == ("chat", " x") and a.logprobs == (0.0, -0.5) and b.logprobs == (0.0, -0.5, -1.0)
    assert (a.completion_tokens, b.completion_tokens) == (2, 3)  # each choice's own count, not 4 / 2 each
    text, = model.generate("Once", logprobs=True)
    assert _Stub.requests[-1][1]["logprobs"] == 1 and (text.tokens, text.logprobs) == ((" Paris",), (-0.1,))
    assert "top_p" not in _Stub.requests[-1][1]  # the default is not sent: some servers reject it
    with pytest.raises(ValueError, match="system needs a chat prompt"):
        model.generate("Once", system="Be brief.")
    with pytest.raises(ValueError, match=r"top_p must be a number in \(0, 1\], got 0"):
        model.generate("Once", top_p=0)


def test_openai_backend_splits_usage_by_length_when_the_server_counts_only_the_total(stub):
    model = get_model("openai", model="local", base_url=stub, max_retries=0)
    a, b = model.generate([{"role": "user", "content": "hi"}], n=2)  # "chat x" and "chat x x"
    assert (a.completion_tokens, b.completion_tokens) == (2, 3)  # 5 in all, shared 6 : 8, not 2.5 each


def test_openai_backend_without_a_chat_template_refuses_messages(stub):
    from iclr24.tora import ToRASolver

    model = get_model("openai", model="local", base_url=stub, max_retries=0, chat=False)
    assert not model.capabilities.chat_template
    with pytest.raises(ValueError, match="chat=False: pass a text prompt"):
        model.generate([{"role": "user", "content": "hi"}])
    assert ToRASolver(model).layout == "text"
    chat_model = get_model("openai", model="local", base_url=stub, max_retries=0)
    solver = ToRASolver(chat_model)
    solver.solve("What is 2 + 2?")
    assert solver.layout == "messages" and _Stub.requests[-1][0] == "/v1/chat/completions"


def test_litellm_style_names_reach_the_openai_backend(stub):
    assert get_model("openai/gpt-4o-mini", base_url=stub).name == "gpt-4o-mini"
    assert get_model("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", base_url=stub).name == "Qwen/Qwen2.5-7B-Instruct"
    assert get_model("openai:local", base_url=stub).name == "local"
    with pytest.raises(ValueError, match="unknown language-model backend 'anthropic/claude'"):
        get_model("anthropic/claude")


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    from iclr24.llm.base import nucleus

    probs = torch.tensor([[0.2, 0.5, 0.3]])
    assert torch.allclose(nucleus(probs, 0.6), torch.tensor([[0.0, 0.625, 0.375]]))
    assert torch.allclose(nucleus(probs, 0.5), torch.tensor([[0.0, 1.0, 0.0]]))
    assert torch.allclose(nucleus(probs, 1e-9), torch.tensor([[0.0, 1.0, 0.0]]))  # at least one token
    assert nucleus(probs, 1.0) is probs


def test_openai_backend_batch_keeps_order_and_seeds(stub):
    from iclr24.llm import generate_batch

    model = get_model("openai", model="local", base_url=stub, max_retries=0, max_concurrency=3)
    prompts = [f"echo {i}" for i in range(7)]
    assert [c.text for c in generate_batch(model, prompts, max_tokens=4, seed=10)] == prompts
    seeds = sorted(body["seed"] for _, body in _Stub.requests)
    assert seeds == list(range(10, 17))
    with pytest.raises(ValueError, match="max_concurrency"):
        get_model("openai", model="local", base_url=stub, max_concurrency=0)


def test_openai_backend_top_logprobs(stub):
    model = get_model("openai", model="local", base_url=stub, max_retries=0)
    assert model.next_token_top_logprobs("The capital of France is", k=2) == {" Paris": -0.1, " Lyon": -2.5}
    assert _Stub.requests[-1][1]["logprobs"] == 2
    with pytest.raises(ValueError, match=r"k must lie in \[1, 20\]"):
        model.next_token_top_logprobs("x", k=50)


def test_openai_backend_retries_server_errors(stub):
    _Stub.fail_first = 1
    model = get_model("openai", model="local", base_url=stub, max_retries=2)
    assert model.generate("x")[0].text == "text 0" and len(_Stub.requests) == 2


def test_openai_backend_auth_and_connection_errors(stub):
    _Stub.status = 401
    with pytest.raises(PermissionError, match="refused the API key"):
        get_model("openai", model="local", base_url=stub, max_retries=0).generate("x")
    with pytest.raises(ConnectionError, match="cannot reach"):
        get_model("openai", model="local", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2).generate("x")
    with pytest.raises(ValueError, match="needs a model name"):
        get_model("openai", base_url=stub)


# --- the embedded model, for real ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return get_model("embedded")


def test_embedded_model_answers_deterministically(embedded):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    first = embedded.generate(messages, max_tokens=24)[0]
    assert "Paris" in first.text and first.finish_reason == "stop"
    assert embedded.generate(messages, max_tokens=24)[0].text == first.text
    assert embedded.capabilities.full_logits and embedded.capabilities.chat_template


def test_embedded_next_token_logprobs_are_a_distribution(embedded):
    ids = embedded.tokenize("The capital of France is")
    logprobs = embedded.next_token_logprobs(ids)
    assert logprobs.shape == (len(embedded.tokenizer),)
    assert torch.logsumexp(logprobs, 0).item() == pytest.approx(0.0, abs=1e-9)
    assert embedded.detokenize([int(logprobs.argmax())]).strip() == "Paris"


def test_embedded_stop_strings_and_seeded_sampling(embedded):
    out, = embedded.generate("1, 2, 3, 4,", max_tokens=12, stop=["7"])
    assert "7" not in out.text and out.finish_reason == "stop"
    a = [c.text for c in embedded.generate("Once upon a time", max_tokens=8, temperature=1.0, seed=5, n=2)]
    b = [c.text for c in embedded.generate("Once upon a time", max_tokens=8, temperature=1.0, seed=5, n=2)]
    assert a == b and a[0] != a[1]


def test_embedded_batch_matches_one_prompt_at_a_time(embedded):
    shots = "".join(f"Q: {a} plus {a}?\nA: {2 * a}\n\n" for a in (3, 10, 25, 40))  # a shared prefix
    prompts = [shots + f"Q: {a} plus {a}?\nA:" for a in (7, 150, 12)]
    single = [embedded.generate(p, max_tokens=10, stop=["\n"])[0] for p in prompts]
    batch = embedded.generate_batch(prompts, max_tokens=10, stop=["\n"])
    assert [c.text for c in batch] == [c.text for c in single]
    assert [c.finish_reason for c in batch] == [c.finish_reason for c in single] == ["stop"] * 3
    assert [c.completion_tokens for c in batch] == [c.completion_tokens for c in single]
    assert any(len(key) >= 16 for key in embedded._prefix_caches)  # the shared examples were encoded once
    again = embedded.generate_batch(prompts[:1], max_tokens=10, stop=["\n"])  # one prompt reuses that cache
    assert again[0].text == single[0].text
    # copies of one prompt (sampled votes) extend a kept prefix to the whole prompt but its last token
    head = shots + "Q: Ann has 3 apples, buys 4 more, then eats one"
    embedded.generate_batch([head + ". 1 plus 1?\nA:", head + ", and naps. 2 plus 2?\nA:"], max_tokens=1)
    vote = head + ", and then she gives two of them to her little brother and one to her sister. 6 plus 6?\nA:"
    row = embedded._ids(vote)[0].tolist()
    kept = [k for k in embedded._prefix_caches if len(k) < len(row) - 16 and tuple(row[:len(k)]) == k]
    assert max(map(len, kept)) > len(embedded._ids(shots)[0])      # the head of the vote is kept: it is extended
    alone, = embedded.generate(vote, max_tokens=10, stop=["\n"])
    copies = embedded.generate_batch([vote] * 2, max_tokens=10, stop=["\n"])
    assert tuple(row[:-1]) in embedded._prefix_caches and [c.text for c in copies] == [alone.text] * 2
    assert max(map(len, kept)) in map(len, embedded._prefix_caches)  # and stays kept beside its extension
    sampled = [embedded.generate_batch(prompts, max_tokens=6, temperature=1.0, seed=3) for _ in range(2)]
    assert [c.text for c in sampled[0]] == [c.text for c in sampled[1]]
    with pytest.raises(ValueError, match="batch_size"):
        embedded.generate_batch(prompts, batch_size=0)


def test_a_forked_cache_leaves_the_original_as_it_was(embedded):
    from transformers import DynamicCache

    from iclr24.llm.hf import fork_cache

    def states(cache):
        return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]

    cache = DynamicCache()
    with torch.no_grad():
        embedded.model(input_ids=torch.tensor([embedded.tokenize("one two three four")]), past_key_values=cache)
        before, length = states(cache), cache.get_seq_length()
        fork = fork_cache(cache)
        assert fork.layers[0].keys is cache.layers[0].keys          # shared, not copied
        fork.crop(-2)
        embedded.model(input_ids=torch.tensor([embedded.tokenize(" five six seven")]), past_key_values=fork)
    assert cache.get_seq_length() == length and fork.get_seq_length() != length
    repeated = fork_cache(cache)
    repeated.batch_repeat_interleave(3)
    assert all(torch.equal(k, layer.keys) and torch.equal(v, layer.values)
               for (k, v), layer in zip(before, cache.layers))
    static = SimpleNamespace(layers=[SimpleNamespace(keys=torch.zeros(2))])    # not a dynamic layer: copied
    assert fork_cache(static).layers[0].keys is not static.layers[0].keys


@pytest.mark.parametrize("T, mask", [(1, "padded"), (1, None), (5, "padded"), (5, None)])
def test_shared_prefix_attention_is_sdpa_over_the_prefix_repeated(T, mask):
    from transformers import DynamicCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from iclr24.llm.hf import shared_prefix_attention

    torch.manual_seed(0)
    B, H, Hkv, P, S, D = 3, 6, 2, 7, 9, 4
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=H // Hkv, is_causal=True)
    query, key, value = torch.randn(B, H, T, D), torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    prefix = DynamicCache()
    prefix.update(torch.randn(1, Hkv, P, D), torch.randn(1, Hkv, P, D), 0)
    causal = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    own = causal.expand(B, 1, T, S).clone()
    if mask == "padded":
        own[1, ..., :3] = False  # row 1 starts with 3 padding tokens
    full = torch.cat([torch.ones(B, 1, T, P, dtype=torch.bool), own], -1)
    keys, values = (torch.cat([t.expand(B, -1, -1, -1), own_t], 2)
                    for t, own_t in ((prefix.layers[0].keys, key), (prefix.layers[0].values, value)))
    expected, _ = sdpa_attention_forward(module, query, keys, values, full, scaling=0.5)
    got, _ = shared_prefix_attention(module, query, key, value, own if mask else None, scaling=0.5,
                                     shared_prefix=prefix)
    assert got.shape == (B, T, H, D) and torch.allclose(got, expected, atol=1e-6)
    plain, _ = shared_prefix_attention(module, query, key, value, own, scaling=0.5)  # no prefix: SDPA itself
    assert torch.equal(plain, sdpa_attention_forward(module, query, key, value, own, scaling=0.5)[0])


def test_embedded_shared_prefix_attention_decodes_what_the_repeated_prefix_decodes(embedded):
    shots = "".join(f"Q: {a} times {a + 1}?\nA: {a * (a + 1)}\n\n" for a in (3, 10, 25, 40))
    prompts = [shots + f"Q: {a} times {a + 1}?\nA:" for a in (7, 150, 12, 9)]
    prompts[2] = shots + "Q: a longer question, with more of its own tokens: 12 times 13?\nA:"  # padding
    implementation = embedded.model.config._attn_implementation
    repeated = embedded.generate_batch(prompts, max_tokens=12, stop=["\n\n"])
    embedded.shared_prefix_attention = True
    try:
        shared = embedded.generate_batch(prompts, max_tokens=12, stop=["\n\n"])
        sampled = [embedded.generate_batch(prompts, max_tokens=6, temperature=1.0, seed=3) for _ in range(2)]
    finally:
        embedded.shared_prefix_attention = False
    assert [(c.text, c.finish_reason, c.completion_tokens) for c in shared] == \
        [(c.text, c.finish_reason, c.completion_tokens) for c in repeated]
    assert [c.text for c in sampled[0]] == [c.text for c in sampled[1]]
    assert embedded.model.config._attn_implementation == implementation  # switched for the batch only


def test_embedded_kept_rows_let_a_continuation_encode_only_its_new_tokens(embedded):
    shots = "".join(f"Q: {a} times {a + 1}?\nA: {a * (a + 1)}\n\n" for a in (3, 10, 25, 40))
    prompts = [shots + f"Q: {a} times {a + 1}?\nA:" for a in (7, 150, 12)]
    embedded.shared_prefix_attention, embedded.keep_rows = True, 8
    try:
        first = embedded.generate_batch(prompts, max_tokens=8, stop=["\n"])
        follow = [p + c.text + "\nQ: and 2 times 3?\nA:" for p, c in zip(prompts, first)]  # like a tool's output
        rows = [embedded._ids(f)[0].tolist() for f in follow]
        prefix_len = embedded._prefix_cache(rows, repeat=False)[0]
        reused = [embedded._kept_row(r, prefix_len) for r in rows]
        own = [len(embedded._ids(p)[0]) - prefix_len for p in prompts]
        assert all(k is not None and k[0] > n for k, n in zip(reused, own))  # the prompt and some reply kept
        continued, afresh = resumed_and_afresh(embedded, follow)
    finally:
        embedded.shared_prefix_attention, embedded.keep_rows = False, 0
        embedded._row_caches.clear()
    assert continued == afresh


def resumed_and_afresh(embedded, prompts):
    """``prompts``' greedy completions resuming the kept rows' states, then with every kept row dropped."""
    def complete():
        return [(c.text, c.completion_tokens) for c in embedded.generate_batch(prompts, max_tokens=8, stop=["\n"])]

    resumed = complete()
    embedded._row_caches.clear()
    return resumed, complete()


def test_lookup_draft_copies_what_followed_the_latest_match():
    from iclr24.llm.hf import lookup_draft

    assert lookup_draft([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2) == [7, 1]      # the latest of two matches
    assert lookup_draft([4, 5, 6, 4, 5], 3) == [6, 4, 5]                    # a 2-gram when no 3-gram matches
    assert lookup_draft([4, 5, 6, 7, 5], 3) == [] and lookup_draft([1, 2, 1, 2], 0) == []


def test_embedded_drafted_rows_decode_what_step_by_step_decodes(embedded):
    loop = "".join(f"x{i} = {i}\n" for i in range(6))  # text a model goes on copying
    prompts = [loop, "Q: 12 times 13?\nA:", loop + "y = 1\n"]
    calls = []
    hook = embedded.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        plain = embedded.generate_batch(prompts, max_tokens=24, stop=["y = 3"])
        steps, calls[:] = len(calls), []
        embedded.draft_tokens = 6
        drafted = embedded.generate_batch(prompts, max_tokens=24, stop=["y = 3"])
    finally:
        embedded.draft_tokens = 0
        hook.remove()
    assert [(c.text, c.finish_reason, c.completion_tokens) for c in drafted] == \
        [(c.text, c.finish_reason, c.completion_tokens) for c in plain]
    assert len(calls) < steps  # several tokens a step


def test_embedded_kept_row_resumes_under_a_longer_shared_prefix(embedded):
    shots = "".join(f"Q: {a} times {a + 1}?\nA: {a * (a + 1)}\n\n" for a in (3, 10, 25, 40))
    head = "Q: a longer question, with many more of its own tokens than the other questions have: "
    prompts = [shots + head + "12 times 13?\nA:", shots + "Q: 7 times 8?\nA:"]
    embedded.shared_prefix_attention, embedded.keep_rows = True, 8
    try:
        first = embedded.generate_batch(prompts, max_tokens=8, stop=["\n"])
        # the next batch's common prefix runs into the first row's own tokens: its kept states start earlier
        follow = [prompts[0] + first[0].text + "\nQ: and 2 times 3?\nA:", shots + head + "99 times 98?\nA:"]
        rows = [embedded._ids(f)[0].tolist() for f in follow]
        prefix_len = embedded._prefix_cache(rows, repeat=False)[0]
        start = next(s for key, (s, _) in embedded._row_caches.items() if list(key[:prefix_len + 1]) ==
                     rows[0][:prefix_len + 1])
        assert start < prefix_len and embedded._kept_row(rows[0], prefix_len) is not None
        continued, afresh = resumed_and_afresh(embedded, follow)
    finally:
        embedded.shared_prefix_attention, embedded.keep_rows = False, 0
        embedded._row_caches.clear()
    assert continued == afresh


def test_embedded_drafted_rows_stop_at_a_stop_string_or_the_limit_inside_a_draft(embedded):
    repeated = "The quick brown fox jumps over the lazy dog. " * 3  # copied: the stop falls inside an accepted draft
    prompts = [repeated, "Say it again: " + repeated]
    calls = [dict(max_tokens=30, stop=["lazy"]), dict(max_tokens=5)]
    plain = [embedded.generate_batch(prompts, **kwargs) for kwargs in calls]
    embedded.draft_tokens = 6
    try:
        drafted = [embedded.generate_batch(prompts, **kwargs) for kwargs in calls]
    finally:
        embedded.draft_tokens = 0
    assert [[(c.text, c.finish_reason, c.completion_tokens) for c in cs] for cs in drafted] == \
        [[(c.text, c.finish_reason, c.completion_tokens) for c in cs] for cs in plain]


def test_embedded_shared_prefix_attention_is_switched_back_after_an_error(embedded):
    from iclr24.llm.hf import SHARED_PREFIX_ATTENTION

    shots = "".join(f"Q: {a} times {a + 1}?\nA: {a * (a + 1)}\n\n" for a in (3, 10, 25, 40))
    implementation = embedded.model.config._attn_implementation

    def fail(*_):
        if embedded.model.config._attn_implementation == SHARED_PREFIX_ATTENTION:
            raise KeyboardInterrupt

    hook = embedded.model.register_forward_hook(fail)
    embedded.shared_prefix_attention = True
    try:
        with pytest.raises(KeyboardInterrupt):
            embedded.generate_batch([shots + "Q: 7 times 8?\nA:", shots + "Q: 9 times 10?\nA:"], max_tokens=4)
    finally:
        embedded.shared_prefix_attention = False
        hook.remove()
    assert embedded.model.config._attn_implementation == implementation


def test_embedded_sampled_rows_are_never_drafted(embedded):
    loop = "".join(f"x{i} = {i}\n" for i in range(6))
    prompts = [loop, loop + "y = 1\n"]
    plain = embedded.generate_batch(prompts, max_tokens=12, temperature=0.7, seed=5)
    embedded.draft_tokens = 6
    try:
        drafted = embedded.generate_batch(prompts, max_tokens=12, temperature=0.7, seed=5)
    finally:
        embedded.draft_tokens = 0
    assert [(c.text, c.completion_tokens) for c in drafted] == [(c.text, c.completion_tokens) for c in plain]


def test_generate_batch_falls_back_to_one_call_per_prompt(tmp_path):
    from iclr24.llm import LoggedModel, format_chat, generate_batch

    llm = LoggedModel(get_model("scripted", outputs=["a", "b"]), tmp_path / "calls.jsonl")
    assert [c.text for c in generate_batch(llm, ["1", "2"], seed=4)] == ["a", "b"]
    assert [c["seed"] for c in llm.model.calls] == [4, 5]
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2
    assert format_chat(llm, [{"role": "user", "content": "hi"}]) is None


def test_embedded_logprobs_are_the_models_own_and_cover_the_text(embedded):
    prompt = "The capital of France is"
    greedy, = embedded.generate(prompt, max_tokens=5, logprobs=True)
    assert "".join(greedy.tokens) == greedy.text and len(greedy.logprobs) == len(greedy.tokens)
    first = embedded.tokenize(greedy.tokens[0])
    assert greedy.logprobs[0] == pytest.approx(float(embedded.next_token_logprobs(embedded.tokenize(prompt))[first[0]]),
                                               abs=1e-4)
    # greedy picks the most likely token: nothing else beats it
    assert greedy.logprobs[0] == pytest.approx(float(embedded.next_token_logprobs(embedded.tokenize(prompt)).max()),
                                               abs=1e-4)
    cut, = embedded.generate(prompt, max_tokens=5, stop=["."], logprobs=True)
    assert "".join(cut.tokens).startswith(cut.text) and len(cut.tokens) < len(greedy.tokens) + 1


def test_embedded_step_cache_gives_what_a_full_forward_pass_gives(embedded):
    ids = embedded.tokenize("The history of the city begins with a river")
    full = torch.log_softmax(embedded.model(torch.tensor([ids])).logits[0].detach().double(), -1)
    for t in range(2, len(ids) + 1):  # a growing sequence: one new token encoded a call
        assert torch.allclose(embedded.next_token_logprobs(ids[:t]), full[t - 1], atol=1e-4)
    assert torch.allclose(embedded.next_token_logprobs(ids[:3]), full[2], atol=1e-4)  # back to a shorter prefix
    branch = ids[:3] + [ids[5], ids[4]]  # a different continuation of a cached prefix
    expected = torch.log_softmax(embedded.model(torch.tensor([branch])).logits[0, -1].detach().double(), -1)
    assert torch.allclose(embedded.next_token_logprobs(branch), expected, atol=1e-4)
    assert torch.allclose(embedded.sequence_logprobs(ids, 4), full[4:], atol=1e-4)
    with pytest.raises(ValueError, match=rf"start must lie in \[0, {len(ids)}\), got {len(ids)}"):
        embedded.sequence_logprobs(ids, len(ids))


def test_embedded_top_p_near_zero_is_greedy(embedded):
    from iclr24.llm import generate_batch

    prompts = ["2 + 2 =", "The sky is"]
    greedy = [c.text for c in generate_batch(embedded, prompts, max_tokens=6)]
    nucleus_only = [c.text for c in generate_batch(embedded, prompts, max_tokens=6, temperature=1.5, top_p=1e-9,
                                                   seed=0)]
    assert nucleus_only == greedy
    assert embedded.generate(prompts[0], max_tokens=6, temperature=1.5, top_p=1e-9, seed=0)[0].text == greedy[0]



def test_embedded_system_message_replaces_the_templates_default(embedded):
    from iclr24.llm import with_system

    hi = [{"role": "user", "content": "hi"}]
    rendered = embedded.format_chat(with_system(hi, "Answer in French."))
    assert "Answer in French." in rendered and "Answer in French." not in embedded.format_chat(hi)
    chat, = embedded.generate(hi, max_tokens=4, system="Answer in French.")
    assert chat.prompt_tokens == len(embedded.tokenize(rendered))


def test_embedded_format_chat_ends_at_the_assistant_turn(embedded):
    text = embedded.format_chat([{"role": "user", "content": "hi"}])
    assert "hi" in text and text.rstrip().endswith("assistant")


def test_a_backend_spec_carries_its_main_argument(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="absent"):
        get_model(f"hf:{tmp_path / 'absent'}")
    monkeypatch.setenv("ICLR24_LLM", f"hf:{tmp_path / 'absent'}")
    with pytest.raises(FileNotFoundError, match="absent"):
        get_model()
    with pytest.raises(ValueError, match="--llm hf:/path/to/folder"):
        get_model("hf")
    with pytest.raises(ValueError, match="unknown language-model backend 'gpt'"):
        get_model("gpt:4")


def test_hf_backend_refuses_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="needs a local checkpoint folder"):
        get_model("hf", path=tmp_path)


# --- llama.cpp (optional extra; these run where llama-cpp-python is installed) -----------------------------------


def test_llamacpp_without_its_package_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.delitem(sys.modules, "iclr24.llm.llamacpp", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'iclr24\[llamacpp\]'"):
        get_model("llamacpp")


@pytest.fixture(scope="module")
def llamacpp():
    pytest.importorskip("llama_cpp", reason="the optional llamacpp extra is not installed")
    return get_model("llamacpp")


def test_llamacpp_answers_and_scores_like_the_embedded_model(llamacpp):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    first = llamacpp.generate(messages, max_tokens=24)[0]
    assert "Paris" in first.text and llamacpp.generate(messages, max_tokens=24)[0].text == first.text
    logprobs = llamacpp.next_token_logprobs(llamacpp.tokenize("The capital of France is"))
    assert torch.logsumexp(logprobs, 0).item() == pytest.approx(0.0, abs=1e-9)
    assert llamacpp.detokenize([int(logprobs.argmax())]).strip() == "Paris"


def test_llamacpp_json_schema_constrains_the_output(llamacpp):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    out = llamacpp.generate([{"role": "user", "content": "What is 2 + 2? Reply in JSON."}], max_tokens=32,
                            json_schema=schema)[0]
    assert isinstance(json.loads(out.text)["answer"], int)


# --- faults: the server answers, but not with a valid completion -------------------------------------------------


class _Faulty(JSONHandler):
    """Answers every POST with ``reply`` (a dict sent as JSON, or raw bytes), ``content_type`` and ``trickle``."""

    reply: object = {}
    content_type = "application/json"
    trickle = 0.0

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(_Faulty.reply).encode() if isinstance(_Faulty.reply, dict) else _Faulty.reply
        self.send_response(200)
        self.send_header("Content-Type", _Faulty.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for byte in range(len(data)):
            self.wfile.write(data[byte:byte + 1])
            self.wfile.flush()
            time.sleep(_Faulty.trickle)


def _completion(choices, usage=None):
    return {"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": choices,
            **({"usage": usage} if usage is not False else {})}


def _text_choice(text="ok", logprobs=None):
    return {"index": 0, "text": text, "finish_reason": "stop", "logprobs": logprobs}


@pytest.fixture
def faulty():
    _Faulty.reply, _Faulty.content_type, _Faulty.trickle = {}, "application/json", 0.0
    with serving(_Faulty) as url:
        yield url


@pytest.mark.parametrize("reply, message", [
    (_completion([]), "0 choices for n=1"),
    (_completion([_text_choice(42)]), "a choice whose text is a int"),
    (_completion([_text_choice(), _text_choice()]), "2 choices for n=1"),
    (_completion([_text_choice(logprobs={"tokens": ["a"], "token_logprobs": [float("nan")]})]), "numbers <= 0"),
    (_completion([_text_choice(logprobs={"tokens": ["a"], "token_logprobs": [0.7]})]), "numbers <= 0"),
    (_completion([_text_choice(logprobs={"tokens": ["a", "b"], "token_logprobs": [-1.0]})]),
     "2 tokens with 1 log-probabilities"),
    (b"{not json", "not a completion|invalid response"),
    (b"<html><body>Bad gateway</body></html>", "not a completion|invalid response"),
    (json.dumps(_completion([_text_choice()]))[:25].encode(), "not a completion|invalid response"),
])
def test_openai_backend_refuses_invalid_responses_naming_the_server(faulty, reply, message):
    _Faulty.reply = reply
    if isinstance(reply, bytes) and reply.startswith(b"<html"):
        _Faulty.content_type = "text/html"
    from iclr24.llm.openai_backend import ResponseError

    model = get_model("openai", model="m", base_url=faulty, max_retries=0, timeout=5)
    with pytest.raises(ResponseError, match=message) as info:
        model.generate("x", logprobs=True)
    assert faulty.rsplit("/v1", 1)[0] in str(info.value)


def test_a_stop_string_sent_back_is_cut_with_the_tokens_past_it(faulty):
    tokens, values = ["a", " b", " STOP", " c"], [-0.1, -0.2, -0.3, -0.4]
    _Faulty.reply = _completion([{**_text_choice("a b STOP c"), "finish_reason": "length",
                                  "logprobs": {"tokens": tokens, "token_logprobs": values}}])
    model = get_model("openai", model="m", base_url=faulty, max_retries=0)
    cut, = model.generate("x", stop=["ST", "\n"], logprobs=True)
    assert (cut.text, cut.finish_reason, cut.tokens, cut.logprobs) == ("a b ", "stop", ("a", " b"), (-0.1, -0.2))
    assert cut.completion_tokens == 2
    whole, = model.generate("x", stop=["zzz"], logprobs=True)
    assert (whole.text, whole.finish_reason, whole.tokens) == ("a b STOP c", "length", tuple(tokens))


def test_more_choices_than_n_are_refused_and_fewer_are_topped_up_one_request_each(faulty):
    from iclr24.llm.openai_backend import ResponseError

    _Faulty.reply = _completion([_text_choice("one")], usage={"prompt_tokens": 1, "completion_tokens": 1})
    model = get_model("openai", model="m", base_url=faulty, max_retries=0)
    assert [c.text for c in model.generate("x", n=3, seed=5)] == ["one"] * 3
    _Faulty.reply = _completion([_text_choice("a"), _text_choice("b")])
    with pytest.raises(ResponseError, match="2 choices for n=1"):
        model.generate("x")


class _OneChoiceOnly(JSONHandler):
    """Refuses n > 1 with a 400, as llama.cpp's server does; records the seeds it was sent."""

    seeds: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("n", 1) != 1:
            return self._send(400, {"error": {"message": "Only one completion choice is allowed"}})
        _OneChoiceOnly.seeds.append(body.get("seed"))
        self._send(200, _completion([_text_choice(f"seed {body.get('seed')}")]))


def test_a_server_refusing_n_gets_one_request_per_choice_with_successive_seeds():
    _OneChoiceOnly.seeds = []
    with serving(_OneChoiceOnly) as url:
        model = get_model("openai", model="m", base_url=url, max_retries=0)
        assert [c.text for c in model.generate("x", n=3, seed=10)] == ["seed 10", "seed 11", "seed 12"]
        assert _OneChoiceOnly.seeds == [10, 11, 12]


def test_openai_backend_keeps_a_valid_completion_without_usage(faulty):
    _Faulty.reply = _completion([_text_choice("fine")], usage=None)
    completion, = get_model("openai", model="m", base_url=faulty, max_retries=0).generate("x")
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == ("fine", 0, 0)
    # a null text (a refusal, or a reasoning model cut off) is the empty text; -inf is a probability of 0
    _Faulty.reply = _completion([_text_choice(None, logprobs={"tokens": ["a"], "token_logprobs": [float("-inf")]})])
    completion, = get_model("openai", model="m", base_url=faulty, max_retries=0).generate("x", logprobs=True)
    assert completion.text == "" and completion.logprobs == (float("-inf"),)


def test_openai_backend_top_logprobs_are_checked(faulty):
    _Faulty.reply = _completion([_text_choice(logprobs={"tokens": ["a"], "token_logprobs": [-0.1],
                                                        "top_logprobs": [{"a": -0.1, "b": 3.0}]})])
    from iclr24.llm.openai_backend import ResponseError

    with pytest.raises(ResponseError, match="numbers <= 0"):
        get_model("openai", model="m", base_url=faulty, max_retries=0).next_token_top_logprobs("x", k=2)
    _Faulty.reply["choices"][0]["logprobs"]["top_logprobs"] = [{"a": -0.1, "b": -1.0, "c": -2.0}]
    assert len(get_model("openai", model="m", base_url=faulty, max_retries=0).next_token_top_logprobs("x", k=2)) == 3
    _Faulty.reply["choices"][0]["logprobs"]["top_logprobs"] = [{"a": -0.1, "b": -1.0, "c": -2.0, "d": -3.0}]
    with pytest.raises(ResponseError, match="4 top logprobs for k=2"):
        get_model("openai", model="m", base_url=faulty, max_retries=0).next_token_top_logprobs("x", k=2)


def test_openai_backend_has_a_total_deadline_for_a_trickled_body(faulty):
    _Faulty.reply, _Faulty.trickle = _completion([_text_choice("slow")]), 0.05  # ~6 s for the whole body
    model = get_model("openai", model="m", base_url=faulty, max_retries=0, timeout=1, deadline=1.5)
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="within the 1.5 s deadline"):
        model.generate("x")
    assert time.perf_counter() - start < 5  # well past the 1.5 s deadline for a loaded machine, short of the 6 s body
    with pytest.raises(ValueError, match="deadline must be a positive"):
        get_model("openai", model="m", base_url=faulty, deadline=0)


# --- HTTP faults: each one a clear error of the library's own, naming the server and the cause ------------------


class _Fault(JSONHandler):
    mode = ""
    calls = 0

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        _Fault.calls += 1
        if _Fault.mode == "huge":  # 40 MB of text for max_tokens=8, in chunks, no Content-Length
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": '
                             b'[{"index": 0, "finish_reason": "stop", "text": "')
            for _ in range(40):
                try:
                    self.wfile.write(b"x" * 2**20)
                except (BrokenPipeError, ConnectionResetError):
                    return
            self.wfile.write(b'"}]}')
        elif _Fault.mode == "reset":
            self.connection.shutdown(2)
        elif _Fault.mode in ("500", "429", "429-later"):
            self.send_response(int(_Fault.mode[:3]))
            self.send_header("Content-Type", "application/json")
            if _Fault.mode == "429-later":
                self.send_header("Retry-After", "3600")
            data = json.dumps({"error": {"message": "slow down" if "429" in _Fault.mode else "overloaded"}}).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            choice = {"index": 0, "finish_reason": _Fault.mode.split(":")[1] if ":" in _Fault.mode else "stop"}
            if _Fault.mode == "no-text":
                pass
            elif _Fault.mode == "null-text:length":
                choice["text"] = None
            else:
                choice["text"] = "fine"
            usage = {"prompt_tokens": 1, "completion_tokens": 500 if _Fault.mode == "overlong" else 1,
                     "total_tokens": 2}
            self._send(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                             "choices": [choice], "usage": usage})


@pytest.fixture
def fault():
    _Fault.mode, _Fault.calls = "", 0
    with serving(_Fault) as url:
        yield url


def test_a_body_past_the_cap_is_refused(fault):
    from iclr24.llm.openai_backend import ResponseError

    _Fault.mode = "huge"
    model = get_model("openai", model="m", base_url=fault, max_retries=0, timeout=20, max_response_bytes=2**20)
    with pytest.raises(ResponseError, match=r"sent a body over max_response_bytes \(1048576 bytes\): the body passed"):
        model.generate("x", max_tokens=8)


def test_more_tokens_than_max_tokens_is_refused(fault):
    from iclr24.llm.openai_backend import ResponseError

    _Fault.mode = "overlong"
    with pytest.raises(ResponseError, match="500 completion tokens for max_tokens=8"):
        get_model("openai", model="m", base_url=fault, max_retries=0).generate("x", max_tokens=8)


def test_a_missing_text_is_an_error_and_a_null_one_keeps_its_finish_reason(fault):
    from iclr24.llm.openai_backend import ResponseError

    model = get_model("openai", model="m", base_url=fault, max_retries=0)
    _Fault.mode = "no-text"
    with pytest.raises(ResponseError, match="without a 'text' field"):
        model.generate("x")
    _Fault.mode = "null-text:length"
    completion, = model.generate("x")
    assert (completion.text, completion.finish_reason) == ("", "length")
    _Fault.mode = "text:content_filter"
    assert model.generate("x")[0].finish_reason == "content_filter"


def test_server_errors_are_wrapped_and_retried(fault):
    from iclr24.llm.openai_backend import RateLimitError, ServerError

    _Fault.mode = "500"
    with pytest.raises(ServerError, match=r"answered 500: overloaded") as info:
        get_model("openai", model="m", base_url=fault, max_retries=1).generate("x")
    assert info.value.status == 500 and _Fault.calls == 2 and fault.rsplit("/v1", 1)[0] in str(info.value)
    _Fault.mode, _Fault.calls = "429", 0
    with pytest.raises(RateLimitError, match=r"rate-limited this client \(429\) in 1 tries: slow down"):
        get_model("openai", model="m", base_url=fault, max_retries=0).generate("x")


def test_a_retry_after_past_the_deadline_is_reported_at_once(fault):
    from iclr24.llm.openai_backend import RateLimitError

    _Fault.mode = "429-later"
    start = time.perf_counter()
    with pytest.raises(RateLimitError, match=r"asks to retry after 3600 s, past this call's 30 s deadline") as info:
        get_model("openai", model="m", base_url=fault, max_retries=3, deadline=30).generate("x")
    assert info.value.retry_after == 3600 and _Fault.calls == 1 and time.perf_counter() - start < 10


def test_a_reset_connection_is_not_called_a_timeout(fault):
    _Fault.mode = "reset"
    with pytest.raises(ConnectionError, match="reset or closed before a complete answer"):
        get_model("openai", model="m", base_url=fault, max_retries=0, timeout=10).generate("x")


@pytest.mark.parametrize("extra", [{"sliding_window": 4096}, {"softcap": 30.0}])
def test_shared_prefix_attention_refuses_what_it_would_drop(extra):
    from iclr24.llm.hf import shared_prefix_attention

    q, name = torch.zeros(1, 2, 3, 4), next(iter(extra))
    with pytest.raises(NotImplementedError, match=f"plain causal attention; this model's layers use \\['{name}'\\]"):
        shared_prefix_attention(SimpleNamespace(layer_idx=0), q, q, q, None, shared_prefix=object(), **extra)


def test_the_stand_in_rule_is_one_for_every_llm_claim(tmp_path):
    """The embedded model and a scripted replay stand in for a paper's models; a model the user names is the
    subject; a LoggedModel is judged by the model it wraps."""
    from iclr24.llm import LoggedModel, get_model, stand_in_reason

    scripted = get_model("scripted", outputs=["x"])
    assert stand_in_reason(scripted, "GPT-4") == "a scripted model stands in for GPT-4"
    assert stand_in_reason(LoggedModel(scripted, tmp_path / "log.jsonl"), "GPT-4").endswith("for GPT-4")

    class Named:  # any other backend: a served model, a local checkpoint, a GGUF file
        name = "my-model"

    assert stand_in_reason(Named(), "GPT-4") == ""
