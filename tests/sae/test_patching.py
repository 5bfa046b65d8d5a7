import numpy as np
import pytest
import torch

from iclr24.interp import HookedTinyTransformer, ioi_dataset, prompt_lengths
from iclr24.sae import (
    SparseAutoencoder,
    baseline_decompositions,
    feature_patching_curve,
    feature_patching_curve_sets,
    feature_patching_curves,
    interpretability_scores,
)


def test_word_level_ioi_prompts_and_counterfactuals():
    data = ioi_dataset(templates=[0])
    words = data.vocab
    prompt = " ".join(words[t] for t in data.clean[0] if t)
    cf = " ".join(words[t] for t in data.counterfactual[0] if t)
    assert prompt == "When Mary and John went to the store , Mary gave a drink to"
    assert cf == "When Mary and John went to the store , John gave a drink to"
    assert words[data.answer[0]] == "John" and words[data.cf_answer[0]] == "Mary"
    assert len(data.answer) == 24 * 23 * 2


def test_patching_everything_with_a_complete_basis_reproduces_the_counterfactual():
    torch.manual_seed(0)
    data = ioi_dataset(templates=[0])
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=2, n_heads=2, d_mlp=32)
    with torch.no_grad():
        _, cache = model.run_with_cache(data.clean[:40], ["blocks.1.hook_resid_pre"])
    pca = baseline_decompositions(cache["blocks.1.hook_resid_pre"].flatten(0, 1))["PCA"]
    curve = feature_patching_curve(model, "blocks.1.hook_resid_pre", pca, data.clean[:8], data.counterfactual[:8],
                                   np.array([1e-3, 1e9]))
    assert curve["kl"][0] == pytest.approx(0.0, abs=1e-6)  # all features patched = the counterfactual run
    assert curve["n_features"][-1] == 0 and curve["kl"][-1] == pytest.approx(curve["kl_clean"], rel=1e-6)


@pytest.mark.parametrize("direction", ["patched||counterfactual", "counterfactual||patched"])
def test_kl_direction_is_the_one_asked_for(direction):
    torch.manual_seed(0)
    data = ioi_dataset(templates=[0])
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=2, n_heads=2, d_mlp=32)
    clean, cf = data.clean[:12:2], data.counterfactual[:12:2]  # (rows 2i+1 are rows 2i's counterfactuals)
    pca = baseline_decompositions(model.run_with_cache(data.clean[:40], ["blocks.1.hook_resid_pre"])[1][
        "blocks.1.hook_resid_pre"].flatten(0, 1))["PCA"]
    curve = feature_patching_curve(model, "blocks.1.hook_resid_pre", pca, clean, cf, np.array([1e9]),
                                   kl_direction=direction)
    end = prompt_lengths(clean) - 1
    with torch.no_grad():
        log_clean = torch.log_softmax(model(clean, end).double(), -1)
        log_cf = torch.log_softmax(model(cf, end).double(), -1)
    p, q = (log_clean, log_cf) if direction == "patched||counterfactual" else (log_cf, log_clean)
    expected = float((p.exp() * (p - q)).sum(-1).mean())
    assert curve["kl_clean"] == pytest.approx(expected, rel=1e-5)
    reverse = (q.exp() * (q - p)).sum(-1).mean()
    assert abs(float(reverse) - expected) > 1e-3 * expected  # the two directions differ on this model
    with pytest.raises(ValueError, match="kl_direction must be one of"):
        feature_patching_curve(model, "blocks.1.hook_resid_pre", pca, clean, cf, np.array([1.0]), kl_direction="kl")


def test_patching_through_the_fast_rerun_equals_hooks_on_the_whole_model():
    """A resid_pre hook re-runs from its block (resume_from); any other hook runs the whole model."""
    torch.manual_seed(0)
    data = ioi_dataset(templates=[0])
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=3, n_heads=2, d_mlp=32)
    acts = model.run_with_cache(data.clean[:40], ["blocks.1.hook_resid_pre"])[1]["blocks.1.hook_resid_pre"]
    pca = baseline_decompositions(acts.flatten(0, 1))["PCA"]
    args = (pca, data.clean[:6], data.counterfactual[:6], np.array([1e-3, 1e-1]))
    fast = feature_patching_curve(model, "blocks.1.hook_resid_pre", *args)
    slow = feature_patching_curve(model, "blocks.0.hook_resid_post", *args)  # the same activation
    assert fast["n_features"] == slow["n_features"]
    np.testing.assert_allclose(fast["kl"], slow["kl"], rtol=1e-4, atol=1e-7)


def test_interpretability_score_of_a_perfect_and_a_useless_feature():
    variable = torch.tensor([True, False, True, False, True, False])
    codes = torch.stack([variable.double() * 3.0, torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])], 1)
    scores = interpretability_scores(codes, {"v": variable})
    assert scores[0].item() == 1.0 and scores[1].item() < 0.75


def test_interpretability_score_equals_sklearn_auroc():
    from sklearn.metrics import roc_auc_score

    g = torch.Generator().manual_seed(0)
    codes = torch.relu(torch.randn(300, 5, generator=g))
    variable = torch.rand(300, generator=g) < 0.3
    expected = [max(a, 1 - a) for a in (roc_auc_score(variable.numpy(), codes[:, j].numpy()) for j in range(5))]
    torch.testing.assert_close(interpretability_scores(codes, {"v": variable}), torch.tensor(expected,
                                                                                           dtype=torch.float64))


def test_autointerp_scores_a_perfect_simulation_as_one():
    from iclr24.llm.scripted import ScriptedModel
    from iclr24.sae.autointerp import explain_and_score

    tokens = [["a", "b", "c", "d"] for _ in range(8)]
    codes = torch.zeros(8, 4, 1)
    codes[:, 1, 0] = torch.arange(1.0, 9.0)  # fires on "b", more in later contexts

    def reply(prompt, i):
        text = prompt[0]["content"]
        if "what does the feature detect" in text:
            return "the letter b"
        return "0, 10, 0, 0"  # the simulator predicts firing on the second token only

    model = ScriptedModel(reply)
    explanation, score = explain_and_score(model, codes, tokens, 0, n_explain=3, n_simulate=4)
    assert explanation == "the letter b" and score > 0.8
    assert "b(10)" in model.calls[0]["prompt"][0]["content"]  # the explainer saw scaled activations


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_pre", "blocks.0.hook_resid_post"])
def test_speculative_batches_take_the_decisions_of_the_one_at_a_time_pass(hook):
    """Candidates evaluated max_batch at a time give the sequential greedy pass's curve (fast and hooked paths)."""
    torch.manual_seed(0)
    data = ioi_dataset(templates=[0, 1])
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=3, n_heads=2, d_mlp=32)
    acts = model.run_with_cache(data.clean[:40], ["blocks.1.hook_resid_pre"])[1]["blocks.1.hook_resid_pre"]
    pca = baseline_decompositions(acts.flatten(0, 1))["PCA"]
    args = (pca, data.clean[::97][:6], data.counterfactual[::97][:6], np.logspace(-7, -3, 6))
    one = feature_patching_curve(model, hook, *args, max_batch=1)
    many = feature_patching_curve(model, hook, *args, max_batch=16)
    assert one["n_features"] == many["n_features"]
    assert 0 < one["n_features"][-3] < one["n_features"][0]  # some features un-patched, some kept: both branches
    np.testing.assert_allclose(one["kl"], many["kl"], rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        feature_patching_curve(model, hook, *args, max_batch=0)


def _tiny_setup(templates, n_layers=3):
    torch.manual_seed(0)
    data = ioi_dataset(templates=templates)
    model = HookedTinyTransformer(len(data.vocab), data.clean.shape[1], d_model=16, n_layers=n_layers, n_heads=2,
                                  d_mlp=32)
    acts = model.run_with_cache(data.clean[:40], ["blocks.1.hook_resid_pre"])[1]["blocks.1.hook_resid_pre"]
    return data, model, baseline_decompositions(acts.flatten(0, 1))


def test_runs_of_un_patched_features_are_batched_and_take_the_one_at_a_time_decisions():
    """High thresholds un-patch most candidates in a row: the guess "all un-patched" batches them (fewer forwards),
    and the curve is still the one-at-a-time pass's."""
    data, model, bases = _tiny_setup([0, 1])
    args = (bases["PCA"], data.clean[::97][:6], data.counterfactual[::97][:6], np.array([1e-4, 1e-2, 0.1, 1.0]))
    forwards = []
    resume_ragged = model.resume_ragged

    def counting_resume_ragged(*a, **k):
        run = resume_ragged(*a, **k)
        return lambda *x, **y: (forwards.append(1), run(*x, **y))[1]

    model.resume_ragged = counting_resume_ragged
    one = feature_patching_curve(model, "blocks.1.hook_resid_pre", *args, max_batch=1)
    n_one = len(forwards)
    forwards.clear()
    many = feature_patching_curve(model, "blocks.1.hook_resid_pre", *args, max_batch=16)
    assert one["n_features"] == many["n_features"]
    assert one["n_features"][1] < one["n_features"][0] - 8  # a long run of un-patched features: the batched branch
    np.testing.assert_allclose(one["kl"], many["kl"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(one["edit"], many["edit"], rtol=1e-9)
    assert len(forwards) < n_one / 2


def test_curves_for_several_decompositions_equal_each_alone():
    data, model, bases = _tiny_setup([0, 1])
    args = (data.clean[::97][:6], data.counterfactual[::97][:6], np.logspace(-5, -1, 4))
    both = feature_patching_curves(model, "blocks.1.hook_resid_pre", {"PCA": bases["PCA"], "ICA": bases["ICA"]},
                                   *args, seed=3)
    for name in ("PCA", "ICA"):
        alone = feature_patching_curve(model, "blocks.1.hook_resid_pre", bases[name], *args, seed=3)
        assert both[name]["n_features"] == alone["n_features"]
        np.testing.assert_allclose(both[name]["kl"], alone["kl"], rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="at least one decomposition"):
        feature_patching_curves(model, "blocks.1.hook_resid_pre", {}, *args)


def test_padding_after_a_prompts_end_is_not_patched():
    """Prompts of templates of different lengths are right-padded; the activations after a prompt's end differ
    between its runs but cannot move its output: the patch (and the edit size) covers the real positions only."""
    data, model, bases = _tiny_setup([2, 3])
    lengths = prompt_lengths(data.clean)
    rows = torch.stack([torch.nonzero(lengths == lengths.min())[0, 0], torch.nonzero(lengths == lengths.max())[0, 0]])
    clean, cf = data.clean[rows], data.counterfactual[rows]
    hook = "blocks.1.hook_resid_pre"
    with torch.no_grad():
        a_c = model.run_with_cache(clean, [hook])[1][hook].double()
        a_cf = model.run_with_cache(cf, [hook])[1][hook].double()
    real = torch.arange(clean.shape[1]) < prompt_lengths(clean)[:, None]
    assert not real[0].all() and not torch.allclose(a_c[0, ~real[0]], a_cf[0, ~real[0]])  # padding differs
    curve = feature_patching_curve(model, hook, bases["neurons"], clean, cf, np.array([1e9]))
    expected = float(((a_cf - a_c) * real[..., None]).norm() / a_c.norm())
    assert curve["edit"][0] == pytest.approx(expected, rel=1e-6)
    assert curve["kl"][0] == pytest.approx(0.0, abs=1e-6)  # every real position patched: the counterfactual


def test_prompt_sets_in_lockstep_on_a_hooked_lm_equal_each_set_alone():
    """On a HookedLM every pass's trials run in one ragged forward (each prompt from its own first differing token);
    the curves are those of each set and decomposition alone through resume_from (one prefix per batch)."""
    pytest.importorskip("transformers")
    from tests.interp.tiny_models import llama

    torch.manual_seed(0)
    lm, hook = llama(), "blocks.1.hook_resid_pre"
    sets = []
    for seed, differ in ((0, [3, 5, 4]), (1, [2, 6])):
        clean = torch.randint(50, (len(differ), 9))
        cf = clean.clone()
        for row, at in enumerate(differ):
            cf[row, at] = (cf[row, at] + 1) % 50
        sets.append((clean, cf, torch.tensor([8, 7, 8][:len(differ)]), seed))
    with torch.no_grad():
        acts = torch.cat([lm.run_with_cache(c, [hook])[1][hook].flatten(0, 1) for c, *_ in sets])
    bases = baseline_decompositions(acts)
    decompositions = {"PCA": bases["PCA"], "neurons": bases["neurons"]}
    kl_clean = feature_patching_curves(lm, hook, decompositions, *sets[0][:2], np.array([]), end=sets[0][2])
    thresholds = kl_clean["PCA"]["kl_clean"] * np.logspace(-3, 0, 4)
    together = feature_patching_curve_sets(lm, hook, decompositions, sets, thresholds, max_batch=4)
    # forwards split at max_rows re-run prompts (every pass's batch in a forward of its own, or several together)
    for max_rows in (5, 12):
        chunked = feature_patching_curve_sets(lm, hook, decompositions, sets, thresholds, max_batch=4,
                                              max_rows=max_rows)
        for curves, split in zip(together, chunked):
            for name in decompositions:
                assert split[name]["n_features"] == curves[name]["n_features"]
                np.testing.assert_allclose(split[name]["kl"], curves[name]["kl"], rtol=1e-5, atol=1e-9)

    class OnePrefix:  # the same model without resume_ragged: each set alone, one prefix per batch
        def __getattr__(self, name):
            if name == "resume_ragged":
                raise AttributeError(name)
            return getattr(lm, name)

    for (clean, cf, end, seed), curves in zip(sets, together):
        alone = feature_patching_curves(OnePrefix(), hook, decompositions, clean, cf, thresholds, end=end, seed=seed,
                                        max_batch=4)
        for name in decompositions:
            assert curves[name]["n_features"] == alone[name]["n_features"]
            np.testing.assert_allclose(curves[name]["kl"], alone[name]["kl"], rtol=1e-5, atol=1e-9)
            np.testing.assert_allclose(curves[name]["edit"], alone[name]["edit"], rtol=1e-9)
    assert any(0 < c[n]["n_features"][-2] < c[n]["n_features"][0] for c in together for n in c)  # decisions both ways


def _sparse_sae(acts: torch.Tensor, active: float = 0.08) -> SparseAutoencoder:
    """A random SAE whose features each fire on about ``active`` of the activations (a bias at a high quantile)."""
    torch.manual_seed(1)
    sae = SparseAutoencoder(acts.shape[-1], 4 * acts.shape[-1], tied=False)
    with torch.no_grad():
        sae.b_enc.copy_(-((acts - sae.b_dec) @ sae.W_enc).quantile(1 - active, dim=0))
    return sae


def _counting(model, method: str, rows_of) -> list[int]:
    """Count the rows each call of ``model.method`` (or of the function it returns) runs."""
    counts, original = [], getattr(model, method)
    if method == "resume_ragged":
        def wrapped(*a, **k):
            run = original(*a, **k)
            return lambda resid, positions, rows: (counts.append(len(rows)), run(resid, positions, rows))[1]
    else:
        def wrapped(*a, **k):
            counts.append(rows_of(*a))
            return original(*a, **k)
    setattr(model, method, wrapped)
    return counts


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_pre", "blocks.0.hook_resid_post"])
def test_prompts_a_trial_does_not_change_are_not_re_run_and_the_curve_is_the_same(hook):
    """A prompt whose codes of a trial's un-patched features are the same in both runs keeps the current patched
    set's activation, so its KL is taken from that set's run: same curve as re-running every prompt, fewer rows
    (ragged re-runs and whole-model hooks)."""
    data, model, _ = _tiny_setup([0, 1, 2, 3])
    acts = model.run_with_cache(data.clean[:200:3], ["blocks.1.hook_resid_pre"])[1]["blocks.1.hook_resid_pre"]
    sae = _sparse_sae(acts.flatten(0, 1))
    lengths = prompt_lengths(data.clean)  # prompts of every length: their ends and first differing tokens differ
    rows = torch.cat([torch.nonzero(lengths == n).flatten()[::37][:3] for n in lengths.unique()])[:9]
    clean, cf = data.clean[rows], data.counterfactual[rows]
    assert len(prompt_lengths(clean).unique()) > 1 and len((clean != cf).int().argmax(1).unique()) > 1
    kl_clean = feature_patching_curve(model, hook, sae, clean, cf, np.array([]))["kl_clean"]
    args = (sae, clean, cf, kl_clean * np.logspace(-4, -0.5, 5))
    method = "resume_ragged" if hook.endswith("resid_pre") else "run_with_hooks"
    counts = _counting(model, method, lambda tokens, *_: len(tokens))
    every = feature_patching_curve(model, hook, *args, max_batch=8, reuse_unchanged=False)
    rows_every = sum(counts)
    counts.clear()
    changed = feature_patching_curve(model, hook, *args, max_batch=8)
    assert changed["n_features"] == every["n_features"]
    assert 0 < every["n_features"][3] < every["n_features"][1] < every["n_features"][0]  # decisions both ways
    np.testing.assert_allclose(changed["kl"], every["kl"], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(changed["edit"], every["edit"], rtol=1e-12)
    assert changed["kl_clean"] == pytest.approx(every["kl_clean"], rel=1e-6)
    assert sum(counts) < 0.8 * rows_every  # sparse features change a few of the 9 prompts each


def test_prompts_a_trial_does_not_change_are_not_re_run_on_a_hooked_lm():
    """The same on a HookedLM, two prompt sets and an SAE and PCA in lockstep, in forwards of at most max_rows
    re-run prompts; through resume_from (no ragged re-runs) every prompt is re-run, with the same curves."""
    pytest.importorskip("transformers")
    from tests.interp.tiny_models import llama

    torch.manual_seed(0)
    lm, hook = llama(), "blocks.1.hook_resid_pre"
    sets = []
    for seed in (0, 1):
        clean = torch.randint(50, (6, 10))
        cf = clean.clone()
        cf[torch.arange(6), torch.randint(3, 8, (6,))] += 1
        end = torch.tensor([9, 8, 9, 7, 9, 8]).clamp(min=cf.ne(clean).int().argmax(1))  # ends of their own
        sets.append((clean % 50, cf % 50, end, seed))
    with torch.no_grad():
        acts = torch.cat([lm.run_with_cache(torch.randint(50, (40, 10)), [hook])[1][hook].flatten(0, 1)])
    decompositions = {"SAE": _sparse_sae(acts), "PCA": baseline_decompositions(acts)["PCA"]}
    kl_clean = feature_patching_curves(lm, hook, decompositions, *sets[0][:2], np.array([]), end=sets[0][2])
    thresholds = kl_clean["SAE"]["kl_clean"] * np.logspace(-4, -0.5, 5)
    counts = _counting(lm, "resume_ragged", None)
    every = feature_patching_curve_sets(lm, hook, decompositions, sets, thresholds, max_batch=4,
                                        reuse_unchanged=False)
    rows_every = sum(counts)
    counts.clear()
    changed = feature_patching_curve_sets(lm, hook, decompositions, sets, thresholds, max_batch=4, max_rows=10)
    assert sum(counts) < rows_every

    class OnePrefix:  # the same model without resume_ragged: resume_from re-runs every prompt
        def __getattr__(self, name):
            if name == "resume_ragged":
                raise AttributeError(name)
            return getattr(lm, name)

    for (clean, cf, end, seed), curves_every, curves in zip(sets, every, changed):
        alone = feature_patching_curves(OnePrefix(), hook, decompositions, clean, cf, thresholds, end=end, seed=seed,
                                        max_batch=4)
        for other in (curves, alone):
            for name in decompositions:
                assert other[name]["n_features"] == curves_every[name]["n_features"]
                np.testing.assert_allclose(other[name]["kl"], curves_every[name]["kl"], rtol=1e-5, atol=1e-12)
    assert all(0 < c["SAE"]["n_features"][1] < c["SAE"]["n_features"][0] for c in every)  # decisions both ways
