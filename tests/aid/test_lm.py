import pytest
import torch

from iclr24.aid import LinearTransformerLM, recall_corpus, recall_perplexity, train_recall_lm


def test_recall_corpus_layout():
    batch = recall_corpus(16, n_keys=6, n_values=5, n_pairs=3, n_queries=4, generator=torch.Generator().manual_seed(0))
    t = batch.tokens
    assert t.shape == (16, 14) and batch.recall_mask.shape == (16, 13)
    keys, values = t[:, 0:6:2], t[:, 1:6:2]
    assert (keys < 6).all() and (values >= 6).all() and (values < 11).all()
    for row in range(16):
        assert len(set(keys[row].tolist())) == 3  # distinct keys
        table = dict(zip(keys[row].tolist(), values[row].tolist()))
        for q in range(4):
            k, v = t[row, 6 + 2 * q].item(), t[row, 7 + 2 * q].item()
            assert table[k] == v  # a query repeats a listed pair
    assert batch.recall_mask[:, 6::2].all() and batch.recall_mask.sum() == 16 * 4  # targets = queried values


def test_perplexities_are_computed_on_the_right_targets():
    torch.manual_seed(0)
    model = LinearTransformerLM(8, 8, d_model=8, n_layers=1, n_heads=2, d_head=4, decomposition="mlp")
    with torch.no_grad():  # a model that is uniform over the vocabulary: perplexity = vocabulary size
        model.head.weight.zero_()
        model.head.bias.zero_()
    batch = recall_corpus(4, n_keys=4, n_values=4, n_pairs=2, n_queries=2)
    everything, recall = recall_perplexity(model, batch)
    assert everything == pytest.approx(8.0) and recall == pytest.approx(8.0)


@pytest.mark.parametrize("decomposition", ["aid", "mlp"])
def test_the_lm_learns_to_recall(decomposition):
    torch.manual_seed(0)
    corpus = dict(n_keys=4, n_values=4, n_pairs=2, n_queries=2)
    model = LinearTransformerLM(8, 8, d_model=32, n_layers=2, n_heads=2, d_head=16, decomposition=decomposition)
    held_out = recall_corpus(128, generator=torch.Generator().manual_seed(5), **corpus)
    before = recall_perplexity(model, held_out)[1]
    losses = train_recall_lm(model, 300, generator=torch.Generator().manual_seed(0), **corpus)
    assert len(losses) == 300 and losses[-1] < losses[0]
    assert recall_perplexity(model, held_out)[1] < min(before, 3.0)  # chance: 4 values


def test_lm_errors_name_the_argument():
    model = LinearTransformerLM(8, 4, d_model=8, n_heads=2, d_head=4)
    with pytest.raises(ValueError, match="more than max_len = 4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens must be ids in \\[0, 8\\)"):
        model(torch.full((1, 3), 8))
    with pytest.raises(TypeError, match="tokens must have dtype"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="n_pairs must be <= n_keys"):
        recall_corpus(2, n_keys=2, n_pairs=3)
