"""The sparse autoencoder of Cunningham et al. (ICLR 2024), laid out like SAELens's.

Tied (the paper's default): a dictionary ``M`` (d_sae x d_in) whose rows are renormalised to
unit length at every forward; ``c = ReLU((x - t) M^T + b_enc)`` and ``x^ = c M + t``, with
``t`` an optional fixed centring and no decoder bias. Loss: ``mean((x^ - x)^2) + l1 * mean_batch ||c||_1``.

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


class SparseAutoencoder(nn.Module):
    """A sparse autoencoder over activations of size ``d_in``.

    Args:
        d_in: activation size.
        d_sae: dictionary size (``d_sae / d_in`` is the dictionary ratio R).
        tied: decoder = the (unit-norm) encoder dictionary, as in the paper; untied keeps a
            separate decoder whose rows are normalised the same way.
        l1_coefficient: sparsity penalty alpha.
        centring: fixed vector ``t`` subtracted before encoding and added after decoding
            (``b_dec`` in SAELens's layout); ``None`` means zeros.

    Shapes:
        - input: ``(..., d_in)``
        - codes: ``(..., d_sae)``, non-negative
    """

    def __init__(self, d_in: int, d_sae: int, *, tied: bool = True, l1_coefficient: float = 1e-3,
                 centring: Tensor | None = None) -> None:
        super().__init__()
        self.d_in, self.d_sae = check_int("d_in", d_in, minimum=1), check_int("d_sae", d_sae, minimum=1)
        if not l1_coefficient >= 0:
            raise ValueError(f"l1_coefficient must be >= 0, got {l1_coefficient}")
        self.tied, self.l1_coefficient = tied, float(l1_coefficient)
        self.dictionary = nn.Parameter(torch.empty(d_sae, d_in))
        self.decoder = None if tied else nn.Parameter(torch.empty(d_sae, d_in))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        if centring is not None:
            check_tensor("centring", centring, ndim=1)
            if centring.numel() != d_in:
                raise ValueError(f"centring must have d_in={d_in} entries, got {centring.numel()}")
        self.register_buffer("b_dec", torch.zeros(d_in) if centring is None else centring.detach().clone().float())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.dictionary)
        if self.decoder is not None:
            nn.init.xavier_uniform_(self.decoder)
        nn.init.zeros_(self.b_enc)

    # SAELens's layout ------------------------------------------------------------------------------
    @property
    def W_enc(self) -> Tensor:  # noqa: N802 (SAELens's name)
        """``[d_in, d_sae]``: the unit-norm dictionary, transposed."""
        return F.normalize(self.dictionary, dim=-1).T

    @property
    def W_dec(self) -> Tensor:  # noqa: N802
        """``[d_sae, d_in]``: unit-norm decoder rows (the encoder's transpose when tied)."""
        return F.normalize(self.dictionary if self.decoder is None else self.decoder, dim=-1)

    # the model ---------------------------------------------------------------------------------------
    def encode(self, x: Tensor) -> Tensor:
        """Codes ``ReLU((x - b_dec) W_enc + b_enc)``, ``(..., d_sae)``."""
        return F.relu((x - self.b_dec) @ self.W_enc + self.b_enc)

    def decode(self, codes: Tensor) -> Tensor:
        """Reconstruction ``codes W_dec + b_dec``, ``(..., d_in)``."""
        return codes @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
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
        return self.W_dec.detach()

    # save / load (SAELens's file layout) ---------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``sae_weights.safetensors`` (W_enc, W_dec, b_enc, b_dec) and ``cfg.json``."""
        save_file = _safetensors().save_file
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"W_enc": self.W_enc, "W_dec": self.W_dec, "b_enc": self.b_enc, "b_dec": self.b_dec}
        tmp = folder / ".sae_weights.safetensors.tmp"
        save_file({k: v.detach().contiguous().float() for k, v in tensors.items()}, str(tmp))
        tmp.replace(folder / "sae_weights.safetensors")
        cfg = {"d_in": self.d_in, "d_sae": self.d_sae, "architecture": "standard", "apply_b_dec_to_input": True,
               "tied": self.tied, "l1_coefficient": self.l1_coefficient}
        write_text_atomic(folder / "cfg.json", json.dumps(cfg, indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "SparseAutoencoder":
        """Read a folder written by :meth:`save` (or a SAELens standard SAE with the same layout)."""
        folder = Path(folder)
        weights = folder / "sae_weights.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no sae_weights.safetensors in {str(folder)!r}")
        tensors = _safetensors().load_file(str(weights))
        cfg = json.loads((folder / "cfg.json").read_text()) if (folder / "cfg.json").is_file() else {}
        W_enc, W_dec = tensors["W_enc"], tensors["W_dec"]
        tied = bool(cfg.get("tied", torch.allclose(W_enc.T, W_dec)))
        sae = cls(W_enc.shape[0], W_enc.shape[1], tied=tied, l1_coefficient=cfg.get("l1_coefficient", 0.0),
                  centring=tensors["b_dec"])
        with torch.no_grad():
            sae.dictionary.copy_(W_enc.T)
            if not tied:
                sae.decoder.copy_(W_dec)
            sae.b_enc.copy_(tensors["b_enc"])
        return sae

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_sae={self.d_sae}, tied={self.tied}, l1_coefficient={self.l1_coefficient}"


def _safetensors():
    try:
        import safetensors.torch
    except ImportError as err:
        raise ImportError("saving and loading SAEs needs safetensors: pip install 'iclr24[interp]'") from err
    return safetensors.torch
