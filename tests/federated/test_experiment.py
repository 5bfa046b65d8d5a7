"""The federated experiment's claims, from hand-made per-seed values."""

import pytest

from iclr24.federated import experiment as fed
from iclr24.federated.data import HETEROGENEITY

CFG = fed.PRESETS["smoke"]
NORM, ALPHA = CFG.signal_norms[0], CFG.digits_alphas[0]


def claims(local=0.15, fedavg=0.01, weighted=0.01, opposite=(0.50, 0.02), orthogonal=(0.05, 0.02),
           digits=(0.08, 0.04, 0.03), snr=(0.04, 0.32)):
    def seeds(v):
        return [v - 0.002, v, v + 0.002]

    errors = {}
    for het in HETEROGENEITY:
        errors[NORM, het, "local"] = seeds(local)
        errors[NORM, het, "fedavg"] = seeds(fedavg)
        errors[NORM, het, "weighted"] = seeds(weighted)
    errors[NORM, "opposite", "fedavg"], errors[NORM, "opposite", "weighted"] = map(seeds, opposite)
    errors[NORM, "orthogonal", "fedavg"], errors[NORM, "orthogonal", "weighted"] = map(seeds, orthogonal)
    real = {(ALPHA, m): seeds(v) for m, v in zip(fed.METHODS, digits)}
    return fed._claims(CFG, errors, real, {"local": seeds(snr[0]), "fedavg": seeds(snr[1])})


def test_claims_follow_their_margins():
    assert [c.verdict for c in claims()] == ["holds"] * 4
    assert claims(fedavg=0.10)[0].verdict == "fails"  # 0.05 better, the claim needs 0.1
    assert claims(snr=(0.10, 0.15))[1].verdict == "fails"  # 1.5x, the claim needs 2x
    assert claims(orthogonal=(0.05, 0.05))[2].verdict == "inconclusive"  # a tie beats nothing
    assert claims(digits=(0.08, 0.04, 0.04))[3].verdict == "inconclusive"


def test_weighted_fedavg_uses_the_clients_whole_inputs_not_the_oracle_signal_patch(monkeypatch):
    """Review finding: ``feature_fn=x[:, 0]`` knew where the signal is and made the mixing matrix block-diagonal
    by construction; the experiment now computes the similarity from the whole input."""
    seen = []

    def spy(model, clients, **kwargs):
        seen.append(kwargs)
        raise StopIteration

    monkeypatch.setattr(fed, "federated_train", spy)
    with pytest.raises(StopIteration):
        fed._synthetic(CFG, NORM, "opposite", "weighted", seed=0)
    assert seen[0].get("feature_fn") is None
    assert not hasattr(fed, "_signal_patch")
