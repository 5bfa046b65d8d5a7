"""A fixed non-negative orthogonal classifier: zero-mean neural collapse and feature dimension separation.

Hoyong Kim, Kangil Kim. "Fixed Non-negative Orthogonal Classifier: Inducing Zero-mean Neural Collapse
with Feature Dimension Separation". ICLR 2024. https://openreview.net/forum?id=F4bmOrmUwc

    from iclr24.orthogonal_classifier import FixedNonNegativeOrthogonalClassifier
    model = nn.Sequential(encoder, nn.ReLU(), FixedNonNegativeOrthogonalClassifier(512, 100))  # never trained
"""

from iclr24.orthogonal_classifier.classifier import (
    ARC_MIXINGS,
    FixedNonNegativeOrthogonalClassifier,
    LearnableClassifier,
    SimplexETFClassifier,
    arc_mixup,
    arc_mixup_loss,
    class_balanced_pairs,
    masked_cross_entropy,
)
from iclr24.orthogonal_classifier.collapse import (
    class_means,
    nc1,
    nc2_equiangular,
    nc2_equinorm,
    nc3_self_duality,
    own_block_energy,
    raw_mean_cosine,
    zero_mean_collapse,
)

__all__ = ["ARC_MIXINGS", "FixedNonNegativeOrthogonalClassifier", "LearnableClassifier", "SimplexETFClassifier",
           "arc_mixup", "arc_mixup_loss", "class_balanced_pairs", "class_means", "masked_cross_entropy", "nc1",
           "nc2_equiangular", "nc2_equinorm", "nc3_self_duality", "own_block_energy", "raw_mean_cosine",
           "zero_mean_collapse"]
