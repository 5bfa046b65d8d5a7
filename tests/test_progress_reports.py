"""Issue #61: long library calls report progress when asked (``progress=True``, what the experiments pass under
``iclr24 run``) and draw nothing by default, whatever the terminal."""

import torch

from tests.progress_probe import bars


def test_loqa_train_ipd_reports_each_update_when_asked(monkeypatch):
    from iclr24.loqa import IPDConfig, train_ipd

    recorder = bars(monkeypatch)
    cfg = IPDConfig(iterations=12, batch_size=8, eval_every=6)
    train_ipd(cfg, seed=0)
    assert recorder.added == []  # the default: no bar, even on a terminal
    _, history = train_ipd(cfg, seed=0, progress=True)
    assert recorder.added == [("LOQA self-play (IPD)", 12)] and recorder.advanced["LOQA self-play (IPD)"] == 12
    assert history.iteration == [6, 12]


def test_loqa_batched_and_lola_report_when_asked(monkeypatch):
    from iclr24.loqa import CoinConfig, IPDConfig, LOLAConfig, train_coin_game, train_lola_dice
    from iclr24.loqa.batched import train_coin_game_batch, train_ipd_batch, train_lola_dice_batch

    recorder = bars(monkeypatch)
    ipd, lola = IPDConfig(iterations=4, batch_size=8, eval_every=2), LOLAConfig(iterations=3, batch_size=8)
    coin = CoinConfig(iterations=2, batch_size=8, horizon=4, hidden=8)
    train_ipd_batch(ipd, [0, 1])
    train_lola_dice_batch(lola, [0])
    train_coin_game_batch(coin, [0])
    train_lola_dice(lola)
    train_coin_game(coin)
    assert recorder.added == []
    train_ipd_batch(ipd, [0, 1], progress=True)
    train_lola_dice_batch(lola, [0], progress=True)
    train_coin_game_batch(coin, [0], progress=True)
    train_lola_dice(lola, progress=True)
    train_coin_game(coin, progress=True)
    assert [total for _, total in recorder.added] == [4, 3, 2, 3, 2]
    assert sum(recorder.advanced.values()) == 4 + 3 + 2 + 3 + 2


def test_aid_training_reports_each_step_when_asked(monkeypatch):
    from iclr24.aid import SARNetwork, sar_task, train_sar
    from iclr24.aid.lm import LinearTransformerLM, train_recall_lm
    from iclr24.aid.training import train_sar_together

    recorder = bars(monkeypatch)
    task = sar_task(n_words=3, n_pairs=2, seed=0)

    def model():
        torch.manual_seed(0)
        return SARNetwork(task.vocab_size, 4, hidden=4, component_dim=4)

    train_sar(model(), task, 3, batch_size=4, eval_every=2)
    train_sar_together([model()], [task], 3, batch_size=4, eval_every=2)
    lm = LinearTransformerLM(8, 8, d_model=8, n_layers=1, d_head=2)
    corpus = dict(n_keys=4, n_values=4, n_pairs=2, n_queries=2)
    train_recall_lm(lm, 2, batch_size=4, **corpus)
    assert recorder.added == []
    train_sar(model(), task, 3, batch_size=4, eval_every=2, description="one", progress=True)
    train_sar_together([model()], [task], 3, batch_size=4, eval_every=2, description="together", progress=True)
    train_recall_lm(lm, 2, batch_size=4, description="lm", progress=True, **corpus)
    assert recorder.added == [("one", 3), ("together", 3), ("lm", 2)]
    assert recorder.advanced == {"one": 3, "together": 3, "lm": 2}


def test_lfr_transformer_fit_reports_each_epoch_when_asked(monkeypatch):
    import numpy as np

    from iclr24.lfr import LFRTransformer

    recorder = bars(monkeypatch)
    X = np.random.default_rng(0).normal(size=(20, 5))
    small = dict(dim=4, hidden=8, depth=2, projector_dim=4, n_projectors=2, epochs=3, random_state=0)
    quiet = LFRTransformer(**small).fit(X)
    assert recorder.added == []
    loud = LFRTransformer(**small, progress=True).fit(X)
    assert recorder.added == [("LFR pretraining", 3)] and recorder.advanced["LFR pretraining"] == 3
    np.testing.assert_array_equal(quiet.transform(X), loud.transform(X))  # the bar changes nothing else


def test_coela_run_episode_reports_each_step_when_asked(monkeypatch):
    from iclr24.coela import CoELAAgent, HeuristicPlanner, TransportEnv, run_episode

    recorder = bars(monkeypatch)

    def play(**kwargs):
        env = TransportEnv(n_agents=2, n_rooms=3, n_objects=2, n_containers=0, max_steps=40)
        agents = [CoELAAgent(planner=HeuristicPlanner(), communicate=False, name=a, seed=0)
                  for a in env.possible_agents]
        return run_episode(env, agents, 0, **kwargs)

    quiet = play()
    assert recorder.added == []
    loud = play(progress=True)
    assert recorder.added == [("episode (seed 0)", 40)]
    assert recorder.advanced["episode (seed 0)"] == loud.steps == quiet.steps


def test_a_disabled_bar_prints_nothing_on_a_terminal(monkeypatch, capsys):
    from iclr24.core import progress

    monkeypatch.setattr(progress, "is_enabled", lambda: True)
    with progress.progress("work", total=2, enabled=False) as bar:
        bar.advance()
        bar.advance()
    assert list(progress.track(range(3), "loop", enabled=False)) == [0, 1, 2]
    assert bar.completed == 2 and progress._live is None
    assert capsys.readouterr() == ("", "")
