"""AID: Attention-based Iterative Decomposition for tensor product representations.

Taewon Park, Inchul Choi, Minho Lee. "Attention-based Iterative Decomposition for Tensor Product
Representation". ICLR 2024. https://arxiv.org/abs/2406.01012

    from iclr24.aid import AID, FastWeightMemory
    aid = AID(input_dim=64, n_inputs=3, n_components=3, component_dim=16)   # any TPR model's decomposition
    components = aid(features)                                                # (*, 3, 64) -> (*, 3, 16)
    fwm = FastWeightMemory(input_dim, n_classes, decomposition="aid")        # or "mlp": the original FWM

The SAR task (``sar_task``) is the paper's synthetic test of systematic generalisation; ``load_babi`` reads
bAbI from a local copy, with the sys-bAbI name swap on the test split.
"""

from iclr24.aid.babi import BabiSample, load_babi
from iclr24.aid.lm import LinearTransformerLM, RecallBatch, recall_corpus, recall_perplexity, train_recall_lm
from iclr24.aid.module import AID, competitive_attention, elu_plus_one
from iclr24.aid.sar import SARBatch, SARNetwork, SARTask, sar_task
from iclr24.aid.tpr import (
    FastWeightMemory,
    LinearTransformerLayer,
    causal_linear_attention,
    memory_reads,
    tpr_read,
    tpr_write,
)
from iclr24.aid.training import (
    SARHistory,
    binding_selectivity,
    recall_accuracy,
    retrieval_selectivity,
    train_sar,
    train_sar_together,
)

__all__ = [
    "AID",
    "BabiSample",
    "FastWeightMemory",
    "LinearTransformerLM",
    "LinearTransformerLayer",
    "RecallBatch",
    "SARBatch",
    "SARHistory",
    "SARNetwork",
    "SARTask",
    "binding_selectivity",
    "causal_linear_attention",
    "competitive_attention",
    "elu_plus_one",
    "load_babi",
    "memory_reads",
    "recall_accuracy",
    "recall_corpus",
    "recall_perplexity",
    "retrieval_selectivity",
    "sar_task",
    "tpr_read",
    "tpr_write",
    "train_recall_lm",
    "train_sar",
    "train_sar_together",
]
