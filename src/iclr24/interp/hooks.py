"""Hook points with TransformerLens's names, and a tiny hooked transformer.

Every hooked model in :mod:`iclr24.interp` (this tiny GPT, or :class:`~iclr24.interp.HookedLM`
around a Hugging Face causal LM) speaks one vocabulary:

- ``blocks.{i}.hook_resid_pre`` / ``hook_resid_post``: the residual stream before / after block i;
- ``blocks.{i}.hook_attn_out`` / ``hook_mlp_out``: what attention / the MLP add to it;
- ``blocks.{i}.mlp.hook_post``: the MLP's hidden activation (what ``W_out`` reads);

and one interface: ``run_with_hooks(tokens, hooks, positions=None)`` and
``run_with_cache(tokens, names, positions=None)``, where a hook ``fn(activation)`` returns a
replacement (a patch) or ``None`` (a read), and ``positions`` (one index per prompt) returns the
logits there only, ``(batch, vocab)``, instead of ``(batch, seq, vocab)``. TransformerLens's spelling
works too (:mod:`iclr24.interp.lens`): ``run_with_hooks(tokens, fwd_hooks=[(name_or_filter, fn)])``
with ``fn(activation, hook)``, ``bwd_hooks=``, ``run_with_cache(tokens)`` (every hook point) or
``run_with_cache(tokens, names_filter=...)``, an :class:`~iclr24.interp.ActivationCache`, and
``hook_names()`` / ``hook_dict`` / ``mod_dict``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_tensor
from iclr24.interp.lens import ActivationCache, cache_names, finish_cache, lens_hooks

__all__ = ["BLOCK_HOOKS", "Hook", "HookPoint", "HookedTinyTransformer", "cache_only", "check_positions",
           "collect_activations", "hook_layer"]

Hook = Callable[[Tensor], "Tensor | None"]
#: the hook kinds of every block that ``hook_names()`` lists (``every=True`` lists all hook points)
BLOCK_HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "mlp.hook_post", "hook_resid_post")
_LAYER = re.compile(r"^blocks\.(\d+)\.")


def check_ragged(tokens: Tensor, layer: int, starts, n_layers: int) -> Tensor:
    """The arguments of a ``resume_ragged``: ``tokens`` (n_prompts, seq), a block index, and ``starts`` as a long
    tensor of one position per prompt; a clear error otherwise."""
    check_tensor("tokens", tokens, ndim=2, shape_doc="(n_prompts, seq)")
    check_int("layer", layer, minimum=0)
    if layer >= n_layers:
        raise ValueError(f"layer must be < n_layers={n_layers}, got {layer}")
    return check_positions(starts, *tokens.shape)


def check_positions(positions, batch: int, seq: int, *, first: int = 0) -> Tensor:
    """``positions`` as a long tensor of one index in ``[first, seq)`` per prompt, or a clear error."""
    positions = torch.as_tensor(positions)
    if positions.shape != (batch,) or positions.is_floating_point():
        raise ValueError(f"positions must hold one integer index per prompt, shape ({batch},), got "
                         f"{tuple(positions.shape)} {positions.dtype}")
    if batch and not (first <= int(positions.min()) and int(positions.max()) < seq):
        raise ValueError(f"positions must lie in [{first}, {seq}), got {positions.tolist()[:8]}")
    return positions.long()


def hook_layer(name: str) -> int:
    """The block index in a hook name: ``hook_layer("blocks.3.hook_resid_pre") == 3``."""
    match = _LAYER.match(name)
    if match is None:
        raise ValueError(f"hook name {name!r} names no block; expected 'blocks.<i>.<hook>'")
    return int(match.group(1))


def _on_suffix(fn: Hook, prefix: int) -> Hook:
    """``fn`` applied to positions ``prefix:`` of a ``(batch, seq, ...)`` activation."""
    def hook(x: Tensor) -> Tensor | None:
        out = fn(x[:, prefix:])
        return None if out is None else torch.cat([x[:, :prefix], out], 1)

    return hook


class _StopForward(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a caching hook once everything asked for is cached: the rest of the forward is skipped."""


def _caching_hooks(names: list[str], cache: dict[str, Tensor], stop_early: bool) -> dict[str, Hook]:
    """Hooks that store each named activation; with ``stop_early`` the forward stops after the last one."""
    remaining = set(names)

    def make(name: str) -> Hook:
        def hook(x: Tensor) -> None:
            cache[name] = x.detach()
            remaining.discard(name)
            if stop_early and not remaining:
                raise _StopForward

        return hook

    return {name: make(name) for name in names}


class HookPoint(nn.Module):
    """An identity whose output a hook can read (cache) or replace (patch).

    It is also the ``hook`` a TransformerLens-style ``fn(activation, hook)`` receives: ``hook.name`` (set by the
    model that holds it), ``hook.ctx`` (a dict kept between runs; ``clear_contexts=True`` empties it) and
    ``hook.layer()``."""

    def __init__(self) -> None:
        super().__init__()
        self.fn: Hook | None = None
        self.name: str | None = None
        self.ctx: dict = {}

    def layer(self) -> int:
        """The block index in the hook's name, as TransformerLens's ``HookPoint.layer()``."""
        if self.name is None:
            raise ValueError("this HookPoint has no name (it belongs to no hooked model)")
        return hook_layer(self.name)

    def clear_context(self) -> None:
        self.ctx.clear()

    def forward(self, x: Tensor) -> Tensor:
        if self.fn is None:
            return x
        out = self.fn(x)
        return x if out is None else out


class _MLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int) -> None:
        super().__init__()
        self.W_in, self.W_out = nn.Linear(d_model, d_mlp), nn.Linear(d_mlp, d_model)
        self.hook_post = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        return self.W_out(self.hook_post(torch.nn.functional.gelu(self.W_in(x))))


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_mlp: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.mlp = _MLP(d_model, d_mlp)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.hook_resid_pre(x)  # (B, T, d_model)
        h = self.ln1(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


class HookedTinyTransformer(nn.Module):
    """A small causal transformer (pre-LayerNorm GPT) with TransformerLens-style hook points.

    ``forward(tokens) -> logits (batch, seq, vocab)``. Hook points: ``hook_embed``,
    ``blocks.{i}.hook_resid_pre/mid/post``, ``blocks.{i}.hook_attn_out/hook_mlp_out`` and
    ``blocks.{i}.mlp.hook_post``. Trained in seconds, so experiments and tests can build one.
    """

    def __init__(self, vocab_size: int, n_ctx: int, d_model: int = 64, n_layers: int = 3, n_heads: int = 4,
                 d_mlp: int = 256) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size, minimum=1)
        check_int("n_ctx", n_ctx, minimum=1)
        check_int("n_layers", n_layers, minimum=1)
        if check_int("d_model", d_model, minimum=1) % check_int("n_heads", n_heads, minimum=1):
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_ctx = n_ctx
        self.embed, self.pos_embed = nn.Embedding(vocab_size, d_model), nn.Embedding(n_ctx, d_model)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, check_int("d_mlp", d_mlp, minimum=1))
                                    for _ in range(n_layers))
        self.ln_final, self.unembed = nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size)
        for name, point in self.hook_points().items():
            point.name = name

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def hook_points(self) -> dict[str, HookPoint]:
        return {name: module for name, module in self.named_modules() if isinstance(module, HookPoint)}

    def hook_names(self, *, every: bool = False) -> list[str]:
        """The residual-stream and MLP hook names of every block (as :meth:`iclr24.interp.HookedLM.hook_names`);
        with ``every``, all hook points (also ``hook_embed`` and ``hook_resid_mid``), in the model's order."""
        if every:
            return list(self.hook_points())
        return [f"blocks.{i}.{p}" for i in range(self.n_layers) for p in BLOCK_HOOKS]

    @property
    def hook_dict(self) -> dict[str, HookPoint]:
        """TransformerLens's ``hook_dict``: every hook point by name."""
        return self.hook_points()

    @property
    def mod_dict(self) -> dict[str, nn.Module]:
        """TransformerLens's ``mod_dict``: every submodule by name."""
        return {name: module for name, module in self.named_modules() if name}

    def reset_hooks(self, clear_contexts: bool = True, including_permanent: bool = False) -> None:
        """TransformerLens's ``reset_hooks``: hooks never outlive a run here, so this only empties every
        ``hook.ctx`` (with ``clear_contexts``)."""
        if clear_contexts:
            for point in self.hook_points().values():
                point.clear_context()

    def mlp_out_weight(self, layer: int) -> Tensor:
        """``W_out`` of block ``layer`` as ``(d_model, d_mlp)``: the map from the MLP's hidden activation."""
        return self.blocks[layer].mlp.W_out.weight.detach()

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        check_tensor("tokens", tokens, ndim=2, shape_doc="(batch, seq)")
        T = tokens.shape[1]
        if T > self.n_ctx:
            raise ValueError(f"tokens has {T} positions, more than the model's n_ctx={self.n_ctx}")
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), 1)
        x = self.hook_embed(self.embed(tokens)) + self.pos_embed(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            x = block(x, mask)
        if positions is not None:
            x = x[torch.arange(len(tokens)), check_positions(positions, len(tokens), T)]
        return self.unembed(self.ln_final(x))

    def resume_from(self, tokens: Tensor, layer: int, *, prefix: int = 0):
        """A re-run from block ``layer``'s residual stream, for many patches of one batch.

        Returns ``run(resid, positions, hooks=None) -> logits (batch, vocab)``, where ``resid``
        replaces ``blocks.{layer}.hook_resid_pre`` at positions ``prefix:`` (the first ``prefix``
        positions keep the clean run's values) and the blocks before ``layer`` are skipped;
        ``hooks`` see (and patch) the positions ``prefix:`` only.
        """
        check_int("layer", layer, minimum=0)
        if layer >= self.n_layers:
            raise ValueError(f"layer must be < n_layers={self.n_layers}, got {layer}")
        check_int("prefix", prefix, minimum=0)
        T = tokens.shape[1]
        if prefix >= T:
            raise ValueError(f"prefix must be < the sequence length {T}, got {prefix}")
        with torch.no_grad():
            head = cache_only(self, tokens, [f"blocks.{layer}.hook_resid_pre"])[f"blocks.{layer}.hook_resid_pre"]
        head = head[:, :prefix]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), 1)

        d_model = self.embed.weight.shape[1]

        def run(resid: Tensor, positions: Tensor, hooks: dict[str, Hook] | None = None) -> Tensor:
            if resid.shape != (len(tokens), T - prefix, d_model):
                raise ValueError(f"resid must be (batch, seq - prefix, d_model) = {(len(tokens), T - prefix, d_model)}"
                                 f", got {tuple(resid.shape)}")
            positions = check_positions(positions, len(tokens), T, first=prefix)
            points = self.hook_points()
            runs = {name for name in points if name.startswith("blocks.") and hook_layer(name) >= layer}
            unknown = set(hooks or {}) - runs
            if unknown:
                raise ValueError(f"unknown hook names {sorted(unknown)} (a re-run from block {layer} runs only the "
                                 f"hooks of blocks >= {layer})")
            # hooks see the positions prefix: only, as with HookedLM's cached prefix
            wrapped = {name: _on_suffix(fn, prefix) for name, fn in (hooks or {}).items()}
            try:
                for name, fn in wrapped.items():
                    points[name].fn = fn
                x = torch.cat([head, resid], 1)
                for block in self.blocks[layer:]:
                    x = block(x, mask)
            finally:
                for name in wrapped:
                    points[name].fn = None
            return self.unembed(self.ln_final(x[torch.arange(len(x)), positions]))

        return run

    def resume_ragged(self, tokens: Tensor, layer: int, starts: Tensor):
        """A re-run from block ``layer``'s residual stream with a start of its own for every prompt, and re-runs
        of any prompts in one batch: :meth:`iclr24.interp.HookedLM.resume_ragged`'s contract.

        Returns ``run(resid, positions, rows) -> logits (b, vocab)``: ``rows`` ``(b,)`` picks a prompt for each
        re-run, ``resid`` ``(b, W, d_model)`` replaces that prompt's ``blocks.{layer}.hook_resid_pre`` at positions
        ``starts[row] .. starts[row] + W - 1`` (those past the sequence are dropped), every other position keeps
        the clean run's value, and the logits are read at ``positions``, inside each row's window.
        """
        starts = check_ragged(tokens, layer, starts, self.n_layers)
        n, T = tokens.shape
        with torch.no_grad():
            head = cache_only(self, tokens, [f"blocks.{layer}.hook_resid_pre"])[f"blocks.{layer}.hook_resid_pre"]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tokens.device), 1)

        def run(resid: Tensor, positions: Tensor, rows: Tensor) -> Tensor:
            rows = torch.as_tensor(rows).long()
            if rows.ndim != 1 or (len(rows) and not 0 <= int(rows.min()) <= int(rows.max()) < n):
                raise ValueError(f"rows must be one prompt index in [0, {n}) per re-run, got {rows.tolist()[:8]}")
            b = len(rows)
            if resid.ndim != 3 or resid.shape[0] != b or resid.shape[2] != head.shape[2]:
                raise ValueError(f"resid must be (len(rows), window, d_model) = ({b}, W, {head.shape[2]}), got "
                                 f"{tuple(resid.shape)}")
            first = starts[rows]
            positions = torch.as_tensor(positions).long()
            if positions.shape != (b,) or bool(((positions < first) | (positions >= first + resid.shape[1])).any()):
                raise ValueError(f"positions must be one index per re-run inside its window [starts[row], "
                                 f"starts[row] + {resid.shape[1]}), got {positions.tolist()[:8]}")
            index = first[:, None] + torch.arange(resid.shape[1])  # (b, W)
            inside = index < T
            x = head[rows].index_put((torch.arange(b)[:, None].expand_as(index)[inside], index[inside]),
                                     resid[inside])
            for block in self.blocks[layer:]:
                x = block(x, mask)
            return self.unembed(self.ln_final(x[torch.arange(b), positions]))

        return run

    def run_with_hooks(self, tokens: Tensor, hooks: dict[str, Hook] | None = None, positions: Tensor | None = None,
                       *, fwd_hooks=None, bwd_hooks=None, reset_hooks_end: bool = True, clear_contexts: bool = False,
                       ) -> Tensor:
        """Logits with ``hooks[name](activation)`` applied at the named points (removed afterwards).

        Also TransformerLens's ``fwd_hooks=[(name or filter name -> bool, fn(activation, hook))]`` (``fn``
        returns a replacement or ``None``; ``hook`` is the :class:`HookPoint`) and ``bwd_hooks=`` (``fn(grad,
        hook)``, run on the backward of the returned logits), applied after ``hooks``, in order at each point.
        """
        points = self.hook_points()
        hooks = lens_hooks(hooks, fwd_hooks, bwd_hooks, reset_hooks_end=reset_hooks_end, available=list(points),
                           hook_for=points.__getitem__)
        unknown = set(hooks) - set(points)
        if unknown:
            raise ValueError(f"unknown hook names {sorted(unknown)}; known: {sorted(points)}")
        try:
            for name, fn in hooks.items():
                points[name].fn = fn
            return self(tokens, positions)
        finally:
            for name in hooks:
                points[name].fn = None
            if clear_contexts and reset_hooks_end:
                self.reset_hooks(clear_contexts=True)

    def run_with_cache(self, tokens: Tensor, names=None, positions: Tensor | None = None, *, names_filter=None,
                       return_cache_object: bool = True, remove_batch_dim: bool = False, device=None,
                       ) -> tuple[Tensor, ActivationCache]:
        """Logits and the activations at ``names`` (a name, a list of names, or a filter ``name -> bool``;
        TransformerLens's ``names_filter=`` is the same), or at every hook point when neither is given, as an
        :class:`~iclr24.interp.ActivationCache` (a dict by hook name; ``return_cache_object=False``: a plain
        dict). ``remove_batch_dim`` and ``device`` are TransformerLens's."""
        names = cache_names(names, names_filter, list(self.hook_points()))
        cache = ActivationCache(n_layers=self.n_layers)
        logits = self.run_with_hooks(tokens, _caching_hooks(names, cache, stop_early=False), positions)
        return logits, finish_cache(cache, return_cache_object=return_cache_object,
                                    remove_batch_dim=remove_batch_dim, device=device)


def cache_only(model, tokens: Tensor, names: list[str]) -> dict[str, Tensor]:
    """The activations at ``names``, stopping the forward as soon as the last one is read."""
    cache: dict[str, Tensor] = {}
    try:
        model.run_with_hooks(tokens, _caching_hooks(names, cache, stop_early=True))
    except _StopForward:
        pass
    missing = set(names) - set(cache)
    if missing:
        raise RuntimeError(f"the forward never reached hook points {sorted(missing)}")
    return cache


def collect_activations(model, tokens: Tensor, hook: str, *, lengths: Tensor | None = None, skip_first: int = 0,
                        batch_size: int = 64) -> Tensor:
    """An activation store: the activations at ``hook`` for every real position of ``tokens``.

    Args:
        model: a hooked model (:class:`HookedTinyTransformer` or :class:`~iclr24.interp.HookedLM`).
        tokens: ``(n_prompts, seq)`` token ids, right-padded.
        lengths: each prompt's length; padded positions are left out (default: none padded).
        skip_first: positions left out at the start of every prompt. Real LMs write huge
            activations at the first token (an attention sink); SAEs are usually trained without it.

    Returns ``(n_positions, d)``, prompt after prompt, in order.
    """
    check_tensor("tokens", tokens, ndim=2, shape_doc="(n_prompts, seq)")
    n, T = tokens.shape
    lengths = torch.full((n,), T) if lengths is None else torch.as_tensor(lengths)
    if lengths.shape != (n,) or int(lengths.max()) > T or int(lengths.min()) < 1:
        raise ValueError(f"lengths must hold one length in [1, {T}] per prompt, got {lengths.tolist()[:8]}...")
    check_int("skip_first", skip_first, minimum=0)
    check_int("batch_size", batch_size, minimum=1)
    keep = (torch.arange(T) >= skip_first) & (torch.arange(T) < lengths[:, None])  # (n, T)
    out = []
    with torch.no_grad():
        for start in range(0, n, batch_size):
            acts = cache_only(model, tokens[start:start + batch_size], [hook])[hook]
            out.append(acts[keep[start:start + batch_size]])
    return torch.cat(out)
