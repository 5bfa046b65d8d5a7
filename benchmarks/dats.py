"""Our meta-PINN training against DeepXDE's PINN on the same convection problem.

DeepXDE (the PINN library a user would pick) trains one network per PDE configuration; iclr24.dats trains
one network for all of them. Same problem (u_t + beta u_x = 0, u(0, x) = sin x, periodic), same network
(3 x 32 tanh), same points per configuration (100 residual, 128 initial, 128 boundary), same loss
(L_f + L_ic + L_bc), Adam at the same learning rate, ``--steps`` steps; DeepXDE with its PyTorch backend.

- one configuration (beta = 5): seconds per step, DeepXDE / ours (median of ``--repeats`` interleaved runs),
  and the relative L2 error each reaches;
- all five training configurations: DeepXDE's five networks vs our one meta-network (uniform sampler): the
  seconds to train them all, as a ratio, and the mean and worst relative L2 over beta in {1..9} (DeepXDE
  cannot answer the unseen beta = 2, 4, 6, 8 without training a network for each: those columns are blank).

    python benchmarks/dats.py [--steps 1000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from iclr24.dats import Convection, ParametricPINN, UniformTaskSampler, meta_train, relative_l2

TRAIN_BETAS = (1.0, 3.0, 5.0, 7.0, 9.0)
ALL_BETAS = tuple(float(b) for b in range(1, 10))


def ours(betas, steps: int, seed: int) -> tuple[float, np.ndarray]:
    pde = Convection()
    torch.manual_seed(seed)
    model = ParametricPINN([pde.t_range, pde.x_range], [(1.0, 9.0)], hidden=32, depth=3)
    start = time.perf_counter()
    meta_train(model, pde, betas, UniformTaskSampler(len(betas)), steps=steps, lr=3e-3, residual_points=100,
               initial_points=128, boundary_points=128, validation_points=100,
               generator=torch.Generator().manual_seed(seed))
    seconds = time.perf_counter() - start
    return seconds, relative_l2(model, pde, ALL_BETAS if len(betas) > 1 else betas)


def deepxde_one(beta: float, steps: int, seed: int) -> tuple[float, float]:
    import deepxde as dde

    dde.config.set_random_seed(seed)
    geometry = dde.geometry.GeometryXTime(dde.geometry.Interval(0, 2 * np.pi), dde.geometry.TimeDomain(0, 1))

    def residual(x, u):  # DeepXDE's inputs are (x, t)
        return dde.grad.jacobian(u, x, i=0, j=1) + beta * dde.grad.jacobian(u, x, i=0, j=0)

    periodic = dde.icbc.PeriodicBC(geometry, 0, lambda _, on_boundary: on_boundary)
    initial = dde.icbc.IC(geometry, lambda x: np.sin(x[:, 0:1]), lambda _, on_initial: on_initial)
    data = dde.data.TimePDE(geometry, residual, [periodic, initial], num_domain=100, num_boundary=128,
                            num_initial=128)
    model = dde.Model(data, dde.nn.FNN([2] + [32] * 3 + [1], "tanh", "Glorot normal"))
    model.compile("adam", lr=3e-3)
    start = time.perf_counter()
    model.train(iterations=steps, display_every=steps, verbose=0)
    seconds = time.perf_counter() - start
    pde = Convection()
    t, x = pde.grid()
    tt, xx = np.meshgrid(t, x, indexing="ij")
    pred = model.predict(np.stack([xx.ravel(), tt.ravel()], axis=1)).ravel()
    ref = pde.reference(beta, t, x).ravel()
    return seconds, float(np.linalg.norm(pred - ref) / np.linalg.norm(ref))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("DDE_BACKEND", "pytorch")
    try:
        import deepxde  # noqa: F401
    except ImportError:
        raise SystemExit("DeepXDE is not installed: pip install deepxde (its PyTorch backend is used)") from None

    ours((5.0,), 20, 0)  # warm-up: one-time imports and allocations stay out of the timings
    deepxde_one(5.0, 20, 0)
    one_ours, one_dde, err_ours, err_dde = [], [], [], []
    for r in range(args.repeats):  # interleaved, so machine load hits both alike
        s, e = ours((5.0,), args.steps, r)
        one_ours.append(s / args.steps)
        err_ours.append(float(e[0]))
        s, e = deepxde_one(5.0, args.steps, r)
        one_dde.append(s / args.steps)
        err_dde.append(e)
    print(f"one configuration (beta 5), {args.steps} Adam steps, median of {args.repeats}:")
    print(f"  ms/step  DeepXDE {1e3 * statistics.median(one_dde):.2f}  ours {1e3 * statistics.median(one_ours):.2f}"
          f"  ratio DeepXDE/ours {statistics.median(one_dde) / statistics.median(one_ours):.2f}")
    print(f"  relative L2  DeepXDE {statistics.median(err_dde):.3f}  ours {statistics.median(err_ours):.3f}")

    seconds_ours, errors_ours = ours(TRAIN_BETAS, args.steps, 0)
    seconds_dde, errors_dde = 0.0, []
    for beta in TRAIN_BETAS:
        s, e = deepxde_one(beta, args.steps, 0)
        seconds_dde += s
        errors_dde.append(e)
    print(f"\nfive configurations, {args.steps} steps each (DeepXDE: five networks; ours: one meta-network):")
    print(f"  seconds  DeepXDE {seconds_dde:.1f}  ours {seconds_ours:.1f}  ratio {seconds_dde / seconds_ours:.2f}")
    print("  beta   " + "  ".join(f"{b:>5g}" for b in ALL_BETAS))
    dde_row = [f"{errors_dde[TRAIN_BETAS.index(b)]:5.3f}" if b in TRAIN_BETAS else "    -" for b in ALL_BETAS]
    print("  DeepXDE " + "  ".join(dde_row))
    print("  ours    " + "  ".join(f"{e:5.3f}" for e in errors_ours))
    seen = [ALL_BETAS.index(b) for b in TRAIN_BETAS]
    print(f"  training configurations: mean L2 DeepXDE {np.mean(errors_dde):.3f} ours {errors_ours[seen].mean():.3f}; "
          f"worst DeepXDE {np.max(errors_dde):.3f} ours {errors_ours[seen].max():.3f}")


if __name__ == "__main__":
    main()
