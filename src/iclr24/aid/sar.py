"""Systematic associative recall (SAR), the AID paper's synthetic test of systematic generalisation.

Four disjoint word lists X1, X2, Y1, Y2. A sequence shows pairs (x, y) and then asks for the y of each x.
Training combinations: X1[:ratio] x (Y1 u Y2), X1[ratio:] x Y2 and X2 x Y1. X2 x Y2 is never seen in
training: a model that binds x as a role and y as a filler, whatever their pairing, recalls those too.

Sequence layout (length 2P + 2 for P pairs), as in the paper's code:

    position   0        1 .. P        P + 1        P + 2 .. 2P + 1
    role       -        x_1 .. x_P    -            x_pi(1) .. x_pi(P)     (the x's again, shuffled)
    filler     -        y_1 .. y_P    -            -
    flag       start    -             query        -
    target     -        -             -            y_pi(1) .. y_pi(P)

Word ids: 0 is padding; then X1, X2, Y1, Y2, ``n_words`` each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from iclr24.aid.tpr import FastWeightMemory
from iclr24.core.checks import check_int, check_number

__all__ = ["SARBatch", "SARNetwork", "SARTask", "sar_task"]

SPLITS = ("train", "unseen")


@dataclass(frozen=True)
class SARBatch:
    """One batch of SAR sequences: ``roles``, ``fillers``, ``targets`` (B, T) word ids (0: none) and
    ``flags`` (B, T, 2) (start, query). Targets are nonzero at the query positions only."""

    roles: torch.Tensor
    fillers: torch.Tensor
    flags: torch.Tensor
    targets: torch.Tensor

    @property
    def query_mask(self) -> torch.Tensor:
        return self.targets != 0


class SARTask:
    """The word lists, the split of combinations and a sampler of sequences (see the module docstring).

    Args:
        n_words: words per list (250 in the paper's code).
        n_pairs: pairs per sequence P (100 in the paper's code); at most ``n_words`` so that the unseen
            split can show P distinct X2 words.
        ratio: the fraction of X1 seen with Y1 as well as Y2 (0, 0.5 or 1 in the paper); the first
            floor(n_words * ratio) words of X1, as the paper's code does.
        seed: seeds the task's own generator, used by :meth:`sample` when it is not given one.
    """

    def __init__(self, n_words: int = 20, n_pairs: int = 10, ratio: float = 0.5, seed: int = 0) -> None:
        self.n_words = n = check_int("n_words", n_words, minimum=1)
        self.n_pairs = check_int("n_pairs", n_pairs, minimum=1)
        if n_pairs > n_words:
            raise ValueError(f"n_pairs must be <= n_words ({n_words}) so that a sequence of unseen combinations "
                             f"has distinct X2 words, got {n_pairs}")
        self.ratio = check_number("ratio", ratio, minimum=0.0, maximum=1.0)
        self.vocab_size = 1 + 4 * n
        ids = torch.arange(1, 1 + 4 * n).view(4, n)
        self.x1, self.x2, self.y1, self.y2 = ids.unbind(0)
        self.n_x1_both = math.floor(n * self.ratio + 1e-9)  # X1[:n_x1_both] is seen with Y1 and Y2; 1e-9: 100 * 0.29
        # allowed[i, j]: training shows x_i (X1 then X2) with y_j (Y1 then Y2).
        allowed = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
        allowed[: self.n_x1_both] = True
        allowed[:n, n:] = True  # X1 x Y2
        allowed[n:, :n] = True  # X2 x Y1
        self.train_combinations = allowed
        self.seq_len = 2 * n_pairs + 2
        self.generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))

    def words(self, ids: torch.Tensor) -> list[str]:
        """Readable names of word ids: x1_3, y2_0, ... (and '-' for 0)."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype != torch.long:
            raise TypeError(f"ids must be a 1-d tensor of word ids (torch.long), got {ids!r}")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ids must be in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}")
        names = []
        for i in ids.tolist():
            if i == 0:
                names.append("-")
            else:
                group, k = divmod(i - 1, self.n_words)
                names.append(f"{('x1', 'x2', 'y1', 'y2')[group]}_{k}")
        return names

    def sample(self, batch_size: int, generator: torch.Generator | None = None, split: str = "train") -> SARBatch:
        """``batch_size`` sequences of training combinations (``split="train"``) or of X2 x Y2 only
        (``"unseen"``)."""
        check_int("batch_size", batch_size, minimum=1)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        B, P, n = batch_size, self.n_pairs, self.n_words
        generator = self.generator if generator is None else generator
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")
        if split == "train":
            x_pool, y_pool, allowed = torch.cat([self.x1, self.x2]), torch.cat([self.y1, self.y2]), \
                self.train_combinations
        else:
            x_pool, y_pool, allowed = self.x2, self.y2, torch.ones(n, n, dtype=torch.bool)
        x_idx = torch.rand(B, len(x_pool), generator=generator).argsort(dim=1)[:, :P]  # distinct x's
        y_idx = torch.multinomial(allowed[x_idx.flatten()].float(), 1, generator=generator).view(B, P)
        x, y = x_pool[x_idx], y_pool[y_idx]
        order = torch.rand(B, P, generator=generator).argsort(dim=1)  # the query order

        T = self.seq_len
        roles = torch.zeros(B, T, dtype=torch.long)
        fillers = torch.zeros(B, T, dtype=torch.long)
        targets = torch.zeros(B, T, dtype=torch.long)
        flags = torch.zeros(B, T, 2)
        flags[:, 0, 0] = 1.0
        flags[:, P + 1, 1] = 1.0
        roles[:, 1: P + 1], fillers[:, 1: P + 1] = x, y
        roles[:, P + 2:] = x.gather(1, order)
        targets[:, P + 2:] = y.gather(1, order)
        return SARBatch(roles, fillers, flags, targets)


def sar_task(n_words: int = 20, n_pairs: int = 10, ratio: float = 0.5, seed: int = 0) -> SARTask:
    """The SAR task with ``n_words`` per list, ``n_pairs`` pairs per sequence and X1's Y1 ``ratio``."""
    return SARTask(n_words, n_pairs, ratio, seed)


class SARNetwork(nn.Module):
    """Embeds SAR tokens as [emb(role); emb(filler); flags] and runs a :class:`FastWeightMemory` on them.

    ``SARNetwork(task.vocab_size, decomposition="aid", hidden=64, component_dim=16)``; extra keyword
    arguments go to :class:`FastWeightMemory`. ``forward(batch)`` -> logits (B, T, vocab_size).
    """

    def __init__(self, vocab_size: int, embedding_dim: int = 50, **fwm_kwargs) -> None:
        super().__init__()
        self.embedding = nn.Embedding(check_int("vocab_size", vocab_size, minimum=2),
                                      check_int("embedding_dim", embedding_dim, minimum=1))
        nn.init.xavier_normal_(self.embedding.weight)
        self.fwm = FastWeightMemory(2 * embedding_dim + 2, vocab_size, **fwm_kwargs)

    def forward(self, batch: SARBatch, return_details: bool = False):
        return self.fwm(self.embed(batch), return_details=return_details)

    def embed(self, batch: SARBatch) -> torch.Tensor:
        """The FWM's input (B, T, 2 * embedding_dim + 2): [emb(role); emb(filler); flags]."""
        if not isinstance(batch, SARBatch):
            raise TypeError(f"batch must be a SARBatch (from SARTask.sample), got {type(batch).__name__}")
        vocab = self.embedding.num_embeddings
        if int(batch.roles.max()) >= vocab or int(batch.fillers.max()) >= vocab:
            raise ValueError(f"batch has word ids beyond this network's vocab_size = {vocab}: was it sampled from a "
                             f"task with a larger vocabulary?")
        return torch.cat([self.embedding(batch.roles), self.embedding(batch.fillers), batch.flags], dim=-1)
