"""Toy experiments for the core tests: registered under unique names, removed afterwards."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Literal, Optional

import matplotlib.pyplot as plt
import numpy as np
import torch

from iclr24.core import Check, Claim, Result, against
from iclr24.core.experiment import _REGISTRY, experiment


@dataclass(frozen=True)
class ToyConfig:
    n: int = 8
    lr: float = 0.1
    flag: bool = False
    sizes: tuple[int, ...] = (1, 2)
    mode: Literal["a", "b"] = "a"
    limit: Optional[int] = None
    fail: bool = False

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


PRESETS = {"smoke": ToyConfig(n=4), "quick": ToyConfig()}


def register_toys():
    @experiment(name="toy", paper="A Toy Paper (ICLR 2024)", presets=PRESETS, claims=["mean is small"])
    def toy(cfg, ctx):
        """A toy reproduction that draws random numbers."""
        x = torch.randn(cfg.n)
        y = np.random.rand()
        ctx.log(f"drew {cfg.n} numbers")
        ctx.path("samples.txt").write_text(" ".join(f"{v:.4f}" for v in x.tolist()))
        fig, ax = plt.subplots()
        ax.plot(x.numpy())
        if cfg.fail:
            raise RuntimeError("the toy failed on purpose")
        mean = float(x.mean())
        return Result(
            metrics={"mean": mean, "numpy": y},
            timings={"seconds": 0.1},
            claims=[Claim("mean is small", paper="|mean| < 3", measured=f"{mean:.3f}",
                          evidence=against(x.abs().tolist(), 3.0, better="lower", unit="draws"),
                          criterion="mean |x| < 3", provenance="spec")],
            checks=[Check("the draws are finite", bool(torch.isfinite(x).all()))],
            figures={"samples.png": fig},
            tables={"draws": [{"i": i, "x": v} for i, v in enumerate(x.tolist()[:3])]},
        )

    @experiment(name="toy_forgetful", paper="Another Toy (ICLR 2024)", presets=PRESETS, claims=["declared"])
    def forgetful(cfg, ctx):
        return Result(metrics={}, claims=[])

    @experiment(name="toy_interrupted", paper="Interrupted Toy (ICLR 2024)", presets=PRESETS)
    def interrupted(cfg, ctx):
        raise KeyboardInterrupt

    @experiment(name="toy_terminated", paper="Terminated Toy (ICLR 2024)", presets=PRESETS)
    def terminated(cfg, ctx):
        ctx.path("partial.txt").write_text("half done")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends

    @experiment(name="toy_empty", paper="Empty Toy (ICLR 2024)", presets=PRESETS, claims=["holds over nothing"])
    def empty(cfg, ctx):
        return Result(metrics={}, claims=[Claim("holds over nothing", paper="-", measured="nothing",
                                                evidence=against([0.0, 0.0, 0.0], -1.0))])

    return toy


def unregister_toys():
    for name in ("toy", "toy_forgetful", "toy_interrupted", "toy_terminated", "toy_empty"):
        _REGISTRY.pop(name, None)
