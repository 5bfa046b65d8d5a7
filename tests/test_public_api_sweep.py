"""Issue #46 (part 4): bad inputs to the method packages' public functions and classes.

Each case is a bad input (wrong shape or dtype, NaN/inf, empty, out-of-range scalar, mismatched lengths) that
must fail at the public boundary with a ValueError/TypeError naming the argument, not return a silent wrong
result or a cryptic error from inside torch/numpy. docs/api_sweep.md lists what each case found before its fix.
"""

import math
import random

import numpy as np
import pytest
import torch

from iclr24 import (
    aid,
    coela,
    dats,
    eft,
    federated,
    holonets,
    hyperattention,
    kernel_trees,
    l2mac,
    lfr,
    loqa,
    meta_vbo,
    moe_peft,
    orthogonal_classifier,
    proof_features,
    sae,
    selfcontradiction,
    subspace_patching,
    tora,
)

NAN = float("nan")
t = torch.tensor


def R(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _ints(*shape):
    return torch.ones(*shape, dtype=torch.long)


_EDGES = t([[0, 1], [1, 2]])
_MLP = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
_ORTHO = orthogonal_classifier.FixedNonNegativeOrthogonalClassifier(6, 3)
_FLOATS = r"\(float16, bfloat16, float32, float64\), got int64"

CASES = [
    # --- sae -----------------------------------------------------------------------------------------------
    ("sae.fvu/mismatched", lambda: sae.fvu(R(5, 4), R(3, 4)), ValueError,
     r"reconstruction must have x's shape \(5, 4\)"),
    ("sae.fvu/nan", lambda: sae.fvu(t([[NAN, 1.0], [1.0, 2.0]]), R(2, 2)), ValueError, "x must be finite"),
    ("sae.fvu/empty", lambda: sae.fvu(torch.zeros(0, 4), torch.zeros(0, 4)), ValueError, "x must hold at least 2 rows"),
    ("sae.fvu/int", lambda: sae.fvu(_ints(3, 2), _ints(3, 2)), TypeError, "x must have dtype in " + _FLOATS),
    ("sae.l0/empty", lambda: sae.l0(torch.zeros(0, 4)), ValueError, "codes must hold at least one input"),
    ("sae.dead_latents/1d", lambda: sae.dead_latents(R(5)), ValueError, "codes must have at least 2 dimensions"),
    ("sae.mmcs/width", lambda: sae.mmcs(R(5, 4), R(3, 6)), ValueError,
     r"learned and truth .* got \(5, 4\) and \(3, 6\)"),
    ("sae.mmcs/nan", lambda: sae.mmcs(t([[NAN, 1.0]]), R(3, 2)), ValueError, "learned must be finite"),
    ("sae.matched_similarity/empty", lambda: sae.matched_similarity(R(5, 4), torch.zeros(0, 4)), ValueError,
     "must be non-empty"),
    ("sae.SparseAutoencoder/width", lambda: sae.SparseAutoencoder(4, 8)(R(3, 5)), ValueError,
     r"x must be \(\.\.\., d_in=4\), got shape \(3, 5\)"),
    ("sae.SparseAutoencoder/int", lambda: sae.SparseAutoencoder(4, 8)(_ints(3, 4)), TypeError, "x must have dtype"),
    ("sae.SparseAutoencoder/l1 nan", lambda: sae.SparseAutoencoder(4, 8, l1_coefficient=NAN), ValueError,
     "l1_coefficient must be >= 0"),
    ("sae.toy_superposition/n<0", lambda: sae.toy_superposition(-1), ValueError, "n_samples must be >= 1, got -1"),
    ("sae.toy_superposition/active<0", lambda: sae.toy_superposition(10, active=-1.0), ValueError,
     "active must be > 0"),
    ("sae.topk_fvu/k<0", lambda: sae.topk_fvu(None, R(3, 4), -1), ValueError, "k must be >= 0, got -1"),
    # --- orthogonal_classifier -------------------------------------------------------------------------
    ("oc.nc2_equinorm/float labels", lambda: orthogonal_classifier.nc2_equinorm(R(6, 4), t([0., 1, 0, 1, 0, 1])),
     TypeError, "labels must be integer class indices"),
    ("oc.nc3_self_duality/rows", lambda: orthogonal_classifier.nc3_self_duality(R(6, 4), t([0, 1, 2] * 2), R(2, 4)),
     ValueError, r"weight must be \(num_classes > 2, d=4\).*got shape \(2, 4\)"),
    ("oc.nc3_self_duality/width", lambda: orthogonal_classifier.nc3_self_duality(R(6, 4), t([0, 1, 2] * 2), R(3, 5)),
     ValueError, r"weight must be .*got shape \(3, 5\)"),
    ("oc.own_block_energy/owner", lambda: orthogonal_classifier.own_block_energy(R(6, 4), t([0, 1] * 3), t([0, 1])),
     ValueError, r"owner must hold one class id per feature dimension \(4,\)"),
    ("oc.masked_cross_entropy/float targets",
     lambda: orthogonal_classifier.masked_cross_entropy(R(4, 3), t([0., 1, 2, 0])), TypeError,
     "targets must be an integer tensor"),
    ("oc.masked_cross_entropy/lengths", lambda: orthogonal_classifier.masked_cross_entropy(R(4, 3), t([0, 1, 2])),
     ValueError, r"targets must have one class index per row of logits \(4,\)"),
    ("oc.arc_mixup/alpha 0", lambda: orthogonal_classifier.arc_mixup(R(4, 3), R(4, 3), 0.0), ValueError,
     "alpha must be a finite number > 0"),
    ("oc.arc_mixup_loss/a length", lambda: orthogonal_classifier.arc_mixup_loss(R(4, 6), _ORTHO, t([0, 1, 2, 0]),
                                                                                t([1, 2, 0, 1]), torch.rand(3)),
     ValueError, r"a must have one entry per row of features \(4\)"),
    ("oc.arc_mixup_loss/a > 1", lambda: orthogonal_classifier.arc_mixup_loss(R(4, 6), _ORTHO, t([0, 1, 2, 0]),
                                                                             t([1, 2, 0, 1]), torch.full((4,), 2.0)),
     ValueError, r"a must hold mixing weights in \[0, 1\]"),
    # --- aid -----------------------------------------------------------------------------------------------
    ("aid.competitive_attention/width", lambda: aid.competitive_attention(R(2, 5, 4), R(2, 3, 6)), ValueError,
     "keys and queries must share the last dimension d"),
    ("aid.causal_linear_attention/int", lambda: aid.causal_linear_attention(*(_ints(1, 1, 3, 2),) * 3), TypeError,
     "q must have dtype in " + _FLOATS),
    ("aid.tpr_write/role width", lambda: aid.tpr_write(R(2, 3, 3, 3), R(2, 4), R(2, 3), R(2, 3), R(2, 1)), ValueError,
     r"role1 must be \(2, 3\)"),
    ("aid.tpr_read/unbind2 rank", lambda: aid.tpr_read(R(2, 3, 3, 3), R(2, 3), R(2, 3)), ValueError,
     r"unbind2 \(B, R, D\)"),
    ("aid.memory_reads/T", lambda: aid.memory_reads(R(1, 2, 3, 4), R(1, 3, 2, 4), R(1, 2, 1), 1.0), ValueError,
     r"write must be \(B, T, 3, D\)"),
    ("aid.sar_task/ratio", lambda: aid.sar_task(ratio=1.5), ValueError, "ratio must be <= 1, got 1.5"),
    # --- dats ----------------------------------------------------------------------------------------------
    ("dats.rad_probabilities/nan", lambda: dats.rad_probabilities(t([1.0, NAN])), ValueError,
     "residuals must be finite"),
    ("dats.select_by_residual/n<0", lambda: dats.select_by_residual(t([1.0, 2.0]), -1), ValueError, "n must be >= 0"),
    ("dats.allocate_points/nan", lambda: dats.allocate_points(t([0.5, NAN]), 30), ValueError,
     "probabilities must be finite"),
    ("dats.gradient_alignment/nan", lambda: dats.gradient_alignment(t([1.0, NAN]), t([1.0, 1.0]), R(2, 3), R(2, 3)),
     ValueError, "train_losses must be finite"),
    ("dats.derivatives/no grad", lambda: dats.derivatives(R(4), R(4, 2)), ValueError,
     r"coords must be an \(M, 2\) tensor .* requires grad"),
    ("dats.derivatives/u length", lambda: dats.derivatives(R(3), R(4, 2).requires_grad_()), ValueError,
     r"u must be the network's output at coords, shape \(4,\)"),
    # --- moe_peft ------------------------------------------------------------------------------------------
    ("moe_peft.keep_top_k/k 0", lambda: moe_peft.keep_top_k(torch.rand(3, 4), 0), ValueError, "k must be >= 1"),
    ("moe_peft.keep_top_k/0-d", lambda: moe_peft.keep_top_k(t(0.5), 1), ValueError, "probs must have at least 1"),
    ("moe_peft.load_balancing_loss/empty", lambda: moe_peft.load_balancing_loss(torch.zeros(0, 4)), ValueError,
     "probs must hold at least one token"),
    ("moe_peft.routing_mutual_information/list", lambda: moe_peft.routing_mutual_information(t([[0.5, 0.5]]), [1.0]),
     TypeError, "weights must be a torch.Tensor"),
    ("moe_peft.Router/width", lambda: moe_peft.Router(4, 2)(R(3, 5)), ValueError,
     r"x must be \(\*, in_features=4\), got shape \(3, 5\)"),
    ("moe_peft.Router/int", lambda: moe_peft.Router(4, 2)(_ints(3, 4)), TypeError, "x must have dtype in " + _FLOATS),
    # --- eft -----------------------------------------------------------------------------------------------
    ("eft.eft_logprobs/nan", lambda: eft.eft_logprobs(t([NAN, 0.0]), t([0., 0.]), t([0., 0.])), ValueError,
     r"base_large must hold log-probabilities \(finite or -inf\), found NaN or \+inf"),
    ("eft.eft_logprobs/empty vocab", lambda: eft.eft_logprobs(torch.zeros(0), torch.zeros(0), torch.zeros(0)),
     ValueError, "base_large must be .* vocab >= 1"),
    ("eft.implicit_reward/nan", lambda: eft.implicit_reward(t([NAN, 0.]), t([0., 0.])), ValueError,
     "ft must hold log-probabilities"),
    ("eft.implicit_reward/shapes", lambda: eft.implicit_reward(t([0., 0.]), t([0., 0., 0.])), ValueError,
     "ft and base must have the same shape"),
    ("eft.interpolate_rewards/nan weight", lambda: eft.interpolate_rewards(t([0., 0.]), [t([0., 0.])], [NAN]),
     ValueError, r"weights\[0\] must be a finite number"),
    # --- meta_vbo ------------------------------------------------------------------------------------------
    ("meta_vbo.value_at_risk/nan", lambda: meta_vbo.value_at_risk(t([NAN, 1.0]), 0.5), ValueError,
     "values must be finite"),
    ("meta_vbo.value_at_risk/alpha 2", lambda: meta_vbo.value_at_risk(t([0., 1.0]), 2.0), ValueError,
     "alpha must be <= 1"),
    ("meta_vbo.value_at_risk/weights", lambda: meta_vbo.value_at_risk(t([0., 1.0]), 0.5, t([2.0, 2.0])), ValueError,
     "weights must be a probability vector"),
    ("meta_vbo.conditional_value_at_risk/alpha 0", lambda: meta_vbo.conditional_value_at_risk(t([0., 1.]), 0.0),
     ValueError, "alpha must be > 0"),
    ("meta_vbo.lacing_values/lengths", lambda: meta_vbo.lacing_values(t([0., 1.0]), t([0., 1.0, 2.0]), 0.5), ValueError,
     "lower and upper must have the same shape"),
    # --- holonets ------------------------------------------------------------------------------------------
    ("holonets.characteristic_operator/node ids", lambda: holonets.characteristic_operator(t([[0, 5], [0, 5]]), 3),
     ValueError, r"edge_index holds node ids in \[0, 5\], expected \[0, 2\]"),
    ("holonets.characteristic_operator/float edges", lambda: holonets.characteristic_operator(_EDGES.float(), 3),
     TypeError, "edge_index must hold integers"),
    ("holonets.characteristic_operator/nan weight", lambda: holonets.characteristic_operator(_EDGES, 3, t([NAN, 1.])),
     ValueError, "edge_weight must be finite"),
    ("holonets.characteristic_operator/weight length", lambda: holonets.characteristic_operator(_EDGES, 3, t([1.])),
     ValueError, r"edge_weight must have one entry per edge \(2\)"),
    ("holonets.dense_characteristic_operator/node ids",
     lambda: holonets.dense_characteristic_operator(t([[0, 5], [0, 5]]), 3), ValueError, "edge_index holds node ids"),
    ("holonets.spectrum/non-square", lambda: holonets.spectrum(R(3, 4)), ValueError, r"T must be a square"),
    ("holonets.spectrum/nan", lambda: holonets.spectrum(t([[NAN, 0.], [0., 1.]])), ValueError, "T must be finite"),
    ("holonets.faber_response/0-d", lambda: holonets.faber_response(t(1.0), t([1.0])), ValueError,
     "coefficients must have at least 1 dimensions"),
    ("holonets.faber_response/nan", lambda: holonets.faber_response(t([NAN]), t([1.0])), ValueError,
     "coefficients must be finite"),
    ("holonets.ResolventConv/channels", lambda: holonets.ResolventConv(4, 4)(R(3, 5), _EDGES), ValueError,
     "x has 5 channels, this layer expects in_channels=4"),
    # --- hyperattention ------------------------------------------------------------------------------------
    ("hyperattention.exact_attention/int", lambda: hyperattention.exact_attention(*(_ints(1, 3, 2),) * 3), TypeError,
     "q must have dtype in " + _FLOATS),
    ("hyperattention.exact_attention/d", lambda: hyperattention.exact_attention(R(1, 3, 2), R(1, 3, 4), R(1, 3, 2)),
     ValueError, r"expected q \(B, n_q, d\), k \(B, n_k, d\)"),
    ("hyperattention.exact_attention/n_k", lambda: hyperattention.exact_attention(R(1, 3, 2), R(1, 3, 2), R(1, 4, 2)),
     ValueError, r"got \(1, 3, 2\), \(1, 3, 2\) and \(1, 4, 2\)"),
    ("hyperattention.exact_attention/nan", lambda: hyperattention.exact_attention(t([[[NAN, 1.0]]]), R(1, 1, 2),
                                                                                R(1, 1, 2)),
     ValueError, "q must be finite"),
    ("hyperattention.exact_attention/scale inf", lambda: hyperattention.exact_attention(R(1, 3, 2), R(1, 3, 2),
                                                                                      R(1, 3, 2), scale=math.inf),
     ValueError, "scale must be finite"),
    ("hyperattention.exact_attention/2-d", lambda: hyperattention.exact_attention(R(3, 2), R(3, 2), R(3, 2)),
     ValueError, r"q must have 3 dimensions \(B, n, d\)"),
    ("hyperattention.merge_attention/lse", lambda: hyperattention.merge_attention(R(1, 3, 2), R(1, 3), R(1, 3, 2),
                                                                                  R(1, 4)),
     ValueError, r"out2 must be \(\.\.\., n, d_v\) and its lse"),
    ("hyperattention.lsh_bucket_ranks/d", lambda: hyperattention.lsh_bucket_ranks(R(3, 4), R(5, 2)), ValueError,
     r"projections must be \(d, r\)"),
    ("hyperattention.hyper_attention/causal", lambda: hyperattention.hyper_attention(R(1, 8, 2), R(1, 6, 2),
                                                                                      R(1, 6, 2), causal=True),
     ValueError, "causal=True needs as many queries as keys"),
    # --- federated -----------------------------------------------------------------------------------------
    ("federated.similarity_weights/nan", lambda: federated.similarity_weights(t([[NAN, 1.0], [1.0, 0.0]])), ValueError,
     "features must be finite"),
    ("federated.mix_state_dicts/weights", lambda: federated.mix_state_dicts([{"w": R(2)}, {"w": R(2)}], torch.eye(3)),
     ValueError, r"weights must be a non-negative \(2, 2\) matrix"),
    ("federated.mix_state_dicts/shapes", lambda: federated.mix_state_dicts([{"w": R(2)}, {"w": R(3)}],
                                                                          torch.full((2, 2), 0.5)),
     ValueError, r"states\[1\]\['w'\] has shape \(3,\), states\[0\]'s is \(2,\)"),
    ("federated.client_features/labels", lambda: federated.client_features(R(4, 3), t([1., -1.]), [0]), ValueError,
     r"y must be a 1-D tensor with one label per sample of x \(4\)"),
    ("federated.dirichlet_partition/alpha 0", lambda: federated.dirichlet_partition([0, 1, 0, 1], 2, 0.0), ValueError,
     "alpha must be > 0"),
    ("federated.local_train/lr 0", lambda: federated.local_train(torch.nn.Linear(3, 1), R(4, 3), t([1., -1., 1., 1.]),
                                                                 steps=1, lr=0.0),
     ValueError, "lr must be > 0"),
    # --- kernel_trees --------------------------------------------------------------------------------------
    ("kernel_trees.kernel_kmeans_cost/labels", lambda: kernel_trees.kernel_kmeans_cost(np.eye(4), np.array([0, 1])),
     ValueError, r"labels must hold one cluster label per row of K \(4,\)"),
    ("kernel_trees.kernel_kmeans_cost/nan", lambda: kernel_trees.kernel_kmeans_cost(np.full((2, 2), np.nan),
                                                                                    np.array([0, 1])),
     ValueError, "K must be finite"),
    ("kernel_trees.kernel_kmeans_cost/non-square", lambda: kernel_trees.kernel_kmeans_cost(np.ones((2, 3)),
                                                                                           np.array([0, 1])),
     ValueError, r"K must be a non-empty square"),
    ("kernel_trees.best_interval_split/rows", lambda: kernel_trees.best_interval_split(np.random.rand(5, 2),
                                                                                       np.random.rand(4, 3)),
     ValueError, r"x must be \(m, d\) and w \(m, k\) with one m"),
    ("kernel_trees.best_interval_split/nan", lambda: kernel_trees.best_interval_split(np.full((5, 2), np.nan),
                                                                                      np.random.rand(5, 3)),
     ValueError, "x and w must be finite"),
    ("kernel_trees.build_features/gamma", lambda: kernel_trees.build_features("taylor", np.random.rand(5, 2), "rbf",
                                                                              -1.0),
     ValueError, "gamma must be a finite number > 0, got -1.0"),
    ("kernel_trees.KernelKMeans/k 0", lambda: kernel_trees.KernelKMeans(n_clusters=0).fit(np.random.rand(10, 2)),
     ValueError, "n_clusters"),
    # --- proof_features ------------------------------------------------------------------------------------
    ("proof_features.spec_matrix/label", lambda: proof_features.spec_matrix(5, 3), ValueError,
     r"label must be in \[0, 2\] \(n_classes=3\), got 5"),
    ("proof_features.spec_matrix/label<0", lambda: proof_features.spec_matrix(-1, 3), ValueError,
     "label must be >= 0, got -1"),
    ("proof_features.spec_matrix/one class", lambda: proof_features.spec_matrix(0, 1), ValueError,
     "n_classes must be >= 2"),
    ("proof_features.verify/eps<0", lambda: proof_features.verify(_MLP, R(4), -0.1, 0), ValueError, "eps must be > 0"),
    ("proof_features.verify/nan", lambda: proof_features.verify(_MLP, t([NAN, 0., 0., 0.]), 0.1, 0), ValueError,
     "x must be finite"),
    ("proof_features.verify/crown one layer", lambda: proof_features.verify(torch.nn.Sequential(torch.nn.Linear(4, 3)),
                                                                            R(4), 0.1, 0),
     ValueError, "method='crown' needs a model with at least one hidden ReLU layer"),
    ("proof_features.pgd_attack/eps<0", lambda: proof_features.pgd_attack(_MLP, R(2, 4), t([0, 1]), -0.1), ValueError,
     "eps must be > 0"),
    ("proof_features.pgd_attack/float y", lambda: proof_features.pgd_attack(_MLP, R(2, 4), t([0., 1.]), 0.1),
     TypeError, "y must be an integer tensor of class indices, got float32"),
    ("proof_features.pgd_attack/y length", lambda: proof_features.pgd_attack(_MLP, R(2, 4), t([0, 1, 2]), 0.1),
     ValueError, r"y must hold one class index per row of x \(2,\)"),
    ("proof_features.make_mlp/hidden", lambda: proof_features.make_mlp(4, (5, -1), 3), ValueError,
     r"hidden\[1\] must be >= 1, got -1"),
    # --- lfr -----------------------------------------------------------------------------------------------
    ("lfr.greedy_dpp/k 0", lambda: lfr.greedy_dpp(torch.eye(3), 0), ValueError, "k must be >= 1"),
    ("lfr.batch_barlow_loss/shapes", lambda: lfr.batch_barlow_loss(R(4, 3), R(5, 3)), ValueError,
     r"prediction and target must be \(batch, dim\) of one shape"),
    ("lfr.select_diverse/k<0", lambda: lfr.select_diverse([torch.nn.Linear(2, 2)] * 3, -1, R(4, 2), None), ValueError,
     "k must be >= 1, got -1"),
    ("lfr.select_diverse/k>n", lambda: lfr.select_diverse([torch.nn.Linear(2, 2)] * 3, 5, R(4, 2), None), ValueError,
     r"k must be in \[1, 3\] \(the number of projectors\), got 5"),
    ("lfr.series_augment/1-d", lambda: lfr.series_augment(R(8)), ValueError, r"\(n, channels, length\)"),
    # --- loqa ----------------------------------------------------------------------------------------------
    ("loqa.dice_objective/T", lambda: loqa.dice_objective(R(5, 3), R(5, 3), R(4, 3), 0.9), ValueError,
     r"must share one \(T, B\) shape, got \(5, 3\), \(5, 3\) and \(4, 3\)"),
    ("loqa.dice_objective/gamma nan", lambda: loqa.dice_objective(R(5, 3), R(5, 3), R(5, 3), NAN), ValueError,
     "gamma must be finite"),
    ("loqa.dice_objective/gamma 2", lambda: loqa.dice_objective(R(5, 3), R(5, 3), R(5, 3), 2.0), ValueError,
     "gamma must be <= 1, got 2"),
    ("loqa.loaded_dice_returns/T", lambda: loqa.loaded_dice_returns(R(5, 3), R(4, 3), R(5, 3), 0.9, 0.9), ValueError,
     r"opp_rewards, opp_values and own_logps must share one \(T, B\) shape"),
    ("loqa.loaded_dice_returns/gamma<0", lambda: loqa.loaded_dice_returns(R(5, 3), R(5, 3), R(5, 3), -0.5, 0.9),
     ValueError, "gamma must be >= 0"),
    ("loqa.is_reciprocal/missing", lambda: loqa.is_reciprocal({"CC": 1.0}), ValueError, r"missing \['CD', 'DD'\]"),
    ("loqa.FixedMemoryOne/p > 1", lambda: loqa.FixedMemoryOne([1.5, 0, 0, 0, 0]), ValueError,
     "p_cooperate must be 5 probabilities"),
    # --- tora ----------------------------------------------------------------------------------------------
    ("tora.majority_vote/str", lambda: tora.majority_vote("123"), TypeError, "answers must be a sequence"),
    ("tora.is_equivalent/rel_tol<0", lambda: tora.is_equivalent("1", "1.5", rel_tol=-1), ValueError,
     "rel_tol must be >= 0"),
    ("tora.is_equivalent/rel_tol nan", lambda: tora.is_equivalent("1", "2", rel_tol=NAN), ValueError,
     "rel_tol must be finite"),
    ("tora.truncate_output/limit<0", lambda: tora.truncate_output("abc", -1), ValueError, "limit must be >= 0"),
    ("tora.find_boxed/None", lambda: tora.find_boxed(None), TypeError, "text must be a str, got NoneType"),
    ("tora.extract_answer/int", lambda: tora.extract_answer(5), TypeError, "text must be a str, got int"),
    # --- coela, l2mac, selfcontradiction -------------------------------------------------------------------
    ("coela.parse_choice/no options", lambda: coela.parse_choice("A", [], random.Random(0)), ValueError,
     "options must hold 1 to 26 plans, got 0"),
    ("coela.parse_choice/None", lambda: coela.parse_choice(None, ["go"], random.Random(0)), TypeError,
     "reply must be a str"),
    ("coela.TransportEnv/n_objects<0", lambda: coela.TransportEnv(n_objects=-1), ValueError, "n_objects must be >= 1"),
    ("l2mac.detect_cycle/str", lambda: l2mac.detect_cycle("abab"), TypeError, "messages must be a list of messages"),
    ("l2mac.detect_cycle/int lengths", lambda: l2mac.detect_cycle(["a", "b"], -1), TypeError,
     "lengths must be a sequence of cycle lengths"),
    ("l2mac.detect_cycle/length 0", lambda: l2mac.detect_cycle(["a", "b"], (0,)), ValueError,
     r"lengths\[0\] must be >= 1"),
    ("l2mac.parse_tool_call/None", lambda: l2mac.parse_tool_call(None), TypeError, "text must be a str"),
    ("selfcontradiction.precision_recall_f1/nan", lambda: selfcontradiction.precision_recall_f1([0.5], [True], NAN),
     ValueError, "threshold must be finite"),
    ("selfcontradiction.precision_recall_f1/lengths",
     lambda: selfcontradiction.precision_recall_f1([0.5, 0.1], [True], 0.5), ValueError,
     "scores and labels must have the same length"),
    ("selfcontradiction.parse_triples/None", lambda: selfcontradiction.parse_triples(None), TypeError,
     "text must be a str, got NoneType"),
    ("selfcontradiction.rule_based_triple/int", lambda: selfcontradiction.rule_based_triple(3), TypeError,
     "sentence must be a str, got int"),
    ("selfcontradiction.split_sentences/int", lambda: selfcontradiction.split_sentences(5), TypeError,
     "text must be a str"),
    # --- subspace_patching ---------------------------------------------------------------------------------
    ("subspace_patching.patch_subspace/basis", lambda: subspace_patching.patch_subspace(R(2, 3), R(2, 3), R(4, 2)),
     ValueError, r"basis must be \(d, k\) with d=3"),
    ("subspace_patching.patch_direction/zero v", lambda: subspace_patching.patch_direction(R(2, 3), R(2, 3),
                                                                                           torch.zeros(3)),
     ValueError, "v must be a non-zero direction"),
    ("subspace_patching.rowspace_nullspace_split/W_out", lambda: subspace_patching.rowspace_nullspace_split(R(3),
                                                                                                       R(4, 5)),
     ValueError, r"W_out must be \(d_model, d_mlp\) with d_mlp = len\(v\) = 3"),
    ("subspace_patching.toy_patches/shapes", lambda: subspace_patching.toy_patches(R(2, 3), R(3, 3)), ValueError,
     "source must have base's shape"),
    ("subspace_patching.DistributedAlignmentSearch/width",
     lambda: subspace_patching.DistributedAlignmentSearch(4, 1)(R(2, 5), R(2, 5)), ValueError,
     r"base and source must be \(\.\.\., 4\)"),
]


@pytest.mark.parametrize(("call", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_at_the_public_boundary(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_checked_entry_points_still_accept_good_input():
    """A valid call through each entry point given a new check (its package's own tests cover the values)."""
    x = R(6, 4)
    assert 0 <= sae.fvu(x, x * 0.9) < 1
    assert sae.l0(torch.relu(x)) >= 0 and sae.dead_latents(torch.relu(x)) >= 0
    assert sae.SparseAutoencoder(4, 8)(x)[0].shape == (6, 4)
    assert hyperattention.exact_attention(R(1, 3, 2), R(1, 5, 2), R(1, 5, 7))[0].shape == (1, 3, 7)
    assert holonets.dense_characteristic_operator(_EDGES, 3).shape == (3, 3)
    assert moe_peft.Router(4, 2)(x).shape == (6, 2)
    assert torch.isfinite(loqa.dice_objective(R(5, 3), R(5, 3), R(5, 3), 0.9))
    assert proof_features.spec_matrix(np.int64(1), 3).shape == (2, 3)
    assert kernel_trees.kernel_kmeans_cost(np.eye(4), np.array([0, 0, 1, 1])) == pytest.approx(2.0)
    assert torch.allclose(eft.eft_logprobs(t([0.0, -math.inf]), reward=t([0.0, 0.0])), t([0.0, -math.inf]).double())
    assert tora.majority_vote(["1/2", "0.5", None]) == ("1/2", 2)
    assert lfr.select_diverse([torch.nn.Linear(2, 2)] * 3, 2, R(4, 2), None) == [0, 1]
