"""Sparse autoencoders that find interpretable features in language models.

Hoagy Cunningham, Aidan Ewart, Logan Riggs, Robert Huben, Lee Sharkey. "Sparse Autoencoders
Find Highly Interpretable Features in Language Models". ICLR 2024. https://arxiv.org/abs/2309.08600

    from iclr24.sae import SparseAutoencoder, SAETrainingConfig, train_sae
    sae = train_sae(activations, SAETrainingConfig(d_sae=512, l1_coefficient=1e-3))
    reconstruction, codes = sae(activations)
    sae.save("my_sae")      # SAELens's layout: sae_weights.safetensors + cfg.json (extra: interp)

Models, hooks and IOI prompts come from :mod:`iclr24.interp`.
"""

from iclr24.sae.autoencoder import SparseAutoencoder
from iclr24.sae.patching import (
    KL_DIRECTIONS,
    feature_patching_curve,
    feature_patching_curve_sets,
    feature_patching_curves,
    interpretability_scores,
)
from iclr24.sae.token_simulation import TokenExplanations, orient_signed_codes, token_simulation_scores
from iclr24.sae.training import (
    Decomposition,
    SAETrainingConfig,
    baseline_decompositions,
    dead_latents,
    fvu,
    l0,
    matched_similarity,
    mmcs,
    sweep_sae,
    topk_fvu,
    toy_superposition,
    train_sae,
    train_saes,
)

__all__ = [
    "KL_DIRECTIONS",
    "Decomposition",
    "SAETrainingConfig",
    "SparseAutoencoder",
    "TokenExplanations",
    "baseline_decompositions",
    "dead_latents",
    "feature_patching_curve",
    "feature_patching_curve_sets",
    "feature_patching_curves",
    "fvu",
    "interpretability_scores",
    "l0",
    "matched_similarity",
    "mmcs",
    "orient_signed_codes",
    "sweep_sae",
    "topk_fvu",
    "token_simulation_scores",
    "toy_superposition",
    "train_sae",
    "train_saes",
]
