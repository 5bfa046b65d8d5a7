"""The synthetic world the reproduction trains its trio on: seeded, and the small models never see held-out facts."""

import pytest
import torch

from iclr24.core.tiny_lm import TinyLMConfig
from iclr24.eft import ToyWorld, train_lm
from iclr24.llm.base import decode_tokens, sample_token
from iclr24.llm.torch_lm import TorchLM, WordVocab


def test_world_is_seeded_and_splits_people():
    world, again = ToyWorld(seed=3), ToyWorld(seed=3)
    assert world.people == again.people and world.home == again.home and world.people != ToyWorld(seed=4).people
    assert set(world.known_small).isdisjoint(world.held_out) and len(world.held_out) == 160
    assert len(set(world.people)) == 200 and set(world.home.values()) <= set(world.cities)


def test_small_models_never_read_a_held_out_persons_city():
    world = ToyWorld()
    small_lines = [set(line.split()) for line in world.pretraining(world.known_small)
                   + world.fine_tuning(world.known_small)]
    held_out, cities = set(world.held_out), set(world.cities)
    assert held_out <= set().union(*small_lines)  # every name is mentioned ...
    assert not any(words & held_out and words & cities for words in small_lines)  # ... never beside a city
    large_text = " ".join(world.pretraining(world.people))
    assert all(f"{p} lives in {world.home[p]}" in large_text for p in world.people)
    for line in world.pretraining(world.people) + world.fine_tuning(world.people):
        world.vocab.encode(line)  # every word is in the vocabulary


def test_training_lowers_the_loss_and_is_deterministic():
    world = ToyWorld(n_people=12, n_cities=3, n_known_small=4)
    cfg = TinyLMConfig(vocab_size=len(world.vocab), context=16, n_layers=1, n_heads=2, d_model=16)
    a = train_lm(world.fine_tuning(world.people), world.vocab, cfg, steps=60, seed=0)
    b = train_lm(world.fine_tuning(world.people), world.vocab, cfg, steps=60, seed=0)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    ids = torch.tensor([world.vocab.encode(world.fine_tuning(world.people)[0])])
    untrained = train_lm(world.fine_tuning(world.people), world.vocab, cfg, steps=1, seed=0)
    assert a.loss(ids) < untrained.loss(ids)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_lm(["a"], world.vocab, cfg, steps=0, seed=0)


def test_word_vocab_and_torch_lm():
    vocab = WordVocab(["<eos>", "a", "b"])
    with pytest.raises(ValueError, match="the word 'z' is not in the vocabulary"):
        vocab.encode("a z")
    with pytest.raises(ValueError, match="end-of-sequence"):
        WordVocab(["a"])
    torch.manual_seed(0)
    from iclr24.core.tiny_lm import TinyLM

    lm = TorchLM(TinyLM(TinyLMConfig(vocab_size=3, context=16, n_layers=1, n_heads=1, d_model=8)), vocab)
    with pytest.raises(ValueError, match="no chat template"):
        lm.generate([{"role": "user", "content": "a"}])
    out, = lm.generate("a b", max_tokens=3, logprobs=True)
    assert len(out.tokens) == out.completion_tokens <= 3


def test_decode_tokens_stops_at_the_end_token_and_at_stop_strings():
    table = {(): 1, (1,): 2, (1, 2): 0}
    def next_logprobs(ids):
        return torch.nn.functional.one_hot(torch.tensor(table.get(tuple(ids[1:]), 1)), 3).double().log()
    text, finish, new, _ = decode_tokens(next_logprobs, [0], max_tokens=5, detokenize=lambda t: " ".join(map(str, t)),
                                         eos_id=0)
    assert (text, finish, new) == ("1 2", "stop", [1, 2])
    text, finish, _, _ = decode_tokens(next_logprobs, [0], max_tokens=5, detokenize=lambda t: " ".join(map(str, t)),
                                       stop=[" 2"])
    assert (text, finish) == ("1", "stop")
    assert sample_token(torch.tensor([0.1, 2.0, 0.3]).log()) == 1


def test_deepened_model_computes_the_same_logits_with_more_layers():
    from iclr24.core.tiny_lm import TinyLM
    from iclr24.eft import deepened

    torch.manual_seed(0)
    model = TinyLM(TinyLMConfig(vocab_size=11, context=16, n_layers=2, n_heads=2, d_model=16)).eval()
    deep = deepened(model, 5)
    ids = torch.randint(11, (2, 9))
    with torch.no_grad():
        assert torch.equal(deep(ids), model(ids))  # bit for bit: each added block adds exactly 0
    assert len(deep.blocks) == 5 and sum(p.numel() for p in deep.parameters()) > sum(
        p.numel() for p in model.parameters())
    # the added blocks are not empty: their attention and MLP input weights are random, so a pass computes them
    assert deep.blocks[4].attn.qkv.weight.abs().sum() > 0 and deep.blocks[4].mlp[0].weight.abs().sum() > 0
    assert torch.equal(deepened(model, 2)(ids), model(ids))
    state = torch.get_rng_state()
    assert torch.equal(deepened(model, 4, seed=1).blocks[3].attn.qkv.weight,
                       deepened(model, 4, seed=1).blocks[3].attn.qkv.weight)  # seeded
    assert torch.equal(torch.get_rng_state(), state)  # and the caller's random state untouched
    with pytest.raises(ValueError, match="n_layers must be an int >= the model's 2 layers"):
        deepened(model, 1)
