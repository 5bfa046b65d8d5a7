"""Interpreting robustness proofs: verifiers (IBP, DeepZ, CROWN) and ProFIt's proof features.

Debangshu Banerjee, Avaljot Singh, Gagandeep Singh. "Interpreting Robustness Proofs of Deep
Neural Networks". ICLR 2024. https://openreview.net/forum?id=Ev10F9TWML

    from iclr24.proof_features import verify, proof_features, sufficient_set, as_affine_net
    result = verify(model, x, eps=0.02, label=3, method="crown", clip=(0, 1))
    result.lower_bounds, result.verified, result.layer_bounds
    pf = proof_features(result, as_affine_net(model, x.shape))
    kept = sufficient_set(pf)                  # the few features the proof needs
"""

from iclr24.proof_features.profit import (
    ORDERS,
    ProofFeatures,
    feature_gradients,
    feature_order,
    proof_features,
    proves_with,
    sufficient_set,
    top_k_preserved,
    weight_abs_priority,
)
from iclr24.proof_features.training import TRAINING_KINDS, ibp_logit_bounds, make_mlp, pgd_attack, train
from iclr24.proof_features.verify import AffineNet, VerificationResult, as_affine_net, spec_matrix, verify

__all__ = [
    "ORDERS",
    "TRAINING_KINDS",
    "AffineNet",
    "ProofFeatures",
    "VerificationResult",
    "as_affine_net",
    "feature_gradients",
    "feature_order",
    "ibp_logit_bounds",
    "make_mlp",
    "pgd_attack",
    "proof_features",
    "proves_with",
    "spec_matrix",
    "sufficient_set",
    "top_k_preserved",
    "train",
    "verify",
    "weight_abs_priority",
]
