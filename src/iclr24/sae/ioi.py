"""Indirect object identification in a tiny hooked transformer, and feature patching.

- :class:`HookedTinyTransformer`: a small GPT whose intermediate values pass through named
  hook points with TransformerLens's names (``hook_embed``, ``blocks.{i}.hook_resid_pre``,
  ``blocks.{i}.hook_resid_mid``, ``blocks.{i}.hook_resid_post``), with ``run_with_cache``
  and ``run_with_hooks``.
- :func:`ioi_dataset`: templated IOI prompts ("When Mary and John went to the store, John
  gave a drink to" -> "Mary") with a counterfactual whose second subject is the other name,
  so the answer flips; one template is held out.
- :func:`feature_patching_curve`: the paper's greedy procedure. Start with every feature of
  a decomposition patched in from the counterfactual; for rising thresholds, un-patch
  features one at a time (random order) when that raises KL(counterfactual || patched) by
  less than the threshold.
- :func:`interpretability_scores`: an offline stand-in for automated interpretability, each
  feature's best AUROC against known input variables.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "HookedTinyTransformer",
    "IOIData",
    "collect_activations",
    "feature_patching_curve",
    "interpretability_scores",
    "ioi_accuracy",
    "ioi_dataset",
    "prompt_lengths",
    "train_ioi_model",
]

NAMES = ["Mary", "John", "Alice", "Bob", "Tom", "Anna", "James", "Lisa", "Paul", "Kate", "Mark", "Emma", "Sam",
         "Lucy", "Dan", "Rose", "Jack", "Nina", "Carl", "Ella", "Ivan", "Zoe", "Hugo", "Iris"]
TEMPLATES = [
    "When {A} and {B} went to the store , {S} gave a drink to",
    "After {A} and {B} met at the park , {S} handed a book to",
    "Then {A} and {B} had a long talk , and {S} passed a note to",
    "While {A} and {B} were at school , {S} showed a photo to",
    "Once {A} and {B} sat in the house , {S} sent a letter to",  # held out
]


class HookPoint(nn.Module):
    """An identity whose output hooks can read (cache) or replace (patch)."""

    def __init__(self) -> None:
        super().__init__()
        self.fn: Callable[[Tensor], Tensor | None] | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.fn is None:
            return x
        out = self.fn(x)
        return x if out is None else out


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_mlp: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.GELU(), nn.Linear(d_mlp, d_model))
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.hook_resid_pre(x)  # (B, T, d_model)
        h = self.ln1(x)
        x = self.hook_resid_mid(x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0])
        return self.hook_resid_post(x + self.mlp(self.ln2(x)))


class HookedTinyTransformer(nn.Module):
    """A small causal transformer with TransformerLens-style hook points; ``forward(tokens) -> logits``."""

    def __init__(self, vocab_size: int, n_ctx: int, d_model: int = 64, n_layers: int = 3, n_heads: int = 4,
                 d_mlp: int = 256) -> None:
        super().__init__()
        self.embed, self.pos_embed = nn.Embedding(vocab_size, d_model), nn.Embedding(n_ctx, d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, d_mlp) for _ in range(n_layers))
        self.ln_final, self.unembed = nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size)

    def hook_points(self) -> dict[str, HookPoint]:
        return {name: module for name, module in self.named_modules() if isinstance(module, HookPoint)}

    def forward(self, tokens: Tensor) -> Tensor:
        T = tokens.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), 1)
        x = self.hook_embed(self.embed(tokens)) + self.pos_embed(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.unembed(self.ln_final(x))

    def run_with_hooks(self, tokens: Tensor, hooks: dict[str, Callable[[Tensor], Tensor | None]]) -> Tensor:
        """Logits with ``hooks[name](activation)`` applied at the named points (removed afterwards)."""
        points = self.hook_points()
        unknown = set(hooks) - set(points)
        if unknown:
            raise ValueError(f"unknown hook names {sorted(unknown)}; known: {sorted(points)}")
        try:
            for name, fn in hooks.items():
                points[name].fn = fn
            return self(tokens)
        finally:
            for name in hooks:
                points[name].fn = None

    def run_with_cache(self, tokens: Tensor, names: list[str]) -> tuple[Tensor, dict[str, Tensor]]:
        cache: dict[str, Tensor] = {}
        logits = self.run_with_hooks(tokens, {n: (lambda x, n=n: cache.__setitem__(n, x.detach())) for n in names})
        return logits, cache


def collect_activations(model: HookedTinyTransformer, tokens: Tensor, hook: str, batch_size: int = 256) -> Tensor:
    """An activation store: the activations at ``hook`` for every position of ``tokens``,
    collected in batches, ``(n_prompts * T, d)``."""
    out = []
    with torch.no_grad():
        for start in range(0, len(tokens), batch_size):
            _, cache = model.run_with_cache(tokens[start:start + batch_size], [hook])
            out.append(cache[hook].flatten(0, 1))
    return torch.cat(out)


@dataclass
class IOIData:
    """Token ids of prompts, counterfactuals and answers, with the variables the scores use."""

    vocab: list[str]
    clean: Tensor  # (n, T)
    counterfactual: Tensor  # (n, T): the second subject is the other name
    answer: Tensor  # (n,): the indirect object of the clean prompt
    cf_answer: Tensor  # (n,)
    template: Tensor  # (n,)
    s2_position: Tensor  # (n,)

    def subset(self, rows: Tensor) -> "IOIData":
        """The prompts selected by ``rows`` (a bool mask or indices)."""
        return IOIData(self.vocab, self.clean[rows], self.counterfactual[rows], self.answer[rows], self.cf_answer[rows],
                       self.template[rows], self.s2_position[rows])


def ioi_dataset(templates: list[int] | None = None, names: list[str] = NAMES) -> IOIData:
    """Every (template, A, B, subject) combination: the prompts and their counterfactuals."""
    words = sorted({w for t in TEMPLATES for w in t.split() if not w.startswith("{")})
    vocab = ["<pad>", *names, *words]
    index = {w: i for i, w in enumerate(vocab)}
    rows = {k: [] for k in ("clean", "cf", "ans", "cf_ans", "tpl", "s2")}
    for t in templates if templates is not None else range(len(TEMPLATES)):
        for a, b in itertools.permutations(names, 2):
            for subject, io in ((a, b), (b, a)):
                text = TEMPLATES[t].format(A=a, B=b, S=subject).split()
                cf = TEMPLATES[t].format(A=a, B=b, S=io).split()
                rows["clean"].append([index[w] for w in text])
                rows["cf"].append([index[w] for w in cf])
                rows["ans"].append(index[io])
                rows["cf_ans"].append(index[subject])
                rows["tpl"].append(t)
                rows["s2"].append(TEMPLATES[t].split().index("{S}"))
    width = max(len(r) for r in rows["clean"])
    pad = lambda rs: torch.tensor([r + [0] * (width - len(r)) for r in rs])  # noqa: E731
    return IOIData(vocab, pad(rows["clean"]), pad(rows["cf"]), torch.tensor(rows["ans"]), torch.tensor(rows["cf_ans"]),
                   torch.tensor(rows["tpl"]), torch.tensor(rows["s2"]))


def _last_logits(model, tokens: Tensor, data_lengths: Tensor, hooks=None) -> Tensor:
    logits = model(tokens) if hooks is None else model.run_with_hooks(tokens, hooks)
    return logits[torch.arange(len(tokens)), data_lengths - 1]


def prompt_lengths(tokens: Tensor) -> Tensor:
    return (tokens != 0).sum(1)


def train_ioi_model(data: IOIData, *, steps: int = 600, batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                    **model_kwargs) -> HookedTinyTransformer:
    """Train on the last-token IO prediction of ``data``'s prompts (AdamW)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], **model_kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    lengths = prompt_lengths(data.clean)
    for _ in range(steps):
        idx = torch.randint(len(data.answer), (batch_size,), generator=gen)
        loss = F.cross_entropy(_last_logits(model, data.clean[idx], lengths[idx]), data.answer[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def ioi_accuracy(model, data: IOIData) -> float:
    with torch.no_grad():
        pred = _last_logits(model, data.clean, prompt_lengths(data.clean)).argmax(-1)
    return float((pred == data.answer).float().mean())


def feature_patching_curve(model: HookedTinyTransformer, hook: str, decomposition, clean: Tensor,
                           counterfactual: Tensor, thresholds: np.ndarray, seed: int = 0) -> dict:
    """KL(counterfactual || patched) against the number of features patched in from the counterfactual.

    The activation at ``hook`` (every position) is split into codes and a reconstruction
    error; the error of the clean run is kept; features in the patched set take their
    counterfactual codes.

    Returns ``{"n_features": [...], "kl": [...], "edit": [...], "kl_clean": KL with nothing
    patched}``: one point per threshold (plus the start), ``edit`` being the size of the
    activation edit relative to the clean activation.
    """
    lengths = prompt_lengths(clean)
    with torch.no_grad():
        _, cache_c = model.run_with_cache(clean, [hook])
        _, cache_cf = model.run_with_cache(counterfactual, [hook])
        a_c, a_cf = cache_c[hook], cache_cf[hook]
        raw_c, raw_cf = decomposition.encode(a_c), decomposition.encode(a_cf)
        code_dtype = raw_c.dtype  # each decomposition decodes codes in the dtype it encodes to

        def decode(codes: Tensor) -> Tensor:
            return decomposition.decode(codes.to(code_dtype)).double()

        codes_c, codes_cf = raw_c.double(), raw_cf.double()
        a_c = a_c.double()
        error_c = a_c - decode(codes_c)
        log_p_cf = F.log_softmax(_last_logits(model, counterfactual, lengths).double(), -1)

        def kl_with(patched: Tensor) -> float:
            codes = torch.where(patched, codes_cf, codes_c)
            act = (decode(codes) + error_c).float()
            log_q = F.log_softmax(_last_logits(model, clean, lengths, {hook: lambda _: act}).double(), -1)
            return float((log_p_cf.exp() * (log_p_cf - log_q)).sum(-1).mean())

        def edit_size(patched: Tensor) -> float:
            return float((decode(torch.where(patched, codes_cf, codes_c)) - decode(codes_c)).norm() / a_c.norm())

        differs = (codes_c != codes_cf).flatten(0, -2).any(0)  # features that change anywhere
        patched = differs.clone()
        kl_clean = kl_with(torch.zeros_like(patched))
        kl_now = kl_with(patched)
        curve_n, curve_kl, curve_edit = [int(patched.sum())], [kl_now], [edit_size(patched)]
        order = torch.nonzero(differs).flatten()
        order = order[torch.randperm(len(order), generator=torch.Generator().manual_seed(seed))]
        for t in thresholds:
            for f in order.tolist():
                if not patched[f]:
                    continue
                patched[f] = False
                kl = kl_with(patched)
                if kl - kl_now < t:
                    kl_now = kl
                else:
                    patched[f] = True
            curve_n.append(int(patched.sum()))
            curve_kl.append(kl_now)
            curve_edit.append(edit_size(patched))
    return {"n_features": curve_n, "kl": curve_kl, "edit": curve_edit, "kl_clean": kl_clean}


def interpretability_scores(codes: Tensor, variables: dict[str, Tensor]) -> Tensor:
    """Each feature's best AUROC (``max(auc, 1 - auc)``) against binary input variables.

    ``codes`` is ``(n_positions, n_features)``; each variable a bool ``(n_positions,)``.
    Features that never vary are skipped (they explain nothing). AUROC is computed for all
    features at once as the Mann-Whitney statistic on ranks (ties averaged).
    """
    from scipy.stats import rankdata

    x = codes.double().numpy()
    keep = x.std(0) > 1e-9
    ranks = rankdata(x[:, keep], axis=0)  # (n_positions, n_kept)
    best = np.zeros(int(keep.sum()))
    for v in variables.values():
        y = v.numpy().astype(bool)
        n_pos, n_neg = int(y.sum()), int((~y).sum())
        if n_pos == 0 or n_neg == 0:
            continue
        auc = (ranks[y].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
        best = np.maximum(best, np.maximum(auc, 1 - auc))
    return torch.tensor(best)
