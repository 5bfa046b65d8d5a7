"""The sparse autoencoder of Cunningham et al. (ICLR 2024), laid out like SAELens's.

Tied (the paper's default): a dictionary ``M`` (d_sae x d_in) whose rows are renormalised to
unit length at every forward; ``c = ReLU((x - t) M^T + b_enc)`` and ``x^ = c M + t``, with
``t`` an optional fixed centring and no decoder bias. Untied: a free encoder replaces ``M^T``
in the code; only the decoder rows are normalised. Loss: ``mean((x^ - x)^2) + l1 * mean_batch ||c||_1``.

Weights are exposed with SAELens's names and shapes (``W_enc [d_in, d_sae]``,
``W_dec [d_sae, d_in]``, ``b_enc [d_sae]``, ``b_dec [d_in]``) and saved as safetensors, so an
SAE moves between the two libraries.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr24.core.checks import check_int, check_tensor
from iclr24.core.io import write_text_atomic

__all__ = ["SparseAutoencoder"]

#: the SAELens config format written by :meth:`SparseAutoencoder.save` (its 6.x layout)
SAELENS_FORMAT = "6.0.0"


class SparseAutoencoder(nn.Module):
    """A sparse autoencoder over activations of size ``d_in``.

    Args:
        d_in: activation size.
        d_sae: dictionary size (``d_sae / d_in`` is the dictionary ratio R).
        tied: the encoder is the decoder's transpose, as in the paper's main SAE; untied keeps
            a free encoder matrix (the paper's untied variant).
        l1_coefficient: sparsity penalty alpha.
        centring: fixed vector ``t`` subtracted before encoding and added after decoding
            (``b_dec`` in SAELens's layout); ``None`` means zeros.
        normalize_decoder: use unit-norm decoder rows at every forward (the paper). ``False``
            uses the raw weights, as SAELens does; :meth:`load` of a foreign SAE sets it so.
        normalize_encoder: untied only, also use unit-norm encoder columns (not the paper's
            choice; the behaviour of iclr24 before 0.2, kept for comparison).
        apply_b_dec_to_input: subtract ``b_dec`` before encoding (SAELens's flag; the paper's ``t``).
        hook_name, model_name: where the activations come from, saved in SAELens's metadata.

    Shapes:
        - input: ``(..., d_in)``
        - codes: ``(..., d_sae)``, non-negative
    """

    def __init__(self, d_in: int, d_sae: int, *, tied: bool = True, l1_coefficient: float = 1e-3,
                 centring: Tensor | None = None, normalize_decoder: bool = True, normalize_encoder: bool = False,
                 apply_b_dec_to_input: bool = True, hook_name: str | None = None,
                 model_name: str | None = None) -> None:
        super().__init__()
        self.d_in, self.d_sae = check_int("d_in", d_in, minimum=1), check_int("d_sae", d_sae, minimum=1)
        if not l1_coefficient >= 0:
            raise ValueError(f"l1_coefficient must be >= 0, got {l1_coefficient}")
        if tied and normalize_encoder:
            raise ValueError("normalize_encoder applies to untied SAEs only (a tied encoder is the decoder)")
        self.tied, self.l1_coefficient = bool(tied), float(l1_coefficient)
        self.normalize_decoder, self.normalize_encoder = bool(normalize_decoder), bool(normalize_encoder)
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        self.hook_name, self.model_name = hook_name, model_name
        self.dictionary = nn.Parameter(torch.empty(d_sae, d_in))  # decoder rows: the learned feature directions
        self.encoder = None if tied else nn.Parameter(torch.empty(d_in, d_sae))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        if centring is not None:
            check_tensor("centring", centring, ndim=1)
            if centring.numel() != d_in:
                raise ValueError(f"centring must have d_in={d_in} entries, got {centring.numel()}")
        self.register_buffer("b_dec", torch.zeros(d_in) if centring is None else centring.detach().clone().float())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.dictionary)
        if self.encoder is not None:
            nn.init.xavier_uniform_(self.encoder)
        nn.init.zeros_(self.b_enc)

    # SAELens's layout ------------------------------------------------------------------------------
    @property
    def W_dec(self) -> Tensor:  # noqa: N802 (SAELens's name)
        """``[d_sae, d_in]``: decoder rows, unit-norm when ``normalize_decoder``."""
        return F.normalize(self.dictionary, dim=-1) if self.normalize_decoder else self.dictionary

    @property
    def W_enc(self) -> Tensor:  # noqa: N802
        """``[d_in, d_sae]``: the decoder's transpose when tied, else the free encoder."""
        if self.encoder is None:
            return self.W_dec.T
        return F.normalize(self.encoder, dim=0) if self.normalize_encoder else self.encoder

    # the model ---------------------------------------------------------------------------------------
    def encode(self, x: Tensor) -> Tensor:
        """Codes ``ReLU((x - b_dec) W_enc + b_enc)``, ``(..., d_sae)``."""
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return F.relu(x @ self.W_enc + self.b_enc)

    def decode(self, codes: Tensor) -> Tensor:
        """Reconstruction ``codes W_dec + b_dec``, ``(..., d_in)``."""
        return codes @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        check_tensor("x", x, min_ndim=1, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64),
                     finite=False)
        if x.shape[-1] != self.d_in:
            raise ValueError(f"x must be (..., d_in={self.d_in}), got shape {tuple(x.shape)}")
        codes = self.encode(x)
        return self.decode(codes), codes

    def loss(self, x: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The paper's loss ``mean((x^ - x)^2) + l1 * mean_batch ||c||_1``, and its parts."""
        reconstruction, codes = self(x)
        mse = (reconstruction - x).pow(2).mean()
        l1 = codes.abs().sum(-1).mean()
        return mse + self.l1_coefficient * l1, {"mse": float(mse.detach()), "l1": float(l1.detach())}

    @property
    def atoms(self) -> Tensor:
        """Unit-norm dictionary directions, ``(d_sae, d_in)``: what MMCS compares with the truth."""
        return F.normalize(self.dictionary.detach(), dim=-1)

    def for_inputs_scaled_by(self, scale: float) -> "SparseAutoencoder":
        """This SAE for activations ``scale`` times larger: the codes of ``scale * x`` are this SAE's codes of
        ``x``, and the reconstruction is ``scale`` times this SAE's.

        An SAE trained on activations divided by a constant (so that l1 values transfer between models) is
        saved through this, so that SAELens, which reads the raw hook, gives the same codes: the scale is folded
        into the weights (``W_enc / scale``, ``W_dec * scale``, ``b_dec * scale``; ``b_enc`` unchanged), which
        makes an untied SAE whose decoder rows are used as stored (norm ``scale``).
        """
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0 or scale == float("inf"):
            raise ValueError(f"scale must be a positive finite number, got {scale!r}")
        with torch.random.fork_rng(devices=[]):  # the throwaway initialisation leaves the caller's random state alone
            out = SparseAutoencoder(self.d_in, self.d_sae, tied=False, l1_coefficient=self.l1_coefficient,
                                    centring=self.b_dec * scale, normalize_decoder=False,
                                    apply_b_dec_to_input=self.apply_b_dec_to_input, hook_name=self.hook_name,
                                    model_name=self.model_name)
        with torch.no_grad():
            out.dictionary.copy_(self.W_dec * scale)
            out.encoder.copy_(self.W_enc / scale)
            out.b_enc.copy_(self.b_enc)
        return out

    # save / load (SAELens's file layout) ---------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``sae_weights.safetensors`` (W_enc, W_dec, b_enc, b_dec, as used) and a ``cfg.json``
        that SAELens 6's ``SAE.load_from_disk`` reads (architecture ``standard``)."""
        save_file = _safetensors().save_file
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"W_enc": self.W_enc, "W_dec": self.W_dec, "b_enc": self.b_enc, "b_dec": self.b_dec}
        tmp = folder / ".sae_weights.safetensors.tmp"
        save_file({k: v.detach().contiguous().float() for k, v in tensors.items()}, str(tmp))
        tmp.replace(folder / "sae_weights.safetensors")
        cfg = {
            "architecture": "standard", "d_in": self.d_in, "d_sae": self.d_sae, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": self.apply_b_dec_to_input, "normalize_activations": "none",
            "reshape_activations": "none",
            "metadata": {"sae_lens_version": SAELENS_FORMAT, "sae_lens_training_version": None,
                         "model_name": self.model_name, "hook_name": self.hook_name, "hook_head_index": None,
                         "prepend_bos": False, "context_size": None, "dataset_path": None},
            # ours (SAELens ignores keys it does not know): how to rebuild this SAE exactly
            "iclr24": {"tied": self.tied, "l1_coefficient": self.l1_coefficient,
                       "normalize_decoder": self.normalize_decoder, "normalize_encoder": self.normalize_encoder},
        }
        write_text_atomic(folder / "cfg.json", json.dumps(cfg, indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "SparseAutoencoder":
        """Read a folder written by :meth:`save` or by SAELens (a ``standard`` SAE).

        The weights are used exactly as stored. A folder from elsewhere loads as an untied SAE
        with raw (not re-normalised) weights, so its codes are SAELens's.
        """
        folder = Path(folder)
        weights = folder / "sae_weights.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no sae_weights.safetensors in {str(folder)!r}")
        tensors = {k: v.float() for k, v in _safetensors().load_file(str(weights)).items()}
        missing = {"W_enc", "W_dec", "b_enc", "b_dec"} - set(tensors)
        if missing:
            raise ValueError(f"{str(weights)!r} lacks {sorted(missing)}; expected a standard SAE's W_enc, W_dec, "
                             "b_enc, b_dec")
        cfg = {}
        if (folder / "cfg.json").is_file():
            try:
                cfg = json.loads((folder / "cfg.json").read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{str(folder / 'cfg.json')!r} is not valid JSON: {err}") from err
            if not isinstance(cfg, dict):
                raise ValueError(f"{str(folder / 'cfg.json')!r} must hold a JSON object, got {type(cfg).__name__}")
        W_enc, W_dec = tensors["W_enc"], tensors["W_dec"]
        if W_enc.dim() != 2:
            raise ValueError(f"W_enc must be [d_in, d_sae], got shape {tuple(W_enc.shape)}")
        d_in, d_sae = W_enc.shape
        for key, shape in (("W_dec", (d_sae, d_in)), ("b_enc", (d_sae,)), ("b_dec", (d_in,))):
            if tuple(tensors[key].shape) != shape:
                raise ValueError(f"{key} must have shape {list(shape)} to match W_enc [d_in={d_in}, d_sae={d_sae}], "
                                 f"got {list(tensors[key].shape)}")
        architecture = cfg.get("architecture", "standard")
        if architecture != "standard":
            raise ValueError(f"cannot load a {architecture!r} SAE; SparseAutoencoder is SAELens's 'standard' one")
        if cfg.get("normalize_activations", "none") not in ("none", None, False):
            raise ValueError(f"cannot load an SAE with normalize_activations={cfg['normalize_activations']!r}; "
                             "only 'none' is supported")
        ours = cfg.get("iclr24") or {}
        metadata = cfg.get("metadata") or {}
        # "tied" is trusted only when the stored weights are tied: the weights are used as stored
        tied = bool(ours.get("tied", False)) and torch.allclose(W_enc, W_dec.T)
        sae = cls(W_enc.shape[0], W_enc.shape[1], tied=tied, l1_coefficient=ours.get("l1_coefficient", 0.0),
                  centring=tensors["b_dec"], normalize_decoder=bool(ours.get("normalize_decoder", False)),
                  normalize_encoder=bool(ours.get("normalize_encoder", False)),
                  apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
                  hook_name=metadata.get("hook_name", cfg.get("hook_name")),
                  model_name=metadata.get("model_name", cfg.get("model_name")))
        with torch.no_grad():
            sae.dictionary.copy_(W_dec)
            if not tied:
                sae.encoder.copy_(W_enc)
            sae.b_enc.copy_(tensors["b_enc"])
        return sae

    def extra_repr(self) -> str:
        return (f"d_in={self.d_in}, d_sae={self.d_sae}, tied={self.tied}, l1_coefficient={self.l1_coefficient}, "
                f"normalize_decoder={self.normalize_decoder}")


def _safetensors():
    try:
        import safetensors.torch
    except ImportError as err:
        raise ImportError("saving and loading SAEs needs safetensors: pip install 'iclr24[interp]'") from err
    return safetensors.torch
