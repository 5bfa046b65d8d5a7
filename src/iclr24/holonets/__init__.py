"""HoloNets: spectral convolutions on directed graphs (FaberNet).

Christian Koke, Daniel Cremers. "HoloNets: Spectral Convolutions do Extend to Directed Graphs".
ICLR 2024. https://arxiv.org/abs/2310.02232

    from iclr24.holonets import FaberConv, FaberNet     # PyTorch Geometric layers (extra: graph)
    conv = FaberConv(16, 32, K=3, alpha=0.5)
    out = conv(x, edge_index)                            # edge_index[:, e] = (i, j) means i -> j

The operators and frequency response (``characteristic_operator``, ``faber_response``) need
only torch; ``FaberConv``, ``FaberNet`` and the data generators need PyTorch Geometric
(``pip install 'iclr24[graph]'``), imported when first used.
"""

from iclr24.holonets.operators import (
    characteristic_operator,
    dense_characteristic_operator,
    faber_response,
    spectrum,
)

_LAZY = {
    "FaberConv": "iclr24.holonets.conv",
    "FaberNet": "iclr24.holonets.conv",
    "syn_dir": "iclr24.holonets.data",
    "flow_dsbm": "iclr24.holonets.data",
    "cyclic_dsbm": "iclr24.holonets.data",
    "subdivide_edges": "iclr24.holonets.data",
    "load_real_dataset": "iclr24.holonets.data",
}

__all__ = ["characteristic_operator", "dense_characteristic_operator", "faber_response", "spectrum", *_LAZY]


def require_pyg() -> None:
    """Import PyTorch Geometric, or fail naming the extra that provides it."""
    try:
        import torch_geometric  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "iclr24.holonets needs PyTorch Geometric for FaberConv, FaberNet and its data: "
            "pip install 'iclr24[graph]'"
        ) from err


def __getattr__(name: str):
    if name in _LAZY:
        require_pyg()
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'iclr24.holonets' has no attribute {name!r}")
