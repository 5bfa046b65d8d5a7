"""Seconds per BO iteration and regret: V-UCB / Meta-VBO vs BoTorch's MC risk-measure acquisition.

The peer a BoTorch user reaches for is qLogNoisyExpectedImprovement with a ``VaR`` objective (its alpha converted:
``botorch_var``)
(``botorch.acquisition.risk_measures``) on a model whose ``AppendFeatures`` input transform evaluates every x at
all environmental values (Cakmak et al. 2020, BoTorch's risk-averse BO tutorial). It chooses x only; z is then
drawn from P(Z), since qNEI has no rule for it. Ours choose x by the risk's upper bound (and, for Meta-VBO, the
prior tasks) and z by the lacing-value rule. Same problem (``bump_problem``, VaR at alpha = 0.1 over 20 z
values), same candidate grid, same initial observations and noise; every method refits its GP each iteration
with ``fit_gpytorch_mll``. Seconds per iteration are split into the fit and the acquisition step (choosing the
query); regret is the normalised simple regret of VaR after the last iteration, mean over seeds.

    python benchmarks/meta_vbo.py
    python benchmarks/meta_vbo.py --problems 1d --iterations 20 --seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from botorch.acquisition import qLogNoisyExpectedImprovement
from botorch.acquisition.risk_measures import VaR
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.models.transforms.input import AppendFeatures, ChainedInputTransform
from botorch.optim import optimize_acqf_discrete
from gpytorch.mlls import ExactMarginalLogLikelihood
from linear_operator.utils.warnings import NumericalWarning

from iclr24.meta_vbo import VUCB, MetaVBO, PriorTask, bump_problem, fit_risk_model, value_at_risk
from iclr24.meta_vbo.experiment import PROBLEMS


def botorch_var(alpha: float, n_w: int) -> VaR:
    """BoTorch's ``VaR`` measuring the same quantile as ``value_at_risk(., alpha)``.

    BoTorch's alpha is a confidence level: ``VaR(alpha=a)`` keeps the value above the worst ``1 - a`` of the
    ``n_w`` outcomes, so ``VaR(0.9)`` of 20 equally likely values is the 3rd smallest. Our ``VaR_0.1`` (the
    V-UCB paper's ``inf{w : P(f <= w) >= 0.1}``) is the 2nd smallest, BoTorch's ``VaR(0.95)``.
    """
    objective = VaR(alpha=1.0 - alpha + 1.0 / n_w, n_w=n_w)
    probe = torch.randn(n_w, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    if objective(probe.view(1, n_w, 1)).item() != value_at_risk(probe, alpha).item():
        raise RuntimeError(f"BoTorch's VaR does not match value_at_risk at alpha={alpha}, n_w={n_w}")
    return objective


def _fit_peer(x, z, y, z_values, d):
    bounds = torch.tensor([[0.0] * (d + 1), [1.0] * (d + 1)], dtype=torch.float64)
    transform = ChainedInputTransform(append=AppendFeatures(feature_set=z_values.view(-1, 1)),
                                      normalize=Normalize(d + 1, bounds=bounds))
    model = SingleTaskGP(torch.cat([x, z.view(-1, 1)], 1), y.view(-1, 1), input_transform=transform,
                         outcome_transform=Standardize(1))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def run(method: str, problem, iterations: int, seed: int, alpha: float) -> tuple[float, float, float]:
    """(fit seconds / iteration, acquisition seconds / iteration, final normalised regret)."""
    d = problem.candidates.shape[1]
    z_values, candidates = problem.z_values, problem.candidates
    box = torch.tensor([[0.0] * d, [1.0] * d], dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    x = candidates[torch.randint(len(candidates), (2,), generator=g)]
    z = z_values[torch.randint(len(z_values), (2,), generator=g)]
    y = problem.observe(x, z, g)
    priors = [PriorTask(*t) for t in problem.helpful]
    prior_models = [task.fit(box, (0.0, 1.0)) for task in priors] if method == "meta_vbo" else []
    fit_s, acq_s = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        if method == "qnei_var":
            model = _fit_peer(x, z, y, z_values, d)
        else:
            model = fit_risk_model(x, z, y, box, (0.0, 1.0))
        fit_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        if method == "qnei_var":
            acq = qLogNoisyExpectedImprovement(model, X_baseline=x, objective=botorch_var(alpha, len(z_values)),
                                               prune_baseline=True)
            x_new, _ = optimize_acqf_discrete(acq, q=1, choices=candidates)
            x_new = x_new[0]
            z_new = z_values[torch.randint(len(z_values), (1,), generator=g)][0]
        else:
            acquisition = (VUCB(model, z_values, alpha=alpha) if method == "vucb"
                           else MetaVBO(model, prior_models, z_values, alpha=alpha))
            query = acquisition.next_query(candidates=candidates)
            x_new, z_new = query.x, torch.tensor(query.z, dtype=torch.float64)
        acq_s.append(time.perf_counter() - start)
        x = torch.cat([x, x_new.view(1, d)])
        z = torch.cat([z, z_new.view(1)])
        y = torch.cat([y, problem.observe(x_new.view(1, d), z_new.view(1), g)])
    regret = (problem.optimum - float(problem.risk_of(x).max())) / problem.risk_range
    return statistics.median(fit_s), statistics.median(acq_s), regret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["1d", "2d"], choices=sorted(PROBLEMS))
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=NumericalWarning)  # jitter notes from near-duplicate inputs
    methods = ("vucb", "meta_vbo", "qnei_var")
    print(f"{'problem':>7} {'method':>9} {'fit s/it':>9} {'acq s/it':>9} {'acq vs qNEI':>12} "
          f"{'regret T=' + str(args.iterations):>11}")
    for name in args.problems:
        rows = {}
        for method in methods:
            out = [run(method, bump_problem(seed, alpha=args.alpha, **PROBLEMS[name]), args.iterations, seed,
                       args.alpha) for seed in range(args.seeds)]
            rows[method] = [statistics.fmean(v) for v in zip(*out)]
        for method in methods:
            fit, acq, regret = rows[method]
            ratio = rows["qnei_var"][1] / acq
            print(f"{name:>7} {method:>9} {fit:>9.4f} {acq:>9.4f} {ratio:>11.1f}x {regret:>11.4f}")


if __name__ == "__main__":
    main()
