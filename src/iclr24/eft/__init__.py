"""EFT: emulated fine-tuning, and up-scaling a large base with a small model's fine-tuning.

Eric Mitchell, Rafael Rafailov, Archit Sharma, Chelsea Finn, Christopher D. Manning. "An Emulator
for Fine-Tuning Large Language Models using Small Language Models". ICLR 2024.
https://arxiv.org/abs/2310.12962

    from iclr24.eft import EFTModel, eft_logprobs, speculative_generate
    eft = EFTModel(base_large, ft_small, base_small, beta=1.0)   # three LanguageModels, one tokenizer
    eft.generate("...", max_tokens=64, temperature=0.7, top_p=0.9)
    speculative_generate(eft, ft_small, "...", k=4)               # the small fine-tuned model drafts
"""

from iclr24.eft.eft import EFTModel, check_shared_tokenizer, eft_logprobs, implicit_reward, interpolate_rewards
from iclr24.eft.speculative import SpeculativeResult, speculative_generate
from iclr24.eft.toy import ToyWorld, deepened, train_lm

__all__ = ["EFTModel", "SpeculativeResult", "ToyWorld", "check_shared_tokenizer", "deepened", "eft_logprobs",
           "implicit_reward", "interpolate_rewards", "speculative_generate", "train_lm"]
