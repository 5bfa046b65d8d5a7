"""The one list of method packages the registry loads.

Core never imports a method by name in code; it imports ``iclr24.<name>.experiment``
for each entry here. A new method adds one line.
"""

METHOD_PACKAGES: tuple[str, ...] = (
    "hyperattention",
    "kernel_trees",
    "holonets",
    "proof_features",
    "sae",
    "tora",
    "l2mac",
    "eft",
    "orthogonal_classifier",
    "subspace_patching",
    "lfr",
    "moe_peft",
    "dats",
    "aid",
    "loqa",
    "federated",
    "selfcontradiction",
    "coela",
    "meta_vbo",
)
