from iclr24.lfr.experiment import MODALITIES, PRESETS, _claims


def accuracies(lfr, random=0.80, autoencoder=0.80, scarf=0.80, first_k=0.80, simclr=0.80):
    row = {"random": random, "autoencoder": autoencoder, "lfr": lfr, "lfr_first_k": first_k}
    return {m: {**row, ("scarf" if m == "tables" else "simclr"): scarf if m == "tables" else simclr}
            for m in MODALITIES}


def test_claims_hold_only_past_their_margins():
    cfg = PRESETS["quick"]
    assert [c.holds for c in _claims(accuracies(0.83), cfg)] == [True, True, True, True]
    # +1.9 points over random and the autoencoder: the 2-point bar fails, the 0.5-point bar holds
    assert [c.holds for c in _claims(accuracies(0.819), cfg)][:2] == [False, True]
    # SCARF 1.5 points above LFR is no longer a match; DPP no better than first-drawn projectors
    claims = _claims(accuracies(0.83, scarf=0.845, first_k=0.83), cfg)
    assert [c.holds for c in claims][2:] == [False, False]


def test_one_failing_modality_fails_the_claim():
    acc = accuracies(0.83)
    acc["series"]["lfr"] = 0.802
    holds = [c.holds for c in _claims(acc, PRESETS["quick"])]
    assert holds[:2] == [False, False]
