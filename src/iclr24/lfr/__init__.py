"""Self-supervised representation learning from random data projectors (LFR).

Yi Sui, Tongzi Wu, Jesse C. Cresswell, Ga Wu, George Stein, Xiao Shi Huang, Xiaochen Zhang, Maksims Volkovs.
"Self-supervised Representation Learning from Random Data Projectors". ICLR 2024.
https://openreview.net/forum?id=EpYnZpDpsQ

    from iclr24.lfr import LFR, mlp_encoder
    lfr = LFR(mlp_encoder(d, dim=256), input_shape=d).fit(X, epochs=100)   # X: unlabelled (n, d) tensor
    features = lfr.transform(X)

    from iclr24.lfr import LFRTransformer                                  # the same, as a scikit-learn step
    make_pipeline(StandardScaler(), LFRTransformer(random_state=0), LogisticRegression())
"""

from iclr24.lfr.baselines import SCARF, Autoencoder, RandomInit, SimCLR, image_augment, nt_xent, series_augment
from iclr24.lfr.diversity import greedy_dpp, max_min_selection, projector_kernel, select_diverse
from iclr24.lfr.lfr import LFR, LinearHeads, batch_barlow_loss, batch_barlow_loss_heads
from iclr24.lfr.networks import (
    conv1d_encoder,
    conv1d_projector,
    conv2d_encoder,
    conv2d_projector,
    mlp_encoder,
    mlp_projector,
)
from iclr24.lfr.probe import linear_probe
from iclr24.lfr.training import Phase, SelfSupervised
from iclr24.lfr.transformer import LFRTransformer

__all__ = ["LFR", "SCARF", "Autoencoder", "LFRTransformer", "LinearHeads", "Phase", "RandomInit", "SelfSupervised",
           "SimCLR", "batch_barlow_loss", "batch_barlow_loss_heads", "conv1d_encoder", "conv1d_projector",
           "conv2d_encoder", "conv2d_projector", "greedy_dpp", "image_augment", "linear_probe", "max_min_selection",
           "mlp_encoder", "mlp_projector", "nt_xent", "projector_kernel", "select_diverse", "series_augment"]
