"""TransformerLens's calling conventions on the package's hooked models (issue #61).

A TransformerLens user writes::

    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_resid_pre", fn)])  # fn(activation, hook)
    logits = model.run_with_hooks(tokens, fwd_hooks=[(lambda name: name.endswith("hook_z"), fn)])
    logits, cache = model.run_with_cache(tokens)                        # every hook point
    logits, cache = model.run_with_cache(tokens, names_filter=lambda name: "resid" in name)
    cache["resid_pre", 1]                                               # == cache["blocks.1.hook_resid_pre"]

and the hooked models here (:class:`~iclr24.interp.HookedTinyTransformer`, :class:`~iclr24.interp.HookedLM`)
accept it beside their own ``run_with_hooks(tokens, {name: fn(activation)})``. This module holds the pieces both
share: the ``hook`` object a hook function gets (:class:`HookRef`; the tiny model passes its
:class:`~iclr24.interp.HookPoint` itself), :class:`ActivationCache`, :func:`get_act_name`, and the translation of
``fwd_hooks`` / ``bwd_hooks`` / ``names_filter`` into the models' ``{name: fn(activation)}`` hooks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from torch import Tensor

__all__ = ["ActivationCache", "HookRef", "get_act_name"]

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


class HookRef:
    """The ``hook`` a TransformerLens-style ``fn(activation, hook)`` receives on a :class:`~iclr24.interp.HookedLM`:
    ``hook.name``, a ``hook.ctx`` dict that lives as long as the model (``clear_contexts=True`` empties it, as in
    TransformerLens) and ``hook.layer()``. Not a module: hooks are added with ``run_with_hooks(fwd_hooks=...)``."""

    __slots__ = ("ctx", "name")

    def __init__(self, name: str) -> None:
        self.name, self.ctx = name, {}

    def layer(self) -> int:
        """The block index in the name (an error for ``hook_embed``), as TransformerLens's ``HookPoint.layer()``."""
        match = _BLOCK.match(self.name)
        if match is None:
            raise ValueError(f"hook point {self.name!r} is in no block")
        return int(match.group(1))

    def clear_context(self) -> None:
        self.ctx.clear()

    def __repr__(self) -> str:
        return f"HookRef({self.name!r})"


def get_act_name(name: str, layer: int | str | None = None, layer_type: str | None = None) -> str:
    """The full hook name from TransformerLens's shorthand (``transformer_lens.utils.get_act_name``):
    ``get_act_name("resid_pre", 3) == "blocks.3.hook_resid_pre"``, ``("pattern", 0)`` ->
    ``blocks.0.attn.hook_pattern``, ``("post", 2)`` -> ``blocks.2.mlp.hook_post``, ``"embed"`` -> ``hook_embed``,
    ``"z5"`` -> ``blocks.5.attn.hook_z``."""
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    match = re.match(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if match is not None:
        name, layer, layer_type = match.groups()
    name = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
            "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}.get(name, name)
    if name in ("k", "v", "q", "z", "rot_k", "rot_q", "result", "pattern", "attn_scores"):
        layer_type = "attn"
    elif name in ("pre", "post", "mid", "pre_linear"):
        layer_type = "mlp"
    else:
        layer_type = {"a": "attn", "m": "mlp", "b": "", "block": "", "blocks": "", "attention": "attn"}.get(
            layer_type, layer_type)
    full = "" if layer is None else f"blocks.{layer}."
    full += f"{layer_type}." if layer_type else ""
    full += f"hook_{name}"
    if name in ("scale", "normalized") and layer is None:
        full = f"ln_final.{full}"
    return full


class ActivationCache(dict):
    """Activations by hook name, in the order the forward reached them: a ``dict`` (as the package's
    ``run_with_cache`` always returned) that also reads TransformerLens's keys, ``cache["resid_pre", 3]``,
    ``cache["pattern", -1]`` (negative layers count from the end), ``cache["embed"]``."""

    def __init__(self, data=(), *, n_layers: int | None = None, has_batch_dim: bool = True) -> None:
        super().__init__(data)
        self.n_layers, self.has_batch_dim = n_layers, has_batch_dim

    def __getitem__(self, key):
        if isinstance(key, str) and dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if isinstance(key, str):
            name = get_act_name(key)
        elif isinstance(key, tuple) and key and isinstance(key[0], str):
            name, layer, *rest = (*key, None) if len(key) == 1 else key
            if isinstance(layer, int) and layer < 0:
                if self.n_layers is None:
                    raise KeyError(f"{key!r}: a negative layer needs the cache's n_layers, which is not known")
                layer += self.n_layers
            name = get_act_name(name, layer, *rest)
        else:
            raise KeyError(f"{key!r}: a cache is indexed by a hook name or a (name, layer) pair")
        if not dict.__contains__(self, name):
            raise KeyError(f"{name!r} is not in this cache (cached: {describe_names(self)})")
        return dict.__getitem__(self, name)

    @property
    def cache_dict(self) -> dict[str, Tensor]:
        """A plain dict of the cache (TransformerLens's attribute)."""
        return dict(self)

    def to(self, device) -> "ActivationCache":
        """A copy with every activation on ``device``."""
        return ActivationCache({name: act.to(device) for name, act in self.items()}, n_layers=self.n_layers,
                               has_batch_dim=self.has_batch_dim)

    def remove_batch_dim(self) -> "ActivationCache":
        """Drop the batch dimension of a batch of one (in place, as TransformerLens); returns the cache."""
        if self.has_batch_dim:
            sizes = {name: act.shape[0] for name, act in self.items()}
            if any(size != 1 for size in sizes.values()):
                raise ValueError(f"remove_batch_dim needs a batch of one, got batch sizes "
                                 f"{sorted(set(sizes.values()))}")
            for name in list(self):
                dict.__setitem__(self, name, dict.__getitem__(self, name)[0])
            self.has_batch_dim = False
        return self

    def __repr__(self) -> str:
        return f"ActivationCache({describe_names(self)})"


def describe_names(names: Iterable[str]) -> str:
    """Hook names in short: ``hook_embed, blocks.<i>.<hook> for i in 0..2 and hook in hook_resid_pre, ...``."""
    other, blocks = [], {}
    for name in names:
        match = _BLOCK.match(name)
        if match is None:
            other.append(name)
        else:
            blocks.setdefault(match.group(2), []).append(int(match.group(1)))
    by_layers: dict[tuple[int, ...], list[str]] = {}
    for suffix, layers in blocks.items():
        by_layers.setdefault(tuple(sorted(set(layers))), []).append(suffix)
    parts = list(other)
    for layers, suffixes in by_layers.items():
        span = (f"{layers[0]}..{layers[-1]}" if list(layers) == list(range(layers[0], layers[-1] + 1))
                else ", ".join(map(str, layers)))
        parts.append(f"blocks.<i>.<hook> for i in {span} and hook in {', '.join(suffixes)}")
    return "; ".join(parts) if parts else "none"


def select_names(arg: str, spec, available: Sequence[str], check: Callable[[str], None] | None = None) -> list[str]:
    """The hook names that ``spec`` picks out of ``available``: ``None`` (all), a name, a list of names, or a
    filter ``name -> bool`` (TransformerLens's ``names_filter``). A bad one is an error naming ``arg``; ``check``
    (a name that is not available) may raise a more specific ``ValueError`` than "unknown hook name"."""
    if spec is None:
        return list(available)
    known = set(available)

    def checked(name) -> str:
        if not isinstance(name, str):
            raise TypeError(f"{arg} must name hook points with strings, got {name!r}")
        if name not in known:
            if check is not None:
                try:
                    check(name)
                except ValueError as err:
                    raise ValueError(f"{arg}: {err}") from None
            raise ValueError(f"{arg}: unknown hook name {name!r}; hook points: {describe_names(available)}")
        return name

    if isinstance(spec, str):
        return [checked(spec)]
    if callable(spec):
        names = [name for name in available if spec(name)]
        if not names:
            raise ValueError(f"{arg}: the filter {getattr(spec, '__name__', spec)!r} matched no hook point; hook "
                             f"points: {describe_names(available)}")
        return names
    if isinstance(spec, Iterable) and not isinstance(spec, (bytes, Mapping)):
        return list(dict.fromkeys(checked(name) for name in spec))
    raise TypeError(f"{arg} must be a hook name, a list of hook names or a filter name -> bool, got "
                    f"{type(spec).__name__}")


def _pairs(arg: str, pairs) -> list[tuple[object, Callable]]:
    if pairs is None:
        return []
    if isinstance(pairs, (str, Mapping)) or not isinstance(pairs, Iterable):
        raise TypeError(f"{arg} must be a list of (name or filter, fn(activation, hook)) pairs, got "
                        f"{type(pairs).__name__}")
    out = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2 and callable(pair[1])):
            raise TypeError(f"{arg}[{i}] must be a (name or filter, fn(activation, hook)) pair, got {pair!r}")
        out.append((pair[0], pair[1]))
    return out


def _forward(where: str, fn: Callable, hook) -> Callable[[Tensor], Tensor | None]:
    """``fn(activation, hook=hook)``, TransformerLens's call, as the package's ``fn(activation)``."""
    def run(x: Tensor) -> Tensor | None:
        out = fn(x, hook=hook)
        if out is not None and not isinstance(out, Tensor):
            raise TypeError(f"the hook function of {where} at {hook.name} must return None or a tensor, got "
                            f"{type(out).__name__}")
        return out

    return run


def _backward(where: str, fn: Callable, hook) -> Callable[[Tensor], Tensor | None]:
    """A hook that passes on a copy of the activation whose gradient goes through ``fn(grad, hook=hook)``
    (a tensor it returns replaces the gradient). Nothing happens where no gradient is tracked."""
    def on_grad(grad: Tensor) -> Tensor | None:
        out = fn(grad, hook=hook)
        if out is not None and (not isinstance(out, Tensor) or out.shape != grad.shape):
            raise ValueError(f"the backward hook function of {where} at {hook.name} must return None or a tensor of "
                             f"shape {tuple(grad.shape)}, got {getattr(out, 'shape', type(out).__name__)}")
        return out

    def run(x: Tensor) -> Tensor | None:
        if not x.requires_grad:
            return None
        y = x.clone()  # the same values; its gradient is the activation's
        y.register_hook(on_grad)
        return y

    return run


def _chain(fns: list[Callable[[Tensor], Tensor | None]]) -> Callable[[Tensor], Tensor | None]:
    """Hooks at one point applied in order, each on what the one before returned; ``None`` if none patched."""
    if len(fns) == 1:
        return fns[0]

    def run(x: Tensor) -> Tensor | None:
        patched = False
        for fn in fns:
            out = fn(x)
            if out is not None:
                x, patched = out, True
        return x if patched else None

    return run


def lens_hooks(hooks, fwd_hooks, bwd_hooks, *, reset_hooks_end: bool, available: Sequence[str],
               hook_for: Callable[[str], object], check: Callable[[str], None] | None = None) -> dict:
    """The package's ``{name: fn(activation)}`` hooks for ``run_with_hooks(tokens, hooks, fwd_hooks=, bwd_hooks=)``:
    ``hooks`` first (left for the model to check, with its own errors), then each ``fwd_hooks`` pair, then the
    ``bwd_hooks``, in order at every point they name. ``hook_for(name)`` is the ``hook`` a function gets."""
    if hooks is None:
        hooks = {}
    if not isinstance(hooks, Mapping):
        raise TypeError(f"hooks must be a dict {{name: fn(activation)}}, got {type(hooks).__name__}; for "
                        "TransformerLens's [(name, fn(activation, hook))] pass fwd_hooks=[...]")
    pairs = {"fwd_hooks": _pairs("fwd_hooks", fwd_hooks), "bwd_hooks": _pairs("bwd_hooks", bwd_hooks)}
    if not reset_hooks_end and (hooks or pairs["fwd_hooks"]):
        raise ValueError("reset_hooks_end=False: forward hooks here never outlive the run (there are no persistent "
                         "hooks); it is accepted with bwd_hooks only, which fire on the backward of this run's output")
    chains = {name: [fn] for name, fn in hooks.items()}
    for arg, wrap in (("fwd_hooks", _forward), ("bwd_hooks", _backward)):
        for i, (target, fn) in enumerate(pairs[arg]):
            if not (isinstance(target, str) or callable(target)):
                raise TypeError(f"{arg}[{i}] must start with a hook name or a filter name -> bool, got {target!r}")
            for name in select_names(f"{arg}[{i}]", target, available, check):
                chains.setdefault(name, []).append(wrap(f"{arg}[{i}]", fn, hook_for(name)))
    return {name: _chain(fns) for name, fns in chains.items()}


def cache_names(names, names_filter, available: Sequence[str], check: Callable[[str], None] | None = None,
                ) -> list[str]:
    """What ``run_with_cache(tokens, names, names_filter=)`` caches: ``names`` (the package's argument) or
    TransformerLens's ``names_filter``, each a name, a list of names or a filter; every hook point if neither."""
    if names is not None and names_filter is not None:
        raise ValueError("run_with_cache takes names or names_filter (the same thing, TransformerLens's spelling), "
                         "not both")
    arg, spec = ("names", names) if names is not None else ("names_filter", names_filter)
    return select_names(arg, spec, available, check)


def finish_cache(cache: ActivationCache, *, return_cache_object: bool, remove_batch_dim: bool, device,
                 ) -> ActivationCache | dict:
    """``run_with_cache``'s TransformerLens options applied to a filled cache."""
    if device is not None:
        cache = cache.to(device)
    if remove_batch_dim:
        cache.remove_batch_dim()
    return cache if return_cache_object else dict(cache)
