"""HoloNets: spectral convolutions on directed graphs (FaberNet, Dir-ResolvNet).

Christian Koke, Daniel Cremers. "HoloNets: Spectral Convolutions do Extend to Directed Graphs".
ICLR 2024. https://arxiv.org/abs/2310.02232

    from iclr24.holonets import FaberConv, FaberNet     # PyTorch Geometric layers (extra: graph)
    conv = FaberConv(16, 32, K=3, alpha=0.5)
    out = conv(x, edge_index)                            # edge_index[:, e] = (i, j) means i -> j

    from iclr24.holonets import ResolventConv           # Dir-ResolvNet's filter: stable as clusters collapse
    out = ResolventConv(16, 32, K=2, omega=1.0)(x, edge_index, edge_weight, batch=batch)

The operators, ``ResolventConv`` and ``collapse_clusters`` need only torch and scipy; ``FaberConv``,
``FaberNet`` and the data generators need PyTorch Geometric (``pip install 'iclr24[graph]'``),
imported when first used.
"""

from iclr24.holonets.operators import (
    CollapsedGraph,
    GraphCache,
    UnbalancedClusterWarning,
    as_edge_index,
    characteristic_operator,
    collapse_clusters,
    dense_characteristic_operator,
    dense_laplacian,
    faber_response,
    spectrum,
)
from iclr24.holonets.resolvent import ResolventConv

_LAZY = {
    "FaberConv": "iclr24.holonets.conv",
    "FaberNet": "iclr24.holonets.conv",
    "syn_dir": "iclr24.holonets.data",
    "flow_dsbm": "iclr24.holonets.data",
    "cyclic_dsbm": "iclr24.holonets.data",
    "subdivide_edges": "iclr24.holonets.data",
    "clustered_digraphs": "iclr24.holonets.data",
    "collapse_graph": "iclr24.holonets.data",
    "scale_heavy_edges": "iclr24.holonets.data",
    "load_real_dataset": "iclr24.holonets.data",
}

__all__ = ["CollapsedGraph", "GraphCache", "ResolventConv", "UnbalancedClusterWarning", "as_edge_index",
           "characteristic_operator",
           "collapse_clusters", "dense_characteristic_operator", "dense_laplacian", "faber_response", "spectrum",
           *_LAZY]


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
