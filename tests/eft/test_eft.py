"""The EFT formula on hand-computed cases, its invariants, and EFTModel over local and HTTP backends."""

import json
import math

import numpy as np
import pytest
import torch

from iclr24.core.tiny_lm import TinyLM, TinyLMConfig
from iclr24.eft import EFTModel, eft_logprobs, implicit_reward, interpolate_rewards
from iclr24.llm.torch_lm import TorchLM, WordVocab
from tests.http_stub import JSONHandler, serving

L = torch.tensor([0.5, 0.3, 0.2]).log()
FT = torch.tensor([0.1, 0.8, 0.1]).log()
S = torch.tensor([0.4, 0.4, 0.2]).log()


def test_eft_is_the_large_base_reweighted_by_the_small_models_ratio():
    # p_EFT ∝ p_L * p_ft / p_S = (.5 * .1 / .4, .3 * .8 / .4, .2 * .1 / .2) = (.125, .6, .1)
    expected = torch.tensor([0.125, 0.6, 0.1]) / 0.825
    assert torch.allclose(eft_logprobs(L, FT, S).exp(), expected.double(), atol=1e-12)
    # beta scales the log-ratio: p ∝ p_L (p_ft / p_S)^2
    squared = torch.tensor([0.5 * 0.0625, 0.3 * 4.0, 0.2 * 0.25])
    assert torch.allclose(eft_logprobs(L, FT, S, beta=2.0).exp(), (squared / squared.sum()).double(), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_invariants(dtype):
    g = torch.Generator().manual_seed(0)
    large, ft, small = (torch.log_softmax(torch.randn(2, 50, generator=g, dtype=dtype), -1) for _ in range(3))
    assert torch.allclose(eft_logprobs(large, small, small), large.double(), atol=1e-9)  # EFT(L, S, S) = L
    assert torch.allclose(eft_logprobs(large, ft, small, beta=0.0), large.double(), atol=1e-9)  # beta 0: base
    assert torch.allclose(eft_logprobs(small, ft, small), ft.double(), atol=1e-9)  # EFT(S, ft, S) = ft
    assert torch.allclose(eft_logprobs(large, ft, small).exp().sum(-1), torch.ones(2, dtype=torch.float64))
    # logits work as well as log-probabilities: each one's normaliser cancels
    assert torch.allclose(eft_logprobs(large + 3, ft - 1, small + 7), eft_logprobs(large, ft, small), atol=1e-9)


def test_numpy_in_numpy_out_and_tokens_ruled_out_by_both_small_models():
    out = eft_logprobs(L.numpy(), FT.numpy(), S.numpy())
    assert isinstance(out, np.ndarray) and np.isclose(np.exp(out).sum(), 1.0)
    ft, small = FT.clone(), S.clone()
    ft[2] = small[2] = -math.inf  # -inf - -inf: no reward, not NaN
    combined = eft_logprobs(L, ft, small)
    assert not combined.isnan().any() and math.isclose(float(combined.exp().sum()), 1.0)
    large = L.clone()
    large[0] = -math.inf  # the large base rules token 0 out: so does EFT
    assert eft_logprobs(large, FT, S)[0] == -math.inf


def test_a_token_a_small_model_rules_out_never_makes_nan():
    uniform = torch.full((4,), 0.25).log()
    half = torch.tensor([0.5, 0.5, 0.0, 0.0]).log()  # base_small rules out tokens 2 and 3; ft_small does not
    out = eft_logprobs(uniform, uniform, half)
    assert not out.isnan().any() and out.exp().sum() == pytest.approx(1.0) and out[2] > out[0]
    out = eft_logprobs(uniform, half, uniform, beta=-1.0)
    assert not out.isnan().any() and out.exp().sum() == pytest.approx(1.0)
    large = uniform.clone()
    large[2] = -math.inf  # ruled out by the large base: stays ruled out, whatever the small ones say
    assert eft_logprobs(large, uniform, half)[2] == -math.inf
    assert float(eft_logprobs(uniform, uniform, uniform, beta=np.float32(0.5))[0]) == pytest.approx(math.log(0.25))
    with pytest.raises(ValueError, match="beta must be a finite number, got True"):
        eft_logprobs(uniform, uniform, uniform, beta=True)


def test_interpolated_rewards_move_between_the_two_behaviours():
    harmless = torch.tensor([0.6, 0.2, 0.2]).log()
    assert torch.allclose(interpolate_rewards(S, [FT, harmless], [1.0, 0.0]), implicit_reward(FT, S))
    assert torch.allclose(interpolate_rewards(S, [FT, harmless], [0.0, 1.0]), implicit_reward(harmless, S))
    half = interpolate_rewards(S, [FT, harmless], [0.5, 0.5])
    assert torch.allclose(half, (0.5 * (FT - S) + 0.5 * (harmless - S)).double())
    assert torch.allclose(eft_logprobs(L, reward=interpolate_rewards(S, [FT], [1.0])), eft_logprobs(L, FT, S))


@pytest.mark.parametrize("call, match", [
    (lambda: eft_logprobs(L, FT[:2], S[:2]), "the models must share a vocabulary"),
    (lambda: eft_logprobs(L, FT, S, beta=float("nan")), "beta must be a finite number"),
    (lambda: eft_logprobs(L), "pass ft_small and base_small, or reward="),
    (lambda: eft_logprobs(L, FT, S, reward=FT - S), "not both"),
    (lambda: interpolate_rewards(S, [FT], [0.5, 0.5]), "the same non-zero length"),
    (lambda: implicit_reward(FT, S[:2]), "the same shape"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- EFTModel over local models -------------------------------------------------------------------------------

VOCAB = WordVocab(["<eos>", "a", "b", "c", "d", "e"])


def tiny(seed, width=16, vocab=VOCAB, name=None):
    torch.manual_seed(seed)
    module = TinyLM(TinyLMConfig(vocab_size=len(vocab), context=32, n_layers=1, n_heads=2, d_model=width))
    return TorchLM(module, vocab, name=name or f"tiny{seed}")


def test_eft_model_combines_its_components_at_every_position():
    large, ft, small = tiny(0, 32), tiny(1), tiny(2)
    eft = EFTModel(large, ft, small, beta=1.5)
    ids = VOCAB.encode("a b c")
    expected = eft_logprobs(large.next_token_logprobs(ids), ft.next_token_logprobs(ids),
                            small.next_token_logprobs(ids), 1.5)
    assert torch.allclose(eft.next_token_logprobs(ids), expected)
    rows = eft.sequence_logprobs(ids)
    assert rows.shape == (3, len(VOCAB))
    for t in range(3):
        assert torch.allclose(rows[t], eft.next_token_logprobs(ids[:t + 1]), atol=1e-9)


def test_eft_model_generates_greedily_from_the_combined_distribution():
    large, ft, small = tiny(0, 32), tiny(1), tiny(2)
    eft = EFTModel(large, ft, small)
    out, = eft.generate("a b", max_tokens=5, logprobs=True)
    ids = VOCAB.encode("a b")
    for token, score in zip(VOCAB.encode(out.text), out.logprobs):
        dist = eft.next_token_logprobs(ids)
        assert token == int(dist.argmax()) and score == pytest.approx(float(dist.max()))
        ids.append(token)
    assert out.tokens == tuple(out.text.split())
    # EFT(L, S, S) decodes exactly as L
    assert EFTModel(large, small, small).generate("a b", max_tokens=5)[0].text == \
        large.generate("a b", max_tokens=5)[0].text
    sampled = [c.text for c in eft.generate("a", max_tokens=4, temperature=1.0, seed=3, n=2)]
    assert sampled == [c.text for c in eft.generate("a", max_tokens=4, temperature=1.0, seed=3, n=2)]


def test_eft_model_refuses_models_that_do_not_share_a_tokenizer():
    other = WordVocab(["<eos>", "a", "b", "c", "d", "x"])
    with pytest.raises(ValueError, match=r"share a tokenizer: 'tiny0' and 'odd' differ in their vocabulary"):
        EFTModel(tiny(0), tiny(1), tiny(2, vocab=other, name="odd"))

    class Opaque:  # no vocabulary to read and a tokenize that refuses the probe: nothing to compare
        def __init__(self, model):
            self.model, self.name, self.capabilities = model, "opaque", model.capabilities

        def next_token_logprobs(self, ids):
            return self.model.next_token_logprobs(ids)

        def tokenize(self, text):
            raise NotImplementedError

    with pytest.raises(ValueError, match=r"'tiny1' and 'odd' differ"):  # the other two are still compared
        EFTModel(Opaque(tiny(0)), tiny(1), tiny(2, vocab=other, name="odd"))
    with pytest.raises(ValueError, match="top_k must be"):
        EFTModel(tiny(0), tiny(1), tiny(2), top_k=0)
    with pytest.raises(ValueError, match="at least one token"):
        EFTModel(tiny(0), tiny(1), tiny(2)).generate("")
    with pytest.raises(TypeError, match="ft_small must be a LanguageModel"):
        EFTModel(tiny(0), object(), tiny(2))
    with pytest.raises(ValueError, match="beta must be a finite number"):
        EFTModel(tiny(0), tiny(1), tiny(2), beta=math.inf)
    assert EFTModel(tiny(0), tiny(1), tiny(2), beta=torch.tensor(0.5)).beta == 0.5


def _noisy_copy(model, seed, scale=0.05):
    """A second model from the same checkpoint: a deep copy with seeded Gaussian noise on every weight
    (``scale`` x the tensor's standard deviation), so it shares the tokenizer and differs in its distribution."""
    import copy

    other = copy.deepcopy(model)
    other.name = f"{model.name}+noise{seed}"
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in other.model.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * scale * weight.std())
    return other


def _proxy_tuning_logprobs(base, expert, antiexpert, ids, alpha):
    """Proxy-tuning's arithmetic (Liu et al. 2024), written here from the raw transformers logits of one full
    forward pass per model, without the library's caches or formula: at every position
    ``softmax(base + alpha * (expert - antiexpert))`` over the vocabulary, in float64."""
    with torch.no_grad():
        logits = [m.model(input_ids=torch.tensor([ids])).logits[0].double() for m in (base, expert, antiexpert)]
    return torch.log_softmax(logits[0] + alpha * (logits[1] - logits[2]), -1)


@pytest.fixture(scope="module")
def smollm2_trio():
    """Three distinct models from the embedded SmolLM2: the checkpoint (large base) and two noisy copies (the
    small fine-tuned model and its base), so the reward ft - base_small is far from zero."""
    from iclr24.llm import get_model

    llm = get_model("embedded")
    return llm, _noisy_copy(llm, seed=1), _noisy_copy(llm, seed=2)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_embedded_smollm2_eft_equals_proxy_tuning_arithmetic_with_a_nonzero_reward(smollm2_trio, beta):
    large, ft, small = smollm2_trio
    ids = large.tokenize("The capital of France is Paris, and the capital of Italy is")
    expected = _proxy_tuning_logprobs(large, ft, small, ids, beta)
    eft = EFTModel(large, ft, small, beta=beta)
    # the reward is not zero, and EFT is none of its parts: an identity could not pass this by accident
    reward = torch.as_tensor(ft.next_token_logprobs(ids)) - torch.as_tensor(small.next_token_logprobs(ids))
    assert float(reward.abs().max()) > 1.0
    last = expected[-1]
    for part in (large, ft, small):
        assert float((last - torch.as_tensor(part.next_token_logprobs(ids)).double()).abs().max()) > 0.1
    # every position (one forward pass per part) and the last (the step cache), to float32 rounding
    assert torch.allclose(eft.sequence_logprobs(ids), expected, atol=2e-4, rtol=0)
    assert torch.allclose(eft.next_token_logprobs(ids), last, atol=2e-4, rtol=0)
    # greedy decoding follows proxy-tuning's argmax token by token
    out, = eft.generate("The capital of France is Paris, and the capital of Italy is", max_tokens=6)
    decoded = list(ids)
    for _ in range(6):
        decoded.append(int(_proxy_tuning_logprobs(large, ft, small, decoded, beta)[-1].argmax()))
    assert out.text == large.detokenize(decoded[len(ids):])


def test_embedded_model_identities_hold_on_distinct_models(smollm2_trio):
    """EFT(L, S, S) = L and beta 0 gives L, with S a different model from L (the zero reward is S - S)."""
    large, _, small = smollm2_trio
    ids = large.tokenize("The capital of France is")
    base = torch.as_tensor(large.next_token_logprobs(ids)).double()
    assert float((base - torch.as_tensor(small.next_token_logprobs(ids)).double()).abs().max()) > 0.1
    assert torch.allclose(EFTModel(large, small, small).next_token_logprobs(ids), base, atol=1e-4, rtol=0)
    assert torch.allclose(EFTModel(large, small, small, beta=0.0).next_token_logprobs(ids), base, atol=1e-4, rtol=0)


# --- over HTTP: the union of top-k lists ----------------------------------------------------------------------

TOPS = {"large": {" Paris": -0.2, " Lyon": -2.0}, "ft": {" Paris": -1.0, "<|endoftext|>": -0.5},
        "small": {" Lyon": -0.3, " Paris": -1.5}}


class _TopK(JSONHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        top = TOPS[body["model"]]
        token = max(top, key=top.get)
        self._send(200, {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "text": token, "finish_reason": "length",
                                      "logprobs": {"tokens": [token], "token_logprobs": [top[token]],
                                                   "top_logprobs": [top], "text_offset": [0]}}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def test_over_http_eft_works_on_the_union_of_top_k_lists():
    from iclr24.llm import get_model

    with serving(_TopK) as url:
        models = [get_model("openai", model=m, base_url=url, max_retries=0) for m in ("large", "ft", "small")]
        # the OpenAI API has no tokenizer: the shared-tokenizer check cannot run, and says so
        with pytest.warns(UserWarning, match=r"could not check that 'large' and 'ft', 'large' and 'small', 'ft' and "
                                             r"'small' share a tokenizer"):
            eft = EFTModel(*models)
        assert not eft.capabilities.full_logits and "union" in eft.approximation
        dist = eft.next_token_top_logprobs("The capital of France is")
        # a token missing from a list takes that list's lowest value
        raw = {" Paris": -0.2 + (-1.0 - -1.5), " Lyon": -2.0 + (-1.0 - -0.3),
               "<|endoftext|>": -2.0 + (-0.5 - -1.5)}
        norm = math.log(sum(math.exp(v) for v in raw.values()))
        assert dist == pytest.approx({t: v - norm for t, v in raw.items()})
        out, = eft.generate("The capital of France is", max_tokens=3, logprobs=True)
        assert out.text == " Paris" * 3 and out.tokens == (" Paris",) * 3
        with pytest.raises(NotImplementedError, match="full next-token distribution"):
            eft.next_token_logprobs([1, 2])


class _TopKOnly:
    """A backend with top-k log-probabilities and a tokenizer (as llama.cpp's): no full logits, a probe to read."""

    def __init__(self, name, words):
        from iclr24.llm.base import Capabilities

        self.name, self.words = name, words
        self.capabilities = Capabilities(full_logits=False, top_logprobs_k=5, chat_template=False, grammar=False)

    def next_token_logprobs(self, ids):
        raise NotImplementedError

    def next_token_top_logprobs(self, prompt, k=5):
        return {" a": -0.5, " b": -1.0}

    def tokenize(self, text):
        return [self.words.get(word, 0) for word in text.split()]


def test_without_full_logits_tokenizers_are_still_compared_by_a_probe_text():
    same, other = {"The": 1, "quick": 2}, {"The": 1, "quick": 3}
    with pytest.raises(ValueError, match=r"'a' and 'c' differ in their tokenization of a probe text"):
        EFTModel(_TopKOnly("a", same), _TopKOnly("b", same), _TopKOnly("c", other))
