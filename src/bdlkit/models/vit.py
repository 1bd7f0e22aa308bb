"""A small Vision Transformer for CIFAR-sized images.

Source: Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image
Recognition at Scale", ICLR 2021. Patches are embedded by a ``Conv2d`` with
``stride = kernel = patch_size``; a learned class token and learned position embeddings
are added; ``depth`` pre-norm blocks ``x + MHSA(LN(x))``, ``x + MLP(LN(x))`` follow; a final
LayerNorm and a linear head read the class token. Attention is written by hand (no in-place
ops, no fused fast paths) so the model works under ``torch.func``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Attention(nn.Module):
    """Multi-head scaled dot-product self-attention on ``(n, tokens, dim)``."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        n, t, d = x.shape
        qkv = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (n, heads, t, d_head)
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        h = torch.matmul(self.drop(attn), v).transpose(1, 2).reshape(n, t, d)
        return self.drop(self.out(h))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + MHSA(LN(x))`` then ``x + MLP(LN(x))`` (GELU)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Small Vision Transformer (Dosovitskiy et al., 2021); see the module docstring.

    Args:
        image_size: side of the (square) input image; must be divisible by ``patch_size``.
        patch_size: side of each square patch.
        in_channels: image channels.
        num_classes: number of output logits.
        dim: token width.
        depth: number of transformer blocks.
        heads: attention heads (must divide ``dim``).
        mlp_dim: hidden width of each block's MLP.
        dropout: dropout rate (attention, MLP, embeddings).

    ``forward`` maps ``(n, in_channels, image_size, image_size)`` to ``(n, num_classes)``.
    """

    def __init__(
        self,
        image_size: int = 32,
        patch_size: int = 4,
        in_channels: int = 3,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 4,
        heads: int = 4,
        mlp_dim: int = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if image_size % patch_size != 0:
            raise ValueError(f"image_size ({image_size}) must be divisible by {patch_size=}")
        num_patches = (image_size // patch_size) ** 2
        self.image_size, self.num_classes = image_size, num_classes
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_dim, dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(n, num_classes)`` for images ``(n, C, image_size, image_size)``."""
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # (n, patches, dim)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        h = self.drop(torch.cat([cls, tokens], dim=1) + self.pos_embed)
        h = self.norm(self.blocks(h))
        return self.head(h[:, 0])
