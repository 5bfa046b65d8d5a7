"""The token-simulation interpretability score: planted token features score high, random directions low."""
import pytest
import torch

from iclr24.sae.experiment import simulation_evidence
from iclr24.sae.token_simulation import orient_signed_codes, token_simulation_scores


def planted(seed=0, n_contexts=300, length=16, vocab=200, n_features=64, d=32):
    """Contexts of random tokens; feature f fires (1 to 1.5) on token f; 64 features in superposition in 32
    dimensions, plus a dense per-context component and noise, as a residual stream carries."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (n_contexts, length), generator=g)
    codes = torch.zeros(n_contexts, length, n_features, dtype=torch.float64)
    for f in range(n_features):
        codes[..., f] = (tokens == f) * (1 + 0.5 * torch.rand(n_contexts, length, generator=g, dtype=torch.float64))
    atoms = torch.nn.functional.normalize(torch.randn(n_features, d, generator=g, dtype=torch.float64), dim=-1)
    x = (codes @ atoms + 0.5 * torch.randn(n_contexts, 1, d, generator=g, dtype=torch.float64)
         + 0.1 * torch.randn(n_contexts, length, d, generator=g, dtype=torch.float64))
    context = torch.arange(n_contexts).repeat_interleave(length)
    train = torch.arange(0, n_contexts, 2)
    groups = [torch.arange(1, n_contexts, 2)[g::3] for g in range(3)]
    return codes.flatten(0, 1), x.flatten(0, 1), tokens.flatten(), context, train, groups


def test_planted_token_features_score_high_and_random_directions_low():
    codes, x, tokens, context, train, groups = planted()
    is_train = torch.isin(context, train)
    truth = token_simulation_scores(codes, tokens, context, train, groups)
    rand = torch.linalg.qr(torch.randn(32, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64))[0]
    random = token_simulation_scores(orient_signed_codes(x @ rand, is_train), tokens, context, train, groups)
    neurons = token_simulation_scores(orient_signed_codes(x, is_train), tokens, context, train, groups)
    assert all(s > 0.9 for s in truth.per_group())
    assert all(s < 0.3 for s in random.per_group()) and all(s < 0.3 for s in neurons.per_group())
    # each planted feature is explained first by its own token
    assert torch.equal(truth.tokens[0], torch.arange(64))
    evidence = simulation_evidence({"SAE": truth.per_group(), "random": random.per_group(),
                                    "neurons": neurons.per_group()}, "context groups")
    assert evidence.verdict == "holds"


def test_the_evidence_needs_the_margin_over_random_too():
    # above PCA, ICA and neurons by far, but within SIM_MARGIN of random directions: not more interpretable
    # (each comparison's differences vary over the groups: differences with no spread decide nothing)
    sae = [0.50, 0.52, 0.51]
    groups = {"SAE": sae, "PCA": [0.1] * 3, "ICA": [0.2] * 3, "neurons": [0.1] * 3,
              "random": [s - d for s, d in zip(sae, (0.03, 0.02, 0.03))]}  # 0.027 [0.012, 0.041] above random
    evidence = simulation_evidence(groups, "groups")
    assert evidence.verdict == "fails" and evidence.parts[-1].label == "token-simulation score, SAE - random"
    assert [p.verdict for p in evidence.parts] == ["holds", "holds", "holds", "fails"]
    groups["random"] = [0.1, 0.13, 0.11]
    assert simulation_evidence(groups, "groups").verdict == "holds"


def test_a_feature_that_never_fires_on_the_scored_tokens_is_not_scored():
    codes, _, tokens, context, train, groups = planted()
    codes[:, 0] = 0  # dead
    result = token_simulation_scores(codes, tokens, context, train, groups)
    assert result.scores[:, 0].isnan().all() and result.scores[:, 1:].isnan().double().mean() < 0.1
    assert (result.tokens[:, 0] == -1).all()


def test_signed_codes_are_oriented_by_their_training_skewness_and_clipped():
    spikes = torch.tensor([0.0] * 9 + [-10.0] + [0.0] * 9 + [10.0], dtype=torch.float64)[:, None]
    train = torch.arange(20) < 10  # on the training half the spike is negative: the feature is its negative side
    oriented = orient_signed_codes(spikes, train)
    assert oriented[9, 0] == pytest.approx(9.0) and oriented[19, 0] == 0 and (oriented >= 0).all()


def test_bad_input_is_refused_by_name():
    codes, _, tokens, context, train, groups = planted()
    with pytest.raises(ValueError, match="non-negative"):
        token_simulation_scores(codes - 1, tokens, context, train, groups)
    with pytest.raises(ValueError, match="held out"):
        token_simulation_scores(codes, tokens, context, train, [train[:5]])
    with pytest.raises(ValueError, match="n_top"):
        token_simulation_scores(codes, tokens, context, train[:5], groups)
    with pytest.raises(ValueError, match="n_positions"):
        token_simulation_scores(codes, tokens[:-1], context, train, groups)
