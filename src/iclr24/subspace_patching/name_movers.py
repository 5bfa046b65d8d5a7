"""Name-mover heads and the paper's split of a residual-stream direction along what their queries read.

Makelov et al. (section 4, IOI) call the residual DAS direction faithful because it acts through the IOI
circuit: split ``v = v_nm + v_rest`` with ``v_nm`` in the span the name-mover heads' queries read (the column
space of their stacked ``W_Q``, ``(d_model, n_heads * d_head)``; the authors' ``decompose_resid_along_namemovers``
in ``ioi_analysis.ipynb``), patching ``v_nm`` keeps most of the effect (GPT-2: 126.0% of 138.9%) and ``v_rest``
little (13.6%). GPT-2's name movers are known from Wang et al.; here they are found the way Wang et al. define
them (heads that attend from END to the indirect object and write it into the logits), on Llama-layout models
(``q_proj`` and ``input_layernorm``, as SmolLM2), whose queries read ``input_layernorm(x)``: the span read is
that of ``diag(gamma) W_Q[h]^T``, TransformerLens's folded ``W_Q``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from iclr24.core.checks import check_int, check_tensor

__all__ = ["ATTEND_IO", "DIRECT_EFFECT", "find_name_movers", "query_patch_hooks", "query_read_basis"]

# Wang et al.'s name movers, as in tests/interp (SmolLM2: L23H0/1/2/7): from END, attention to the IO above
# ATTEND_IO and more than twice that to S, and a direct effect on logit(IO) - logit(S) above DIRECT_EFFECT.
ATTEND_IO = 0.3
DIRECT_EFFECT = 0.2


def _attention_parts(lm, layer: int):
    block = lm.blocks[layer]
    if lm.layout.q is None or not hasattr(block, "input_layernorm"):
        raise ValueError(f"name-mover queries need a Llama-style layout (a q projection and the block's "
                         f"input_layernorm); {type(lm.model).__name__} has layout {lm.layout}")
    return block.input_layernorm, block.get_submodule(f"{lm.layout.attn}.{lm.layout.q}")


def find_name_movers(lm, pairs, layers, *, batch_size: int = 20) -> tuple[list[tuple[int, int]], list[dict]]:
    """Heads at ``layers`` that act as name movers on the base prompts of ``pairs`` (``answer``: the IO,
    ``other``: S): mean attention from END to the IO's first position above :data:`ATTEND_IO` and above twice
    that to S's, and a mean direct effect on ``logit(IO) - logit(S)`` (the head's output through the final
    norm's scale onto ``W_U[IO] - W_U[S]``) above :data:`DIRECT_EFFECT`. Returns ``(heads, rows)``, ``rows``
    one dict per head with its measurements."""
    from iclr24.subspace_patching.das import _check_pairs, _length_batches

    _check_pairs(pairs)
    layers = [check_int("layer", i, minimum=0) for i in layers]
    if any(i >= lm.n_layers for i in layers):
        raise ValueError(f"layers must be < n_layers={lm.n_layers}, got {layers}")
    norm = lm.model.base_model.norm
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    unembed = lm.model.get_output_embeddings().weight
    last = lm.n_layers - 1
    names = [f"blocks.{i}.attn.hook_{x}" for i in layers for x in ("z", "pattern")] + [f"blocks.{last}.hook_resid_post"]
    sums = {i: torch.zeros(3, lm.n_heads, dtype=torch.float64) for i in layers}  # to IO, to S, direct effect
    with torch.no_grad():
        for rows, length in _length_batches(pairs, batch_size):
            tokens = pairs.base[rows, :length]
            io, s = pairs.answer[rows], pairs.other[rows]
            r, end = torch.arange(len(rows)), torch.full((len(rows),), length - 1)
            _, cache = lm.run_with_cache(tokens, names, positions=end)
            final = cache[f"blocks.{last}.hook_resid_post"][r, end]
            scale = norm.weight / (final.pow(2).mean(-1, keepdim=True) + eps).sqrt()
            direction = (unembed[io] - unembed[s]) * scale  # (B, d_model)
            io_pos, s_pos = (tokens == io[:, None]).long().argmax(1), (tokens == s[:, None]).long().argmax(1)
            for i in layers:
                z = cache[f"blocks.{i}.attn.hook_z"][r, end]  # (B, head, d_head)
                w_o = lm.blocks[i].get_submodule(f"{lm.layout.attn}.{lm.layout.attn_out_proj}").weight
                w_o = w_o.unflatten(1, (lm.n_heads, lm.d_head))  # (d_model, head, d_head)
                pattern = cache[f"blocks.{i}.attn.hook_pattern"][r, :, end]  # (B, head, key_pos)
                sums[i][0] += pattern[r, :, io_pos].sum(0).double()
                sums[i][1] += pattern[r, :, s_pos].sum(0).double()
                sums[i][2] += torch.einsum("nhd,mhd,nm->h", z, w_o, direction).double()
    heads, table = [], []
    for i in layers:
        to_io, to_s, effect = (sums[i] / len(pairs)).tolist()
        for h in range(lm.n_heads):
            mover = to_io[h] > ATTEND_IO and to_io[h] > 2 * to_s[h] and effect[h] > DIRECT_EFFECT
            heads += [(i, h)] if mover else []
            if mover or to_io[h] > ATTEND_IO:
                table.append({"head": f"L{i}H{h}", "attention to IO": to_io[h], "attention to S": to_s[h],
                              "direct effect": effect[h], "name mover": mover})
    return heads, table


def query_read_basis(lm, heads) -> Tensor:
    """An orthonormal basis ``(d_model, k)`` of what the queries of ``heads`` (``[(layer, head), ...]``) read
    from the residual stream: the column space of ``diag(gamma_l) W_Q[l, h]^T`` stacked over the heads
    (``gamma_l``: the scale of block ``l``'s input norm, folded in as TransformerLens does)."""
    if not heads:
        raise ValueError("heads is empty: no name-mover heads to read with")
    columns = []
    for layer, h in heads:
        norm, q_proj = _attention_parts(lm, layer)
        w_q = q_proj.weight[h * lm.d_head:(h + 1) * lm.d_head]  # (d_head, d_model)
        columns.append((w_q * norm.weight[None, :]).T.double())
    u, s, _ = torch.linalg.svd(torch.cat(columns, dim=1), full_matrices=False)
    return u[:, s > s.max() * max(u.shape) * torch.finfo(torch.float32).eps].to(columns[0].dtype).float()


def query_patch_hooks(lm, heads, delta: Tensor) -> dict:
    """Hooks that feed ``heads``' queries the residual stream plus ``delta`` ``(B, d_model)`` at END, all else
    untouched: for each head's block, read ``hook_resid_pre`` and replace the head's ``hook_q`` by
    ``W_Q[h] norm(x + delta)``. Use inside a run that sees the END token only (``EndPatcher.logit_diff_hooked``).
    With ``delta`` the patch's own change and the patch applied to the stream, ``-delta`` keeps the heads'
    queries clean instead."""
    check_tensor("delta", delta, ndim=2, shape_doc="(batch, d_model)")
    hooks, seen = {}, {}
    for layer in sorted({i for i, _ in heads}):
        norm, q_proj = _attention_parts(lm, layer)
        mine = [h for i, h in heads if i == layer]

        def read(x, layer=layer):
            seen[layer] = x

        def patch(q, layer=layer, norm=norm, q_proj=q_proj, mine=mine):
            x = seen[layer] + delta[:, None].to(seen[layer].dtype)  # (B, 1, d_model)
            # module.forward runs no hooks: q_proj's own hook_q hook must not fire inside this one
            new = F.linear(norm.forward(x), q_proj.weight, q_proj.bias).unflatten(-1, (lm.n_heads, lm.d_head))
            q = q.clone()
            q[:, :, mine] = new[:, :, mine].to(q.dtype)
            return q

        hooks[f"blocks.{layer}.hook_resid_pre"] = read
        hooks[f"blocks.{layer}.attn.hook_q"] = patch
    return hooks
