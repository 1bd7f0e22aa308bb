"""Koopa: a forecaster built from Koopman predictors (Liu, Li, Wang, Long, NeurIPS 2023).

Re-implemented for bdlkit from the paper and the MIT-licensed reference code
(``thuml/Koopa``, Copyright (c) 2022 THUML @ Tsinghua University); no code was copied.
``docs/koopa_derivations.md`` §1 gives the derivations and the deviations. For an input window
``x`` of shape ``(B, L, C)`` (look-back L, C channels, already StandardScaled):

1. **Stationarise**: per window and channel ``μ = mean_t x``, ``σ = sqrt(var_t x + 1e-5)``
   (population variance, both detached); the blocks see ``(x − μ)/σ`` and the forecast is
   ``f·σ + μ``.
2. **Disentangle** (each block): ``x_var = irfft(rfft(R) · 1[bin ∉ M], n=L)`` and
   ``x_inv = R − x_var``, with the mask spectrum ``M`` (the top ``⌊α (L//2+1)⌋`` bins of the
   mean amplitude spectrum of the *training* windows, :func:`mask_spectrum`) a buffer.
3. **Time-invariant predictor** (block b): ``Dec_inv(K_b · Enc_inv(x_inv))`` channel by
   channel, ``K_b`` a learned ``D × D`` operator (orthogonal initialisation).
4. **Time-variant predictor**: cut ``x_var`` into F = ⌈L/S⌉ segments of S steps, embed each
   (``Enc_var``, all channels together), fit the per-window operator ``K = argmin ‖X K − Y‖``
   from consecutive embeddings ``X = z_{1..F-1}``, ``Y = z_{2..F}``, backcast
   ``[z_1, X K]`` and forecast ``z_F K^j``, decode with ``Dec_var``.
5. **Stack** blocks: ``R_{b+1} = R_b − backcast_b`` and the forecast sums every block's
   time-invariant and time-variant outputs (the code's residual, not the paper's).

The per-window operator: with F = 2 (the official scripts' L = 2H, S = H) the
minimum-norm solution is rank one and has the exact closed form
``K = z_1ᵀ z_2 / (‖z_1‖² + ε)``, so the forecast embedding is ``c·z_2`` with
``c = ⟨z_1, z_2⟩ / (‖z_1‖² + ε)``; for F > 2 the Gram form
``K = Xᵀ (X Xᵀ + λI)⁻¹ Y``. Both are batched, differentiable, device-agnostic and free of
data-dependent control flow: the upstream ``if isnan(K): K = I`` fallback (which
``torch.func.vmap`` rejects) is not needed, as ε and λ keep them finite. ``operator=
"lstsq"`` uses ``torch.linalg.lstsq`` (the reference, kept as a test oracle).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

OPERATORS = ("auto", "closed_form", "lstsq")
REVIN_EPS = 1e-5


def mask_spectrum(x_train: Tensor, alpha: float = 0.2, chunk: int = 4096) -> Tensor:
    """The Fourier bins Koopa treats as time-invariant, from the training windows.

    The mean over windows and channels of ``|rfft(x)|`` over time; the
    ``k = ⌊α (L//2 + 1)⌋`` largest bins (sorted by index). The reference code sums batch
    means over a shuffled, drop_last loader; the mean over all windows is that sum up to
    the dropped windows.

    Args:
        x_train: training look-back windows ``(n, L, C)`` (scaled, not RevIN-normalised).
        alpha: the fraction of bins that are time-invariant, in (0, 1].
        chunk: windows transformed at a time.
    """
    if x_train.ndim != 3 or len(x_train) == 0:
        raise ValueError(f"mask_spectrum needs windows (n, L, C) with n >= 1, got "
                         f"{tuple(x_train.shape)}")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    bins = x_train.shape[1] // 2 + 1
    total = torch.zeros(bins, dtype=torch.float64, device=x_train.device)
    for start in range(0, len(x_train), chunk):
        amp = torch.fft.rfft(x_train[start : start + chunk].double(), dim=1).abs()
        total += amp.sum(dim=(0, 2))
    k = max(1, math.floor(alpha * bins))
    return total.topk(k).indices.sort().values


def _mlp(inp: int, hidden: int, out: int, layers: int, act: type[nn.Module],
         dropout: float) -> nn.Sequential:
    """``layers`` Linear layers: ``in → h``, ``(layers − 2) × (h → h)``, ``h → out``; an
    activation and dropout after each but the last."""
    if layers < 2:
        raise ValueError(f"hidden_layers counts the Linear layers of an MLP and must be >= 2, "
                         f"got {layers}")
    mods: list[nn.Module] = [nn.Linear(inp, hidden), act(), nn.Dropout(dropout)]
    for _ in range(layers - 2):
        mods += [nn.Linear(hidden, hidden), act(), nn.Dropout(dropout)]
    mods.append(nn.Linear(hidden, out))
    return nn.Sequential(*mods)


def window_operator_forecast(z: Tensor, steps: int, *, operator: str, ridge: float,
                             extra_step: bool = False) -> tuple[Tensor, Tensor]:
    """Backcast and forecast embeddings of the per-window DMD operator.

    Args:
        z: segment embeddings ``(B, F, D)``, F >= 2.
        steps: forecast segments.
        operator: ``"closed_form"`` (F = 2: the exact rank-one solution; F > 2: the Gram
            form with ``ridge``), ``"auto"`` (the same) or ``"lstsq"``.
        ridge: ε of the closed form and λ of the Gram form.
        extra_step: start the forecast one operator step later (the first release's form).

    Returns:
        ``(backcast (B, F, D), forecast (B, steps, D))``.
    """
    x, y, last = z[:, :-1], z[:, 1:], z[:, -1:]
    if operator not in OPERATORS:
        raise ValueError(f"operator must be one of {OPERATORS}, got {operator!r}")
    if operator != "lstsq" and z.shape[1] == 2:  # K = z1ᵀ z2 / (|z1|² + ε), rank one
        z1, z2 = z[:, 0], z[:, 1]
        norm = (z1 * z1).sum(-1, keepdim=True)
        back2 = z2 * (norm / (norm + ridge))  # z1 K
        c = (z1 * z2).sum(-1, keepdim=True) / (norm + ridge)  # z2 K = c z2
        powers = torch.arange(1, steps + 1, dtype=z.dtype, device=z.device) + int(extra_step)
        forecast = c[:, None, :] ** powers[None, :, None] * z2[:, None, :]
        return torch.stack([z1, back2], dim=1), forecast
    if operator == "lstsq":
        k = torch.linalg.lstsq(x, y).solution
    else:  # Gram form: K = Xᵀ (X Xᵀ + λI)⁻¹ Y, an (F−1) × (F−1) solve
        gram = x @ x.transpose(1, 2)
        eye = torch.eye(gram.shape[-1], dtype=z.dtype, device=z.device)
        k = x.transpose(1, 2) @ torch.linalg.solve(gram + ridge * eye, y)
    back = torch.cat([z[:, :1], x @ k], dim=1)
    step = last @ k if extra_step else last
    out = []
    for _ in range(steps):
        step = step @ k
        out.append(step)
    return back, torch.cat(out, dim=1)


#: The VI step sizes Koopa needs, ten times below the MLP-tuned defaults of the methods
#: (``bdlkit fit`` applies them when the run does not set the option; pass them yourself to
#: ``bdlkit.infer``). On ETTh2, horizon 48, seed 0, at the defaults: advi (lr 1e-2) ended at
#: test MSE 12.1 and score_vi's gradient solver (ADVI's iterates) at 104, against MAP's 0.258;
#: ivon (lr 0.1) and the closed form (ω 0.1) stopped with NaN at step 3. At these values
#: (300 steps): advi 0.238, ivon 0.240, the closed form 0.238 (``docs/forecasting.md``).
METHOD_OPTIONS: dict[str, dict[str, float]] = {
    "advi": {"lr": 1e-3}, "fisher_vi": {"lr": 1e-3}, "ivon": {"lr": 1e-2},
    "score_vi/gradient": {"lr": 1e-3}, "score_vi/closed_form": {"omega": 1e-2},
}


class Koopa(nn.Module):
    """Koopa forecaster (Liu et al., NeurIPS 2023): windows (B, L, C) to forecasts (B, H, C).

    Args:
        lookback: L, the input length.
        horizon: H, the forecast length.
        channels: C, the number of series.
        mask: the time-invariant Fourier bins (:func:`mask_spectrum` of the training
            windows), indices in ``[0, L//2]``.
        seg_len: S, the segment length of the time-variant predictor (default H).
        dynamic_dim: D, the Koopman embedding size.
        hidden_dim: h, the width of the encoders and decoders.
        hidden_layers: Linear layers per encoder/decoder (>= 2).
        num_blocks: stacked blocks (each has its own learned operator).
        dropout: dropout after each hidden layer (0.05 upstream; a
            :class:`~bdlkit.problems.BayesianModel` with its default ``buffers="frozen"``
            runs the module in eval mode, so dropout is off there).
        operator: the per-window operator: ``"auto"``/``"closed_form"`` or ``"lstsq"``.
        ridge: its ε (F = 2) or λ (F > 2).
        extra_step: the first release's forecast, one operator step later.
    """

    def __init__(self, lookback: int, horizon: int, channels: int, mask: Tensor | list[int],
                 *, seg_len: int | None = None, dynamic_dim: int = 128, hidden_dim: int = 64,
                 hidden_layers: int = 2, num_blocks: int = 3, dropout: float = 0.05,
                 operator: str = "auto", ridge: float = 1e-6, extra_step: bool = False) -> None:
        super().__init__()
        for name, value in (("lookback", lookback), ("horizon", horizon),
                            ("channels", channels), ("dynamic_dim", dynamic_dim),
                            ("hidden_dim", hidden_dim), ("num_blocks", num_blocks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Koopa: {name} must be a positive integer, got {value!r}")
        if operator not in OPERATORS:
            raise ValueError(f"Koopa: operator must be one of {OPERATORS}, got {operator!r}")
        seg_len = horizon if seg_len is None else seg_len
        if isinstance(seg_len, bool) or not isinstance(seg_len, int) or seg_len < 1:
            raise ValueError(f"Koopa: seg_len must be a positive integer, got {seg_len!r}")
        if not ridge >= 0:
            raise ValueError(f"Koopa: ridge must be >= 0, got {ridge!r}")
        self.lookback, self.horizon, self.channels, self.seg_len = (
            lookback, horizon, channels, seg_len)
        self.segments = math.ceil(lookback / seg_len)
        if self.segments < 2:
            raise ValueError(f"Koopa: seg_len {seg_len} >= lookback {lookback} leaves one "
                             "segment; the time-variant operator needs two: use seg_len <= "
                             "lookback / 2")
        self.steps = math.ceil(horizon / seg_len)
        self.operator, self.ridge, self.extra_step = operator, float(ridge), bool(extra_step)
        bins = lookback // 2 + 1
        index = torch.as_tensor(mask, dtype=torch.long).reshape(-1)
        if len(index) == 0 or index.min() < 0 or index.max() >= bins:
            raise ValueError(f"Koopa: mask bins must be in [0, {bins}) for lookback {lookback}, "
                             f"got {index.tolist()}")
        keep = torch.ones(bins)
        keep[index] = 0.0
        self.register_buffer("variant_bins", keep)  # 1 on the time-variant bins
        d, h, n, sc = dynamic_dim, hidden_dim, hidden_layers, seg_len * channels
        self.enc_inv = _mlp(lookback, h, d, n, nn.ReLU, dropout)
        self.dec_inv = _mlp(d, h, horizon, n, nn.ReLU, dropout)
        self.enc_var = _mlp(sc, h, d, n, nn.Tanh, dropout)
        self.dec_var = _mlp(d, h, sc, n, nn.Tanh, dropout)
        self.operators = nn.ParameterList(
            nn.Parameter(_orthogonal(d)) for _ in range(num_blocks))

    def reset_parameters(self) -> None:
        """Redraw every weight as the constructor does (deep ensembles' members)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()
        with torch.no_grad():
            for k in self.operators:
                k.copy_(_orthogonal(k.shape[0], k))

    @property
    def parameter_groups(self) -> dict[str, tuple[str, ...]]:
        """Named subsets for ``bayesian=`` and ``flow_on=`` (``docs/koopa_derivations.md`` §3)."""
        last = str(len(self.dec_inv) - 1)
        return {
            "operators": ("operators",),
            "decoders": ("dec_inv", "dec_var"),
            "head": ("operators", f"dec_inv.{last}", f"dec_var.{last}"),
            "last_block": (f"operators.{len(self.operators) - 1}",),
        }

    def _split(self, r: Tensor) -> tuple[Tensor, Tensor]:
        """``(x_var, x_inv)``: the residual without, and with only, the mask's bins."""
        spectrum = torch.fft.rfft(r, dim=1) * self.variant_bins[None, :, None]
        x_var = torch.fft.irfft(spectrum, n=self.lookback, dim=1)
        return x_var, r - x_var

    def _invariant(self, x_inv: Tensor, k: Tensor) -> Tensor:
        z = self.enc_inv(x_inv.transpose(1, 2)) @ k.T  # (B, C, D)
        return self.dec_inv(z).transpose(1, 2)  # (B, H, C)

    def _variant(self, x_var: Tensor) -> tuple[Tensor, Tensor]:
        b, length, c = x_var.shape
        pad = self.segments * self.seg_len - length
        if pad:
            x_var = torch.cat([x_var[:, length - pad :], x_var], dim=1)
        seg = x_var.reshape(b, self.segments, self.seg_len * c)
        back, fore = window_operator_forecast(self.enc_var(seg), self.steps,
                                              operator=self.operator, ridge=self.ridge,
                                              extra_step=self.extra_step)
        back = self.dec_var(back).reshape(b, -1, c)[:, pad:]  # aligned with the input
        fore = self.dec_var(fore).reshape(b, -1, c)[:, : self.horizon]
        return back, fore

    def forward(self, x: Tensor) -> Tensor:
        """Forecast ``(B, H, C)`` from windows ``(B, L, C)``."""
        if x.ndim != 3 or x.shape[1:] != (self.lookback, self.channels):
            raise ValueError(f"Koopa expects windows (batch, {self.lookback}, {self.channels}), "
                             f"got {tuple(x.shape)}")
        mu = x.mean(dim=1, keepdim=True).detach()
        sigma = (x.var(dim=1, keepdim=True, unbiased=False) + REVIN_EPS).sqrt().detach()
        residual = (x - mu) / sigma
        forecast = torch.zeros(x.shape[0], self.horizon, x.shape[2], dtype=x.dtype,
                               device=x.device)
        for k in self.operators:
            x_var, x_inv = self._split(residual)
            back, fore = self._variant(x_var)
            forecast = forecast + self._invariant(x_inv, k) + fore
            residual = residual - back
        return forecast * sigma + mu


def _orthogonal(d: int, like: Tensor | None = None) -> Tensor:
    """``U Vᵀ`` from the SVD of a standard-normal ``d × d`` matrix (Koopa's initialisation),
    in ``like``'s dtype and device."""
    kw = {} if like is None else {"dtype": like.dtype, "device": like.device}
    u, _, vh = torch.linalg.svd(torch.randn(d, d, **kw))
    return u @ vh


#: (data set, horizon) -> (dynamic_dim, hidden_dim, hidden_layers, num_blocks) of the official
#: scripts (``thuml/Koopa`` ``scripts/*/Koopa.sh``); all use L = 2H, S = H, α = 0.2.
PRESETS: dict[tuple[str, int], tuple[int, int, int, int]] = {
    ("ett/ETTh2", 48): (64, 512, 2, 4), ("ett/ETTh2", 96): (64, 64, 2, 1),
    ("ett/ETTh2", 144): (64, 64, 3, 4), ("ett/ETTh2", 192): (64, 64, 2, 1),
    ("exchange_rate", 48): (128, 256, 3, 4), ("exchange_rate", 96): (64, 64, 3, 4),
    ("exchange_rate", 144): (512, 64, 2, 2), ("exchange_rate", 192): (64, 128, 3, 2),
    ("ili", 24): (128, 512, 2, 4), ("ili", 36): (512, 512, 3, 3),
    ("ili", 48): (256, 512, 2, 2), ("ili", 60): (64, 256, 4, 3),
}


def koopa_for_data(x_train: Tensor, horizon: int, *, dataset: str | None = None,
                   alpha: float = 0.2, **kwargs: object) -> Koopa:
    """A :class:`Koopa` for training windows ``x_train (n, L, C)`` and horizon H.

    The mask spectrum comes from ``x_train``; the sizes from the official script of
    ``(dataset, horizon)`` when there is one (:data:`PRESETS`), else the constructor's
    defaults; ``kwargs`` override either.
    """
    if x_train.ndim != 3:
        raise ValueError(f"model 'koopa' needs forecasting windows (n, lookback, channels), "
                         f"got inputs of shape {tuple(x_train.shape[1:])}: use a forecasting "
                         "data set (ett/ETTh2, exchange_rate, ili or a time-series .csv)")
    options: dict[str, object] = {}
    if dataset is not None and (dataset, horizon) in PRESETS:
        d, h, n, nb = PRESETS[(dataset, horizon)]
        options = {"dynamic_dim": d, "hidden_dim": h, "hidden_layers": n, "num_blocks": nb}
    options.update(kwargs)
    mask = mask_spectrum(x_train, alpha)
    return Koopa(x_train.shape[1], horizon, x_train.shape[2], mask, **options)
