"""An outside check: score a memory-one IPD policy against the ``axelrod`` library's strategies.

``axelrod`` is an optional extra (``pip install 'iclr24[games]'``). Its payoffs are R=3, S=0, T=5, P=1;
ours are R=-1, S=-3, T=0, P=-2. Both are prisoner's dilemmas (T > R > P > S, 2R > T + S) but not an
affine map of each other, so scores are reported in axelrod's units. axelrod's memory-one player opens
with a fixed move: ours is C when P(C|start) >= 0.5.
"""

from __future__ import annotations

from torch import nn

__all__ = ["axelrod_tournament"]


def _axelrod():
    try:
        import axelrod
    except ImportError as err:
        raise ImportError("the axelrod tournament needs the axelrod package: pip install 'iclr24[games]'") from err
    return axelrod


def axelrod_tournament(policy: nn.Module, *, strategies: list | None = None, turns: int = 50, repetitions: int = 5,
                       seed: int = 0) -> list[dict]:
    """Mean score per turn of ``policy`` (as an axelrod ``MemoryOnePlayer``) and of each opponent.

    ``strategies``: axelrod player classes; default ``axelrod.basic_strategies`` plus a few famous ones.
    Returns one row per opponent: ``{"opponent", "score", "opponent_score", "cooperation"}``.
    """
    from iclr24.core.checks import check_int
    from iclr24.loqa.training import memory_one_policy

    check_int("turns", turns, minimum=1)
    check_int("repetitions", repetitions, minimum=1)
    axl = _axelrod()
    p = memory_one_policy(policy)
    initial = axl.Action.C if p["start"] >= 0.5 else axl.Action.D
    if strategies is None:
        strategies = [*axl.basic_strategies, axl.GTFT, axl.TitFor2Tats, axl.Grudger, axl.ZDExtort2, axl.Prober]
    rows = []
    for i, strategy in enumerate(strategies):
        scores, theirs, cooperation = [], [], []
        for r in range(repetitions):
            ours = axl.MemoryOnePlayer(four_vector=(p["CC"], p["CD"], p["DC"], p["DD"]), initial=initial)
            match = axl.Match((ours, strategy()), turns=turns, seed=seed + 1000 * i + r)
            match.play()
            score = match.final_score_per_turn()
            scores.append(score[0])
            theirs.append(score[1])
            cooperation.append(match.normalised_cooperation()[0])
        rows.append({"opponent": strategy.name, "score": float(sum(scores) / repetitions),
                     "opponent_score": float(sum(theirs) / repetitions),
                     "cooperation": float(sum(cooperation) / repetitions)})
    return rows
