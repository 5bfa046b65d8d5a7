import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from iclr24.lfr import LFR, batch_barlow_loss, greedy_dpp, max_min_selection, projector_kernel, select_diverse
from iclr24.lfr.networks import conv1d_encoder, conv1d_projector, conv2d_encoder, conv2d_projector, mlp_encoder


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def make_lfr(d=5, **kwargs):
    torch.manual_seed(0)
    return LFR(mlp_encoder(d, dim=16, hidden=16), d, projector_dim=8, seed=0, **kwargs)


# -- the loss ------------------------------------------------------------------------------------------------
def test_loss_is_zero_for_a_perfect_prediction_of_orthogonal_targets_at_any_scale():
    target = torch.eye(4, 6)
    assert batch_barlow_loss(target, target).item() == 0.0
    assert batch_barlow_loss(3.0 * target, target).item() == pytest.approx(0.0, abs=1e-12)


def test_loss_known_value():
    prediction = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # C = [[1, 1/sqrt2], [0, 1/sqrt2]]: on-diagonal (1/sqrt2 - 1)^2, off-diagonal lam * (1/2 + 0).
    expected = (1 / math.sqrt(2) - 1) ** 2 + 0.3 * 0.5
    assert batch_barlow_loss(prediction, target, lam=0.3).item() == pytest.approx(expected, rel=1e-6)


# The official Income recipe (layer6ai-labs/lfr: scripts/income/run_income_lfr.sh, main.py's argparse defaults for
# what the script does not set, utils/trainers.py): our defaults are these numbers.
OFFICIAL_INCOME = {"n_projectors": 6,          # --num_targets 6
                   "projector_dim": 256,       # --dim 256 / --pred_dim 256
                   "lam": 0.01,                # main.py --lambd default 0.01 (bt_loss_bs's too)
                   "pred_epochs": 1,           # --pred_epochs 1
                   "diversity": "dpp",         # dpp.py on the candidates
                   "epochs": 100, "batch_size": 128, "lr": 1e-3,  # --epochs 100 -b 128 --lr 0.001
                   "weight_decay": 0.0}        # --wd 0


def _defaults(fn):
    import inspect

    return {k: v.default for k, v in inspect.signature(fn).parameters.items() if v.default is not inspect._empty}


def test_defaults_are_the_official_income_recipe():
    from iclr24.lfr import LFRTransformer
    from iclr24.lfr.training import SelfSupervised

    ours = _defaults(LFR.__init__) | _defaults(SelfSupervised.fit)
    assert {k: ours[k] for k in OFFICIAL_INCOME} == OFFICIAL_INCOME
    transformer = LFRTransformer().get_params()
    assert {k: transformer[k] for k in OFFICIAL_INCOME if k != "weight_decay"} == {
        k: v for k, v in OFFICIAL_INCOME.items() if k != "weight_decay"}
    assert (transformer["dim"], transformer["hidden"], transformer["depth"]) == (256, 256, 4)  # 4-layer MLP, 256
    assert _defaults(batch_barlow_loss)["lam"] == 0.01
    assert make_lfr(n_projectors=2).n_candidates == 20  # --target_sample_ratio 10: 10 K candidates


def test_the_default_loss_weighs_the_off_diagonal_by_the_official_0_01():
    # the hand case of test_loss_known_value, at the default lam: on-diagonal (1/sqrt2 - 1)^2, off-diagonal 0.01 / 2
    prediction = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    expected = (1 / math.sqrt(2) - 1) ** 2 + 0.01 * 0.5
    assert batch_barlow_loss(prediction, target).item() == pytest.approx(expected, rel=1e-6)
    model = make_lfr(n_projectors=2, diversity=None)
    X = torch.randn(16, 5)
    predictions, targets = model(X)
    by_hand = torch.stack([batch_barlow_loss(p, z, lam=0.01) for p, z in zip(predictions, targets)]).mean()
    torch.testing.assert_close(model.loss(X), by_hand)


def test_lfr_is_a_torch_module_and_lfr_transformer_the_scikit_learn_estimator():
    from sklearn.base import clone

    from iclr24.lfr import LFRTransformer

    with pytest.raises(TypeError, match="get_params"):  # documented: LFR trains its encoder in place
        clone(make_lfr(n_projectors=2))
    encoder = nn.Linear(4, 3)
    original = LFRTransformer(encoder, n_projectors=2, projector_dim=4, lam=0.1, epochs=2, random_state=0)
    copy = clone(original)
    assert copy.get_params(deep=False).keys() == original.get_params(deep=False).keys()
    assert copy.lam == 0.1 and copy.encoder is not encoder and not hasattr(copy, "model_")
    X = np.random.default_rng(0).normal(size=(32, 4))
    np.testing.assert_array_equal(copy.fit(X).transform(X), clone(original).fit(X).transform(X))


def test_loss_is_positive_off_target_and_its_off_diagonal_term_scales_with_lam():
    torch.manual_seed(0)
    p, z = torch.randn(8, 5), torch.randn(8, 5)
    a, b = batch_barlow_loss(p, z, lam=0.0), batch_barlow_loss(p, z, lam=1.0)
    C = F.normalize(p, dim=1) @ F.normalize(z, dim=1).T
    assert a.item() == pytest.approx(((C.diagonal() - 1) ** 2).sum().item(), rel=1e-5)
    assert (b - a).item() == pytest.approx((C ** 2).sum().item() - (C.diagonal() ** 2).sum().item(), rel=1e-5)
    assert a.item() > 0


def test_loss_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="prediction and target"):
        batch_barlow_loss(torch.zeros(4, 3), torch.zeros(4, 2))


# -- diversity ----------------------------------------------------------------------------------------------
def brute_force_greedy(L, k):
    chosen = []
    for _ in range(k):
        gains = {j: torch.linalg.det(L[chosen + [j]][:, chosen + [j]]).item() for j in range(len(L)) if j not in chosen}
        chosen.append(max(gains, key=gains.get))
    return chosen


@pytest.mark.parametrize("seed", range(5))
def test_greedy_dpp_equals_greedy_determinant_maximisation(seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(9, 12, generator=g, dtype=torch.float64)
    L = A @ A.T
    assert greedy_dpp(L, 5) == brute_force_greedy(L, 5)


def test_diversity_prefers_dissimilar_candidates():
    # 0, 1 and 2 are near copies of one direction; 3 and 4 point elsewhere.
    V = torch.tensor([[1, 0, 0], [1, 0.01, 0], [1, 0, 0.01], [0, 1, 0], [0.1, 0.1, 1]], dtype=torch.float64)
    V = F.normalize(V, dim=1)
    L = V @ V.T
    for select in (greedy_dpp, max_min_selection):
        chosen = select(L, 3)
        assert len(set(chosen)) == 3 and {3, 4} <= set(chosen), select.__name__


def test_greedy_dpp_returns_k_distinct_items_from_a_rank_deficient_kernel():
    L = torch.ones(6, 6, dtype=torch.float64)
    chosen = greedy_dpp(L, 4)
    assert len(chosen) == 4 and len(set(chosen)) == 4


def test_selection_refuses_bad_k():
    with pytest.raises(ValueError, match="k must be in"):
        greedy_dpp(torch.eye(3), 4)
    with pytest.raises(ValueError, match="k must be >= 1"):
        max_min_selection(torch.eye(3), 0)
    with pytest.raises(TypeError, match="k must be an int"):
        greedy_dpp(torch.eye(3), 2.0)
    with pytest.raises(ValueError, match="NaN"):
        greedy_dpp(torch.full((3, 3), float("nan")), 2)
    with pytest.raises(ValueError, match="symmetric"):
        greedy_dpp(torch.tensor([[1.0, 0.5], [0.0, 1.0]]), 1)
    with pytest.raises(ValueError, match="square"):
        max_min_selection(torch.ones(2, 3), 1)
    assert greedy_dpp(np.eye(3), 2) == [0, 1]  # numpy kernels are accepted


def test_projector_kernel_equals_the_direct_cosine_of_similarity_matrices():
    torch.manual_seed(0)
    projectors = [nn.Linear(4, 6) for _ in range(5)] + [None]
    projectors[-1] = projectors[0]
    x = torch.randn(37, 4)
    K = projector_kernel(projectors, x, block_rows=8)
    flat = []
    for p in projectors:
        z = F.normalize(p(x), dim=1)
        flat.append((z @ z.T).flatten())
    flat = F.normalize(torch.stack(flat).double(), dim=1)
    torch.testing.assert_close(K, flat @ flat.T, atol=1e-6, rtol=1e-6)
    assert K[0, 5].item() == pytest.approx(1.0)


# -- the model -----------------------------------------------------------------------------------------------
def test_candidates_and_selection():
    model = make_lfr(n_projectors=3, n_candidates=12)
    assert model.selected_ == [] and len(model.projectors) == 0
    with pytest.raises(RuntimeError, match="choose the projectors first"):
        model.loss(torch.randn(4, 5))
    chosen = model.select_projectors(torch.randn(50, 5))
    assert len(chosen) == 3 and len(set(chosen)) == 3 and all(0 <= i < 12 for i in chosen)
    assert len(model.projectors) == 3 and model.selected_ == chosen
    with pytest.raises(RuntimeError, match="already chosen"):
        model.select_projectors(torch.randn(50, 5))


def test_no_diversity_keeps_the_first_k_candidates_and_default_candidate_counts():
    assert make_lfr(n_projectors=3, diversity=None).selected_ == [0, 1, 2]
    assert make_lfr(n_projectors=3).n_candidates == 30
    assert make_lfr(n_projectors=3, diversity=None).n_candidates == 3


def test_projectors_are_frozen_and_the_encoder_and_heads_train():
    model = make_lfr(n_projectors=2, n_candidates=4)
    X = torch.randn(64, 5)
    model.select_projectors(X)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert not any(p.requires_grad for p in model.projectors.parameters())
    model.fit(X, epochs=3, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
    after = model.state_dict()
    for name, value in before.items():
        changed = not torch.equal(value, after[name])
        assert changed == (not name.startswith("projectors")), name
    model.train()
    assert all(not m.training for m in model.projectors.modules())
    assert model.history_[0].keys() == {"encoder", "predictors"}


def test_predictor_phase_leaves_the_encoder_without_gradients_and_encoder_phase_steps_only_the_encoder():
    model = make_lfr(n_projectors=2, diversity=None)
    phases = model.phases()
    assert [p.name for p in phases] == ["encoder", "predictors"]
    assert {id(p) for p in phases[0].parameters} == {id(p) for p in model.encoder.parameters()}
    assert {id(p) for p in phases[1].parameters} == {id(p) for p in model.predictors.parameters()}
    assert phases[1].encoder_frozen and not phases[0].encoder_frozen
    model._encoder_frozen = True
    model.loss(torch.randn(8, 5)).backward()
    assert all(p.grad is None for p in model.encoder.parameters())
    assert all(p.grad is not None for p in model.predictors.parameters())



def test_a_phase_computes_gradients_only_for_its_own_parameters_and_trains_exactly_as_before(monkeypatch):
    import contextlib

    import iclr24.lfr.training as training

    X = torch.randn(60, 5)
    seen = []
    original_step = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        seen.append({id(p) for p in self.param_groups[0]["params"]} == {id(p) for p in outs[-1].parameters()
                                                                         if p.grad is not None})
        return original_step(self, *args, **kwargs)

    outs = []
    monkeypatch.setattr(torch.optim.Adam, "step", step)
    outs.append(make_lfr(n_projectors=2, n_candidates=4))
    outs[-1].fit(X, epochs=2, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
    assert seen and all(seen)  # at every step, only the stepped phase's parameters hold gradients
    assert all(p.requires_grad for p in [*outs[-1].encoder.parameters(), *outs[-1].predictors.parameters()])
    monkeypatch.setattr(training, "_only_trained", lambda *a: contextlib.nullcontext())
    outs.append(make_lfr(n_projectors=2, n_candidates=4))
    outs[-1].fit(X, epochs=2, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
    assert not all(seen)  # without it the encoder phase computed the heads' gradients too
    assert torch.equal(outs[0].transform(X), outs[1].transform(X))  # the same training, bit for bit

def test_without_predictor_epochs_the_heads_stay_at_initialisation():
    model = make_lfr(n_projectors=2, diversity=None, pred_epochs=0)
    heads = [p.clone() for p in model.predictors.parameters()]
    model.fit(torch.randn(40, 5), epochs=2, batch_size=8, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(heads, model.predictors.parameters()))
    assert model.history_[0].keys() == {"encoder"}


def test_training_lowers_the_loss():
    torch.manual_seed(0)
    X = torch.randn(256, 8) @ torch.randn(8, 8)
    model = LFR(mlp_encoder(8, dim=32, hidden=32), 8, projector_dim=16, n_projectors=3, seed=0)
    model.fit(X, epochs=15, batch_size=64, lr=3e-3, generator=torch.Generator().manual_seed(0))
    curve = [h["encoder"] for h in model.history_]
    assert curve[-1] < 0.7 * curve[0]


def test_seed_fixes_projectors_heads_and_selection_without_touching_the_global_rng():
    torch.manual_seed(5)
    encoder = nn.Linear(5, 4)
    state = torch.random.get_rng_state()
    a = LFR(encoder, 5, projector_dim=8, n_projectors=2, n_candidates=6, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = LFR(nn.Linear(5, 4), 5, projector_dim=8, n_projectors=2, n_candidates=6, seed=3)
    X = torch.randn(30, 5)
    assert a.select_projectors(X) == b.select_projectors(X)
    for p, q in zip(itertools.chain(a.projectors.parameters(), a.predictors.parameters()),
                    itertools.chain(b.projectors.parameters(), b.predictors.parameters())):
        assert torch.equal(p, q)


def test_fit_is_deterministic():
    X = torch.randn(40, 5)
    outs = []
    for _ in range(2):
        model = make_lfr(n_projectors=2, n_candidates=4)
        model.fit(X, epochs=2, batch_size=8, generator=torch.Generator().manual_seed(1))
        outs.append(model.transform(X))
    assert torch.equal(*outs)


@pytest.mark.parametrize("encoder, projector, shape", [
    (lambda: conv1d_encoder(2, 32, dim=12), conv1d_projector(2, 32, dim=8), (2, 32)),
    (lambda: conv2d_encoder(1, dim=12), conv2d_projector(1, 10, dim=8), (1, 10, 10)),
])
def test_any_encoder_and_projector_family(encoder, projector, shape):
    torch.manual_seed(0)
    model = LFR(encoder(), shape, projector=projector, projector_dim=8, n_projectors=2, n_candidates=4, seed=0)
    X = torch.randn(20, *shape)
    model.fit(X, epochs=1, batch_size=10, generator=torch.Generator().manual_seed(0))
    assert model.transform(X).shape == (20, 12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="diversity must be one of"):
        make_lfr(diversity="random")
    with pytest.raises(ValueError, match="n_candidates must be >= 6"):
        make_lfr(n_candidates=3)
    with pytest.raises(ValueError, match="lam must be >= 0"):
        make_lfr(lam=-1.0)
    with pytest.raises(ValueError, match="expected projector_dim=8"):
        make_lfr(projector=lambda: nn.Linear(5, 3))
    with pytest.raises(ValueError, match=r"X rows must have shape \(5,\)"):
        make_lfr(diversity=None).fit(torch.randn(10, 4), epochs=1)
    with pytest.raises(ValueError, match="NaN"):
        make_lfr(diversity=None).fit(torch.full((10, 5), float("nan")), epochs=1)
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        make_lfr(diversity=None).fit(torch.randn(10, 5), batch_size=1)
    with pytest.raises(TypeError, match="encoder must be a torch.nn.Module"):
        LFR("mlp", 5)


def test_the_cached_predictor_phase_loss_equals_the_live_loss():
    model = make_lfr(n_projectors=3, diversity=None)
    x = torch.randn(16, 5)
    model.eval()
    model._encoder_frozen = True
    live = model.loss(x)
    cached = model._predictor_loss(model._features_and_targets(x))
    torch.testing.assert_close(live, cached)


def test_cached_targets_train_exactly_as_the_live_loss():
    X = torch.randn(60, 5)
    outs = []
    for cache in (True, False):
        model = make_lfr(n_projectors=3, n_candidates=6, cache_targets=cache)
        model.fit(X, epochs=3, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
        outs.append((model.transform(X), model.history_))
        assert model._targets is None  # the cache is dropped after fit
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-5, rtol=1e-4)
    for a, b in zip(outs[0][1], outs[1][1]):
        assert a == pytest.approx(b, rel=1e-5)
    live = make_lfr(n_projectors=3, n_candidates=6)
    live.select_projectors(X)
    live.prepare(X)  # caches the projectors' outputs on X, normalised per head
    rows = live._inputs_and_targets(X)
    torch.testing.assert_close(live._encoder_loss(rows[:16]), live.loss(X[:16]))


def test_select_diverse_skips_duplicate_projectors():
    torch.manual_seed(0)
    twin = nn.Linear(4, 6)
    projectors = [twin, twin, twin, nn.Linear(4, 6), nn.Linear(4, 6)]
    x = torch.randn(50, 4)
    assert select_diverse(projectors, 3, x, None) == [0, 1, 2]
    for method in ("dpp", "greedy"):
        chosen = select_diverse(projectors, 3, x, method)
        assert {3, 4} <= set(chosen) and len(set(chosen) & {0, 1, 2}) == 1, method
    with pytest.raises(ValueError, match="diversity must be one of"):
        select_diverse(projectors, 3, x, "random")


def test_lfr_selects_the_dpp_map_of_its_candidates():
    model = make_lfr(n_projectors=3, n_candidates=9)
    candidates = list(model.candidates)
    X = torch.randn(80, 5)
    expected = greedy_dpp(projector_kernel(candidates, X), 3)
    assert model.select_projectors(X) == expected
    assert all(p is candidates[i] for p, i in zip(model.projectors, expected))


def test_the_schedule_uses_the_official_adam_and_runs_pred_epochs_passes_with_the_encoder_in_eval_mode(monkeypatch):
    import iclr24.lfr.training as training

    made = []
    real_adam = torch.optim.Adam

    def adam(params, **kwargs):
        made.append(kwargs)
        return real_adam(params, **kwargs)

    monkeypatch.setattr(training.torch.optim, "Adam", adam)
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))
    model = LFR(encoder, 5, projector_dim=8, n_projectors=2, diversity=None, pred_epochs=3, seed=0)
    modes = {"encoder": [], "predictors": []}
    encoder_loss, predictor_loss, features = model._encoder_loss, model._predictor_loss, model._features_and_targets
    model._encoder_loss = lambda rows: (modes["encoder"].append(model.encoder.training), encoder_loss(rows))[1]
    model._predictor_loss = lambda rows: (modes["predictors"].append(None), predictor_loss(rows))[1]
    model._features_and_targets = lambda X: (modes["predictors"].append(model.encoder.training), features(X))[1]
    model.fit(torch.randn(40, 5), epochs=2, batch_size=10, lr=1e-3, generator=torch.Generator().manual_seed(0))
    assert [m["betas"] for m in made] == [(0.9, 0.99), (0.9, 0.99)]
    assert modes["encoder"] == [True] * 8  # 2 epochs x 4 batches, encoder in train mode
    # per epoch: one precompute with the encoder in eval mode, then 3 passes x 4 batches
    assert modes["predictors"] == ([False] + [None] * 12) * 2


def test_minibatches_shuffle_cover_every_row_and_drop_a_single_trailing_row():
    from iclr24.lfr.training import minibatches

    batches = list(minibatches(21, 5, torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [5, 5, 5, 5]  # the 21st row alone would make a 1-row batch
    rows = torch.cat(batches)
    assert len(set(rows.tolist())) == 20 and rows.tolist() != sorted(rows.tolist())
    assert torch.cat(list(minibatches(20, 5, torch.Generator().manual_seed(0)))).sort().values.tolist() == list(
        range(20))


def test_transform_runs_the_encoder_in_eval_mode_and_restores_its_mode():
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.9), nn.Linear(16, 8))
    model = LFR(encoder, 5, projector_dim=8, n_projectors=2, diversity=None, seed=0)
    model.encoder.train()
    X = torch.randn(10, 5)
    assert torch.equal(model.transform(X), model.transform(X)) and model.encoder.training
    with pytest.raises(ValueError, match=r"X rows must have shape \(5,\)"):
        model.transform(torch.randn(3, 4))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        model.transform(X.double())


def test_the_model_moves_with_to_before_fit():
    model = make_lfr(n_projectors=2, n_candidates=4).double()
    model.fit(torch.randn(20, 5, dtype=torch.float64), epochs=1, batch_size=10)
    assert model.transform(torch.randn(3, 5, dtype=torch.float64)).dtype == torch.float64


def test_the_stacked_heads_are_k_linear_layers_drawn_in_order_and_their_loss_is_the_per_head_mean():
    from iclr24.lfr import LinearHeads, batch_barlow_loss_heads

    torch.manual_seed(0)
    heads = LinearHeads(3, 10, 6)
    torch.manual_seed(0)
    separate = [nn.Linear(10, 6) for _ in range(3)]  # what the K heads were before they were stacked
    for k, layer in enumerate(separate):
        assert torch.equal(heads.weight[k], layer.weight) and torch.equal(heads.bias[k], layer.bias)
        assert torch.equal(heads[k].weight, layer.weight)
    assert len(heads) == 3
    h, targets = torch.randn(32, 10, requires_grad=True), torch.randn(32, 18)
    batched = batch_barlow_loss_heads(heads(h), targets, 3, lam=0.05)
    loop = torch.stack([batch_barlow_loss(layer(h), z, lam=0.05)
                        for layer, z in zip(separate, targets.split(6, dim=1))]).mean()
    torch.testing.assert_close(batched, loop)
    normalised = F.normalize(targets.view(32, 3, 6), dim=2).view(32, 18)
    torch.testing.assert_close(batch_barlow_loss_heads(heads(h), normalised, 3, 0.05, normalized_targets=True), loop)
    (grad_batched,) = torch.autograd.grad(batched, h)
    (grad_loop,) = torch.autograd.grad(loop, h)
    torch.testing.assert_close(grad_batched, grad_loop)
    with pytest.raises(ValueError, match="n_heads"):
        batch_barlow_loss_heads(torch.randn(4, 10), torch.randn(4, 10), 3)


def test_the_phases_use_adams_fused_kernel_on_the_cpu(monkeypatch):
    import iclr24.lfr.training as training

    made = []
    real_adam = torch.optim.Adam
    monkeypatch.setattr(training.torch.optim, "Adam",
                        lambda params, **kw: (made.append(kw), real_adam(params, **kw))[1])
    make_lfr(n_projectors=2, diversity=None).fit(torch.randn(20, 5), epochs=1, batch_size=10)
    assert [kw["fused"] for kw in made] == [True, True]
