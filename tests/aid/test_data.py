import pytest
import torch

from iclr24.aid import SARBatch, SARNetwork, load_babi, sar_task


def _pairs(task, batch):
    P = task.n_pairs
    return batch.roles[:, 1: P + 1], batch.fillers[:, 1: P + 1]


def _group(task, ids):
    return (ids - 1) // task.n_words  # 0: X1 / Y... by position in the vocabulary: X1, X2, Y1, Y2


def test_sequence_layout_follows_the_papers_code():
    task = sar_task(n_words=6, n_pairs=4, ratio=0.5, seed=0)
    b = task.sample(32)
    assert b.roles.shape == b.fillers.shape == b.targets.shape == (32, 10) and b.flags.shape == (32, 10, 2)
    assert b.flags[:, 0, 0].eq(1).all() and b.flags[:, 5, 1].eq(1).all() and b.flags.sum() == 2 * 32
    assert b.query_mask[:, 6:].all() and not b.query_mask[:, :6].any()
    assert b.fillers[:, 5:].eq(0).all() and b.roles[:, 0].eq(0).all() and b.roles[:, 5].eq(0).all()
    x, y = _pairs(task, b)
    for row in range(32):
        answer = dict(zip(x[row].tolist(), y[row].tolist()))
        assert len(answer) == 4  # distinct x's
        queried = b.roles[row, 6:].tolist()
        assert sorted(queried) == sorted(answer)  # every x is asked once
        assert b.targets[row, 6:].tolist() == [answer[q] for q in queried]


@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.0])
def test_training_never_shows_x2_with_y2_and_shows_every_allowed_combination(ratio):
    task = sar_task(n_words=4, n_pairs=4, ratio=ratio, seed=0)
    x, y = _pairs(task, task.sample(4000))
    gx, gy = _group(task, x), _group(task, y)
    seen = {(int(a), int(b)) for a, b in zip(x.flatten(), y.flatten())}
    assert not ((gx == 1) & (gy == 3)).any()  # X2 x Y2: the test combinations
    assert not ((gx == 1) & (gy == 2)).logical_not().logical_and(gx == 1).any()  # X2 only with Y1
    n_both = int(4 * ratio)
    x1_with_y1 = {int(a) for a, b in seen if (a - 1) // 4 == 0 and (b - 1) // 4 == 2}
    assert x1_with_y1 == set(task.x1[:n_both].tolist())
    expected = int(task.train_combinations.sum())
    assert len(seen) == expected == n_both * 8 + (4 - n_both) * 4 + 4 * 4


def test_the_unseen_split_is_x2_with_y2_only():
    task = sar_task(n_words=5, n_pairs=5, ratio=0.5, seed=0)
    x, y = _pairs(task, task.sample(200, split="unseen"))
    assert _group(task, x).eq(1).all() and _group(task, y).eq(3).all()
    assert len({(int(a), int(b)) for a, b in zip(x.flatten(), y.flatten())}) == 25


def test_sampling_is_reproducible_from_the_seed_or_a_generator():
    a, b = sar_task(seed=3).sample(8), sar_task(seed=3).sample(8)
    assert torch.equal(a.roles, b.roles) and torch.equal(a.targets, b.targets)
    task = sar_task(seed=3)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    assert torch.equal(task.sample(8, g1).fillers, task.sample(8, g2).fillers)
    assert not torch.equal(sar_task(seed=4).sample(8).fillers, a.fillers)


def test_words_are_readable():
    task = sar_task(n_words=3, n_pairs=2)
    assert task.words(torch.tensor([0, 1, 4, 7, 12])) == ["-", "x1_0", "x2_0", "y1_0", "y2_2"]
    with pytest.raises(ValueError, match="ids must be in \\[0, 13\\)"):
        task.words(torch.tensor([-1]))


def test_ratio_takes_the_floor_without_float_error():
    assert sar_task(n_words=100, n_pairs=2, ratio=0.29).n_x1_both == 29
    assert sar_task(n_words=5, n_pairs=2, ratio=0.5).n_x1_both == 2


def test_sar_errors_name_the_argument():
    with pytest.raises(ValueError, match="n_pairs must be <= n_words \\(4\\)"):
        sar_task(n_words=4, n_pairs=5)
    with pytest.raises(ValueError, match="ratio must be <= 1"):
        sar_task(ratio=1.5)
    with pytest.raises(ValueError, match="split must be one of"):
        sar_task().sample(2, split="test")
    with pytest.raises(TypeError, match="batch must be a SARBatch"):
        SARNetwork(10, hidden=4, component_dim=4)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="beyond this network's vocab_size = 10"):
        SARNetwork(10, hidden=4, component_dim=4)(sar_task(n_words=5, n_pairs=2).sample(2))
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        sar_task().sample(2, generator=0)


def test_sar_network_gives_logits_over_the_vocabulary():
    torch.manual_seed(0)
    task = sar_task(n_words=3, n_pairs=2)
    net = SARNetwork(task.vocab_size, embedding_dim=5, hidden=8, component_dim=4)
    batch = task.sample(3)
    assert isinstance(batch, SARBatch) and net(batch).shape == (3, 6, task.vocab_size)


STORY = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary?\tbathroom\t1
4 Daniel went back to the hallway.
5 Where is Daniel?\thallway\t4
1 Sandra journeyed to the kitchen.
2 What is Sandra carrying?\tapple,football\t1
"""


def _babi(tmp_path, task=1):
    folder = tmp_path / "tasks_1-20_v1-2" / "en-valid-10k"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        (folder / f"qa{task}_{split}.txt").write_text(STORY)  # en-valid-10k's file names
    return tmp_path


def test_babi_also_reads_the_en_10k_file_names(tmp_path):
    folder = tmp_path / "en-10k"
    folder.mkdir()
    (folder / "qa1_single-supporting-fact_train.txt").write_text(STORY)
    assert len(load_babi(folder, 1)) == 3


def test_babi_questions_carry_their_story_so_far(tmp_path):
    samples = load_babi(_babi(tmp_path), 1, "train")
    assert len(samples) == 3
    assert samples[0].story == (("mary", "moved", "to", "the", "bathroom", "."),
                                ("john", "went", "to", "the", "hallway", "."))
    assert samples[0].question == ("where", "is", "mary", "?") and samples[0].answer == "bathroom"
    assert len(samples[1].story) == 3 and samples[1].answer == "hallway"
    assert samples[2].story == (("sandra", "journeyed", "to", "the", "kitchen", "."),)  # a new story
    assert samples[2].answer == "apple,football"


def test_sys_babi_renames_the_test_split_only(tmp_path):
    root = _babi(tmp_path)
    test = load_babi(root, 1, "test")
    assert test[1].question == ("where", "is", "bill", "?") and test[1].story[1][0] == "fred"
    assert test[2].story[0][0] == "julie"
    assert load_babi(root, 1, "test", systematic=False)[1].question[2] == "daniel"
    assert load_babi(root, 1, "train")[1].question[2] == "daniel"


def test_sys_babi_reverse_swap_for_tasks_5_10_14(tmp_path):
    folder = tmp_path / "en-valid-10k"
    folder.mkdir()
    (folder / "qa5_three-arg-relations_test.txt").write_text("1 Bill went home.\n2 Where is Bill?\thome\t1\n")
    assert load_babi(folder, 5, "test")[0].question == ("where", "is", "daniel", "?")


def test_malformed_babi_lines_are_named(tmp_path):
    (tmp_path / "qa2_train.txt").write_text("1 Mary went home.\n2 Where is Mary?\n")
    with pytest.raises(ValueError, match="qa2_train.txt:2: a question needs a tab"):
        load_babi(tmp_path, 2)
    (tmp_path / "qa3_train.txt").write_text("1 Mary went home.\n2 Where is Mary?\t \t1\n")
    with pytest.raises(ValueError, match="empty answer"):
        load_babi(tmp_path, 3)
    with pytest.raises(TypeError, match="root must be a path"):
        load_babi(None, 1)


def test_missing_babi_says_what_to_fetch(tmp_path):
    with pytest.raises(FileNotFoundError, match="tasks_1-20_v1-2.tar.gz"):
        load_babi(tmp_path, 1)
    with pytest.raises(ValueError, match="task must be in 1..20"):
        load_babi(tmp_path, 21)
    with pytest.raises(ValueError, match="split must be one of"):
        load_babi(tmp_path, 1, "dev")
