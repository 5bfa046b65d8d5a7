"""EFT decoding against plain decoding of the large model, with and without speculative decoding.

Two settings, tokens per second measured in one run (one thread):

1. The trio the reproduction trains (the quick preset's sizes): the large base alone, EFT (three
   models a token), and speculative EFT with the small fine-tuned model as the draft; then the same with the
   large base deepened by identity blocks to 16 layers (the reproduction's speed claim: the same distribution,
   a pass costing ~10x the draft's, as a 70B base against a 7B draft).
2. The embedded SmolLM2 as all three parts (a real LM, so the cost of three forward passes a
   token shows): transformers' ``generate`` with its key-value cache (what a user runs for the
   plain model), our token-by-token decoding through ``next_token_logprobs`` (its step cache
   encodes one new token a call), EFT, and speculative EFT (the draft equals the target here,
   so every draft is kept: an upper bound on acceptance).

    python benchmarks/eft.py [n_tokens]
"""

from __future__ import annotations

import sys
import time

import torch

from iclr24.core.tiny_lm import TinyLMConfig
from iclr24.eft import EFTModel, ToyWorld, deepened, speculative_generate, train_lm
from iclr24.llm.base import decode_tokens
from iclr24.llm.torch_lm import TorchLM


def rate(fn, n_tokens: int, repeats: int = 3) -> float:
    best = min(_timed(fn) for _ in range(repeats))
    return n_tokens / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plain(model, ids, n):
    return lambda: decode_tokens(model.next_token_logprobs, ids, max_tokens=n, detokenize=lambda t: "",
                                 temperature=1.0, seed=0)


def main(n_tokens: int = 32) -> None:
    torch.set_num_threads(1)
    world = ToyWorld()
    vocab = world.vocab
    large = TinyLMConfig(vocab_size=len(vocab), context=64, n_layers=3, n_heads=4, d_model=96)
    small = TinyLMConfig(vocab_size=len(vocab), context=64, n_layers=2, n_heads=2, d_model=48)
    print("training the trio (quick preset sizes) ...")
    trained_large = train_lm(world.pretraining(world.people), vocab, large, steps=600, seed=0)
    base_large = TorchLM(trained_large, vocab, name="L")
    bs = train_lm(world.pretraining(world.known_small), vocab, small, steps=400, seed=1)
    base_small = TorchLM(bs, vocab, name="S")
    ft_small = TorchLM(train_lm(world.fine_tuning(world.known_small), vocab, small, steps=150, seed=2, lr=1e-3,
                                init=bs), vocab, name="ft")
    eft = EFTModel(base_large, ft_small, base_small)
    ids = vocab.encode(world.question(world.held_out[0]))
    rows = {"large base alone": rate(plain(base_large, ids, n_tokens), n_tokens),
            "EFT": rate(plain(eft, ids, n_tokens), n_tokens),
            "EFT, speculative (k=4)": rate(lambda: speculative_generate(eft, ft_small, ids, k=4, max_tokens=n_tokens,
                                                                        seed=0), n_tokens)}
    _print("toy trio", rows, "large base alone")
    deep = EFTModel(TorchLM(deepened(trained_large, 16), vocab, name="L16"), ft_small, base_small)
    rows = {"EFT": rate(plain(deep, ids, n_tokens), n_tokens),
            "EFT, speculative (k=4)": rate(lambda: speculative_generate(deep, ft_small, ids, k=4, max_tokens=n_tokens,
                                                                        seed=0), n_tokens)}
    _print("toy trio, large base deepened to 16 layers", rows, "EFT")

    from iclr24.llm import get_model

    llm = get_model("embedded")
    ids = llm.tokenize("The history of the city begins")
    eft = EFTModel(llm, llm, llm)
    rows = {"transformers generate (KV cache)": rate(lambda: llm.generate("The history of the city begins",
                                                                           max_tokens=n_tokens, temperature=1.0,
                                                                           seed=0), n_tokens),
            "token by token (next_token_logprobs)": rate(plain(llm, ids, n_tokens), n_tokens, repeats=1),
            "EFT": rate(plain(eft, ids, n_tokens), n_tokens, repeats=1),
            "EFT, speculative (k=4, perfect draft)": rate(lambda: speculative_generate(
                eft, llm, ids, k=4, max_tokens=n_tokens, seed=0), n_tokens, repeats=1)}
    _print("embedded SmolLM2-135M as all three", rows, "transformers generate (KV cache)")


def _print(title, rows, reference):
    print(f"\n{title}: tokens/s")
    for label, value in rows.items():
        print(f"  {label:42s} {value:8.1f}   ratio to {reference!r}: {value / rows[reference]:.2f}")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
