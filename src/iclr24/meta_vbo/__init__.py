"""Meta-VBO: Bayesian optimisation of value-at-risk and CVaR that uses prior tasks, robustly.

Quoc Phong Nguyen, Bryan Kian Hsiang Low, Patrick Jaillet. "Meta-VBO: Utilizing Prior Tasks in Optimizing
Risk Measures with Gaussian Processes". ICLR 2024. https://openreview.net/forum?id=ElykcDu5YK

    from iclr24.meta_vbo import fit_risk_model, VUCB, MetaVBO, PriorTask, optimize_risk  # extra: bo
    model = fit_risk_model(x, z, y)                     # BoTorch SingleTaskGP on [x, z], fit_gpytorch_mll
    query = VUCB(model, z_values, alpha=0.1).next_query(candidates=grid)       # or bounds=box
    query = MetaVBO(model, [PriorTask(x1, z1, y1), ...], z_values).next_query(candidates=grid)
    query.x, query.z, query.query_set, query.priority

    from iclr24.meta_vbo import value_at_risk, conditional_value_at_risk, lacing_values   # torch only
    value_at_risk(samples, alpha=0.1)                   # over the last dimension, optional z weights

The risk measures need only torch; the acquisitions and the loop build on BoTorch and GPyTorch
(``pip install 'iclr24[bo]'``), imported when first used.
"""

from iclr24.meta_vbo.risk import (
    RISK_MEASURES,
    conditional_value_at_risk,
    lacing_values,
    risk_measure,
    value_at_risk,
)

_LAZY = {
    "VUCB": "iclr24.meta_vbo.acquisition",
    "MetaVBO": "iclr24.meta_vbo.acquisition",
    "PriorTask": "iclr24.meta_vbo.acquisition",
    "RiskBounds": "iclr24.meta_vbo.acquisition",
    "RiskQuery": "iclr24.meta_vbo.acquisition",
    "Z_SELECTIONS": "iclr24.meta_vbo.acquisition",
    "fit_risk_model": "iclr24.meta_vbo.acquisition",
    "local_maxima": "iclr24.meta_vbo.acquisition",
    "no_regret_set": "iclr24.meta_vbo.acquisition",
    "probable_maximizers": "iclr24.meta_vbo.acquisition",
    "risk_bounds": "iclr24.meta_vbo.acquisition",
    "select_lacing_value": "iclr24.meta_vbo.acquisition",
    "METHODS": "iclr24.meta_vbo.loop",
    "RiskOptimization": "iclr24.meta_vbo.loop",
    "optimize_risk": "iclr24.meta_vbo.loop",
    "BumpFunction": "iclr24.meta_vbo.problems",
    "RiskProblem": "iclr24.meta_vbo.problems",
    "bump_problem": "iclr24.meta_vbo.problems",
    "grid": "iclr24.meta_vbo.problems",
    "SVMTuning": "iclr24.meta_vbo.problems",
    "SVM_DATASETS": "iclr24.meta_vbo.problems",
    "svm_problem": "iclr24.meta_vbo.problems",
}

__all__ = ["RISK_MEASURES", "conditional_value_at_risk", "lacing_values", "require_botorch", "risk_measure",
           "value_at_risk", *_LAZY]

_NEEDS_BOTORCH = {"iclr24.meta_vbo.acquisition", "iclr24.meta_vbo.loop"}


def require_botorch() -> None:
    """Import BoTorch, or fail naming the extra that provides it."""
    try:
        import botorch  # noqa: F401
    except ImportError as err:
        raise ImportError("iclr24.meta_vbo's V-UCB, Meta-VBO and optimize_risk build on BoTorch and GPyTorch: "
                          "pip install 'iclr24[bo]'") from err


def __getattr__(name: str):
    if name in _LAZY:
        if _LAZY[name] in _NEEDS_BOTORCH:
            require_botorch()
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'iclr24.meta_vbo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
