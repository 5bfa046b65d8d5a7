"""Robustness verifiers for feed-forward ReLU networks: IBP, DeepZ and CROWN.

Property: for every input in the L-inf ball ``||x' - x|| <= eps`` (optionally clipped to a
box), class ``label`` scores above every other class, i.e. the margins
``y_label - y_j`` (``j != label``, in class order) are positive. Each verifier returns sound
lower bounds on those margins, the pre-activation bounds of every layer, and the abstract
element at the last hidden layer (the input of the final linear layer), from which
ProFIt reads its proof features.

Supported layers: ``nn.Linear``, ``nn.ReLU``, ``nn.Flatten`` and ``nn.Conv2d`` (turned into
its equivalent dense matrix, fine for small images).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_number, check_tensor

__all__ = ["AffineNet", "VerificationResult", "as_affine_net", "spec_matrix", "verify"]

METHODS = ("ibp", "deepz", "crown")


@dataclass
class AffineNet:
    """A ReLU network as affine maps ``(W_k, b_k)`` with a ReLU after every one but the last."""

    weights: list[Tensor]
    biases: list[Tensor]

    @property
    def n_hidden_layers(self) -> int:
        return len(self.weights) - 1

    def forward(self, x: Tensor) -> Tensor:
        for k, (W, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ W.T + b
            if k < self.n_hidden_layers:
                x = x.clamp_min(0)
        return x

    def last_hidden(self, x: Tensor) -> Tensor:
        for W, b in zip(self.weights[:-1], self.biases[:-1]):
            x = (x @ W.T + b).clamp_min(0)
        return x


def as_affine_net(model: nn.Module, input_shape: tuple[int, ...]) -> AffineNet:
    """Read an ``nn.Sequential`` of Linear / ReLU / Flatten / Conv2d into an :class:`AffineNet`.

    ``input_shape`` excludes the batch dimension, e.g. ``(64,)`` or ``(1, 8, 8)``.
    """
    layers = list(model) if isinstance(model, nn.Sequential) else [model]
    weights, biases = [], []
    shape = tuple(input_shape)
    pending = None  # an affine map not yet followed by a ReLU
    for layer in layers:
        if isinstance(layer, nn.Flatten):
            shape = (int(torch.tensor(shape).prod()),)
            continue
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            W, b, shape = _dense(layer, shape)
            if pending is not None:  # two affine maps in a row compose into one
                W, b = W @ pending[0], W @ pending[1] + b
            pending = (W, b)
        elif isinstance(layer, nn.ReLU):
            if pending is None:
                raise ValueError("a ReLU must follow a Linear or Conv2d layer")
            weights.append(pending[0])
            biases.append(pending[1])
            pending = None
        else:
            raise ValueError(f"unsupported layer {type(layer).__name__}; supported: Linear, Conv2d, ReLU, Flatten")
    if pending is None:
        raise ValueError("the network must end with a Linear (or Conv2d) layer producing the class scores")
    weights.append(pending[0])
    biases.append(pending[1])
    return AffineNet([w.detach().double() for w in weights], [b.detach().double() for b in biases])


def _dense(layer: nn.Module, shape: tuple[int, ...]) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    if isinstance(layer, nn.Linear):
        if shape != (layer.in_features,):
            raise ValueError(f"a Linear layer with in_features={layer.in_features} receives inputs of shape {shape}; "
                             f"check input_shape (and put a Flatten before it)")
        return layer.weight.detach(), (layer.bias.detach() if layer.bias is not None else
                                       torch.zeros(layer.out_features)), (layer.out_features,)
    if len(shape) != 3 or shape[0] != layer.in_channels:
        raise ValueError(f"a Conv2d layer with in_channels={layer.in_channels} receives inputs of shape {shape}; "
                         f"expected (channels, height, width): check input_shape")
    n_in = int(torch.tensor(shape).prod())
    with torch.no_grad():
        basis = torch.eye(n_in).reshape(n_in, *shape)
        try:
            zero = layer(torch.zeros(1, *shape))
        except RuntimeError as err:
            raise ValueError(f"{layer} cannot take inputs of shape {shape}: {err}") from None
        out = layer(basis) - zero  # column j: the response to the j-th unit input
    return out.reshape(n_in, -1).T, zero.flatten(), tuple(zero.shape[1:])


def spec_matrix(label: int, n_classes: int) -> Tensor:
    """``C`` with rows ``e_label - e_j`` for ``j != label`` in class order: ``C y`` are the margins."""
    n_classes = check_int("n_classes", _as_int(n_classes), minimum=2)
    label = check_int("label", _as_int(label), minimum=0)
    if label >= n_classes:
        raise ValueError(f"label must be in [0, {n_classes - 1}] (n_classes={n_classes}), got {label}")
    others = [j for j in range(n_classes) if j != label]
    C = torch.zeros(len(others), n_classes, dtype=torch.float64)
    C[:, label] = 1.0
    C[torch.arange(len(others)), others] = -1.0
    return C


def _as_int(value):
    """numpy and one-element integer tensors as a Python int (others unchanged, for check_int to refuse)."""
    try:
        return value if isinstance(value, bool) else operator.index(value)
    except TypeError:
        return value


@dataclass
class VerificationResult:
    """What a verifier proved.

    Attributes
    ----------
    lower_bounds : Tensor (n_classes - 1,)
        Sound lower bounds on ``y_label - y_j`` for ``j != label``, in class order.
    verified : bool
        All margins positive: the property holds on the whole input region.
    layer_bounds : list of (Tensor, Tensor)
        Pre-activation lower/upper bounds of every hidden layer.
    method, label, eps
    element : the abstract element at the last hidden layer (see :class:`ProofElement`).
    """

    lower_bounds: Tensor
    verified: bool
    layer_bounds: list[tuple[Tensor, Tensor]]
    method: str
    label: int
    eps: float
    element: ProofElement = field(repr=False)


class ProofElement:
    """The abstract element at the input of the final linear layer (the proof features).

    ``lower`` / ``upper`` bound each post-ReLU neuron; :meth:`bound` evaluates sound lower
    bounds of ``W h + b`` over the element, which is how pruned proofs are re-checked.
    """

    lower: Tensor
    upper: Tensor

    def bound(self, W: Tensor, b: Tensor) -> Tensor:
        raise NotImplementedError


class _Box(ProofElement):
    def __init__(self, lower: Tensor, upper: Tensor) -> None:
        self.lower, self.upper = lower, upper

    def bound(self, W, b):
        return (W.clamp_min(0) @ self.lower + W.clamp_max(0) @ self.upper) + b


class _Zonotope(ProofElement):
    def __init__(self, centre: Tensor, generators: Tensor) -> None:
        self.centre, self.generators = centre, generators  # (n,), (g, n)
        radius = generators.abs().sum(0)
        self.lower, self.upper = centre - radius, centre + radius

    def bound(self, W, b):
        return W @ self.centre + b - (self.generators @ W.T).abs().sum(0)


class _Crown(ProofElement):
    def __init__(self, net: AffineNet, bounds: list[tuple[Tensor, Tensor]], x_lo: Tensor, x_hi: Tensor) -> None:
        self.net, self.bounds, self.x_lo, self.x_hi = net, bounds, x_lo, x_hi
        pre_lo, pre_hi = bounds[-1]
        self.lower, self.upper = pre_lo.clamp_min(0), pre_hi.clamp_min(0)

    def bound(self, W, b):
        return _crown_backward(self.net, self.bounds, len(self.bounds), W, b, self.x_lo, self.x_hi)[0]

    def input_coefficients(self, post_relu: bool = True) -> tuple[Tensor, Tensor]:
        """CROWN's linear bounds ``lA x + lb <= h <= uA x + ub`` of the last hidden layer: ``(lA, uA)``, each
        ``(n_hidden, n_input)``. ``post_relu``: of the ReLU outputs (the proof features); else of the
        pre-activations. Their mean is the gradient ProFIt visualises."""
        if post_relu:
            k = len(self.bounds)
            W = torch.eye(len(self.lower), dtype=self.lower.dtype)
            b = torch.zeros_like(self.lower)
        else:
            k = len(self.bounds) - 1
            W, b = self.net.weights[k], self.net.biases[k]
        _, lA = _crown_backward(self.net, self.bounds, k, W, b, self.x_lo, self.x_hi, return_A=True)
        _, uA = _crown_backward(self.net, self.bounds, k, -W, -b, self.x_lo, self.x_hi, return_A=True)
        return lA, -uA


def verify(model, x: Tensor, eps: float, label: int, method: str = "crown", *, clip: tuple[float, float] | None = None,
           input_shape: tuple[int, ...] | None = None) -> VerificationResult:
    """Bound the margins of ``model`` on the L-inf ball of radius ``eps`` around ``x``.

    Args:
        model: an ``nn.Sequential`` of Linear/ReLU/Flatten/Conv2d, or an :class:`AffineNet`.
        x: one input (any shape; flattened in order).
        eps: radius, > 0.
        label: the class that must win.
        method: ``"ibp"``, ``"deepz"`` or ``"crown"`` (tightest of the three, slowest).
        clip: intersect the ball with this box (e.g. ``(0, 1)`` for images).
        input_shape: the shape of ``x`` the model expects (default ``x.shape``).

    Returns:
        A :class:`VerificationResult`; ``lower_bounds`` always in class order without ``label``.
    """
    check_tensor("x", x)
    original_label = label
    eps = check_number("eps", eps, minimum=0, exclusive=True)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    net = model if isinstance(model, AffineNet) else as_affine_net(model, tuple(input_shape or x.shape))
    n_classes = net.weights[-1].shape[0]
    try:  # numpy and single-element integer tensors are integers too (operator.index takes them)
        label = None if isinstance(label, bool) else operator.index(label)
    except TypeError:
        label = None
    if label is None or not 0 <= label < n_classes:
        raise ValueError(f"label must be an int in [0, {n_classes - 1}], got {original_label!r}")
    x = x.detach().double().flatten()
    if x.numel() != net.weights[0].shape[1]:
        raise ValueError(f"x has {x.numel()} values, the network expects {net.weights[0].shape[1]}")
    x_lo, x_hi = x - eps, x + eps
    if clip is not None:
        if not isinstance(clip, (tuple, list)) or len(clip) != 2:
            raise ValueError(f"clip must be a (low, high) pair, got {clip!r}")
        low, high = check_number("clip[0]", clip[0]), check_number("clip[1]", clip[1])
        if not low < high:
            raise ValueError(f"clip must have low < high, got {tuple(clip)}")
        if x.min() < low or x.max() > high:  # the box would cut the ball away from x itself
            raise ValueError(f"x lies outside clip={tuple(clip)} (its values span [{float(x.min()):g}, "
                             f"{float(x.max()):g}])")
        x_lo, x_hi = x_lo.clamp(low, high), x_hi.clamp(low, high)
    C = spec_matrix(label, n_classes)
    W_spec, b_spec = C @ net.weights[-1], C @ net.biases[-1]

    if method == "ibp":
        bounds, element = _ibp(net, x_lo, x_hi)
    elif method == "deepz":
        bounds, element = _deepz(net, x_lo, x_hi)
    else:
        if len(net.weights) < 2:
            raise ValueError("method='crown' needs a model with at least one hidden ReLU layer, got a single affine "
                             "layer (its bounds are exact: use method='ibp')")
        bounds = _crown_layer_bounds(net, x_lo, x_hi)
        element = _Crown(net, bounds, x_lo, x_hi)
    lower = element.bound(W_spec, b_spec)
    return VerificationResult(lower, bool((lower > 0).all()), bounds, method, label, float(eps), element)


# --- IBP ------------------------------------------------------------------------------------------------------


def _ibp(net: AffineNet, lo: Tensor, hi: Tensor):
    bounds = []
    for W, b in zip(net.weights[:-1], net.biases[:-1]):
        mid, rad = (hi + lo) / 2, (hi - lo) / 2
        z_mid, z_rad = W @ mid + b, W.abs() @ rad
        bounds.append((z_mid - z_rad, z_mid + z_rad))
        lo, hi = (z_mid - z_rad).clamp_min(0), (z_mid + z_rad).clamp_min(0)
    return bounds, _Box(lo, hi)


# --- DeepZ (Singh et al., NeurIPS 2018) ----------------------------------------------------------------------------


def _deepz(net: AffineNet, lo: Tensor, hi: Tensor):
    centre = (hi + lo) / 2
    generators = torch.diag((hi - lo) / 2)  # one noise symbol per input
    bounds = []
    for W, b in zip(net.weights[:-1], net.biases[:-1]):
        centre, generators = W @ centre + b, generators @ W.T
        radius = generators.abs().sum(0)
        l, u = centre - radius, centre + radius
        bounds.append((l, u))
        # ReLU: identity if l >= 0, zero if u <= 0, else the minimal-area parallelogram
        slope = torch.where(u <= 0, torch.zeros_like(u), torch.where(l >= 0, torch.ones_like(u), u / (u - l)))
        shift = torch.where((l < 0) & (u > 0), -slope * l / 2, torch.zeros_like(l))
        centre = slope * centre + shift
        generators = generators * slope
        unstable = torch.nonzero(shift > 0).flatten()
        fresh = torch.zeros(len(unstable), len(centre), dtype=centre.dtype)
        fresh[torch.arange(len(unstable)), unstable] = shift[unstable]
        generators = torch.cat([generators, fresh])
    return bounds, _Zonotope(centre, generators)


# --- CROWN (Zhang et al., NeurIPS 2018) -------------------------------------------------------------------------


def _relu_relaxation(l: Tensor, u: Tensor):
    """Linear bounds ``a_lo z <= relu(z) <= a_up z + c_up`` on ``[l, u]`` (adaptive lower slope)."""
    unstable = (l < 0) & (u > 0)
    a_up = torch.where(unstable, u / (u - l), (l >= 0).to(l.dtype))
    c_up = torch.where(unstable, -a_up * l, torch.zeros_like(l))
    a_lo = torch.where(unstable, (u > -l).to(l.dtype), (l >= 0).to(l.dtype))
    return a_lo, a_up, c_up


def _crown_backward(net: AffineNet, bounds, k: int, W: Tensor, b: Tensor, x_lo: Tensor, x_hi: Tensor,
                    return_A: bool = False):
    """Lower bound of ``W h_k + b`` where ``h_k`` is the post-ReLU output of hidden layer ``k``
    (``k = 0``: the input), given pre-activation ``bounds`` of layers ``< k``.

    Back-substitutes through each ReLU relaxation and affine map down to the input box.
    """
    A, const = W, b.clone()
    for j in range(k - 1, -1, -1):
        l, u = bounds[j]
        a_lo, a_up, c_up = _relu_relaxation(l, u)
        # lower bound of A relu(z): positive coefficients take the lower relaxation, negative the upper
        pos, neg = A.clamp_min(0), A.clamp_max(0)
        const = const + neg @ c_up
        A = pos * a_lo + neg * a_up
        const = const + A @ net.biases[j]
        A = A @ net.weights[j]
    lower = A.clamp_min(0) @ x_lo + A.clamp_max(0) @ x_hi + const
    return (lower, A) if return_A else (lower, None)


def _crown_layer_bounds(net: AffineNet, x_lo: Tensor, x_hi: Tensor) -> list[tuple[Tensor, Tensor]]:
    bounds = []
    for k in range(net.n_hidden_layers):
        W, b = net.weights[k], net.biases[k]
        lower = _crown_backward(net, bounds, k, W, b, x_lo, x_hi)[0]
        upper = -_crown_backward(net, bounds, k, -W, -b, x_lo, x_hi)[0]
        bounds.append((lower, upper))
    return bounds
