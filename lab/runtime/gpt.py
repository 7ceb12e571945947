"""The demo's real-size model: a decoder-only (GPT-style) transformer, and the token data it
learns: sequences drawn from a seeded Markov chain that the project generates itself (nothing
is downloaded).

The chain gives every token a few likely successors with fixed odds, so a model can learn it
and the best loss it can reach is known: the chain's entropy rate (`TokenData.floor`). Samples
are addressed by index, like the tiny model's, and sharded by global position the same way
(lab.runtime.demo.GlobalSampler): every sample of an epoch is trained once whatever the world
size does.

Sizes (`SIZES`): `gpt-small` (0.5M parameters, for quick drills and tests of the sharded path)
and `gpt-100m` (114M parameters: with AdamW its training state is 1.37 GB, sharded over the
ranks by FSDP2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    seq_len: int
    d_model: int
    n_layers: int
    n_heads: int
    # Tokens of one sample: seq_len inputs, each predicting the next one.

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model


SIZES = {  # the names of lab.vocab.models.GPT_SIZES
    "gpt-small": GPTConfig(vocab_size=256, seq_len=64, d_model=128, n_layers=2, n_heads=4),
    # A small vocabulary: each token's successors are seen often enough in tens of steps (of a
    # few sequences each, on a CPU) for the loss to fall; the parameters are the transformer's.
    "gpt-100m": GPTConfig(vocab_size=64, seq_len=64, d_model=768, n_layers=16, n_heads=12),
}


class Block(nn.Module):
    """Pre-norm attention and MLP, each added back to the residual stream."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.down(functional.gelu(self.up(self.ln2(x))))
        return out


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        # GPT-2's scaled init of the layers that write into the residual stream.
        for block in self.blocks:
            assert isinstance(block, Block)
            for layer in (block.proj, block.down):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of the next token at every position: (batch, seq, vocab)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def sample_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sample's mean next-token cross-entropy: (batch,)."""
    per_token = functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return per_token.view(targets.shape).mean(dim=1)


# Every token has this many likely successors, with these odds (the same for every token).
SUCCESSOR_ODDS = (0.5, 0.25, 0.15, 0.1)


@dataclass(frozen=True)
class TokenData:
    """`size` sequences of `seq_len + 1` tokens from a seeded Markov chain: sample i is
    inputs `tokens[i, :-1]` and targets `tokens[i, 1:]`. The same on every rank."""

    tokens: torch.Tensor  # (size, seq_len + 1), int64

    @classmethod
    def generate(cls, size: int, seq_len: int, vocab_size: int, seed: int) -> TokenData:
        g = torch.Generator().manual_seed(seed)
        odds = torch.tensor(SUCCESSOR_ODDS)
        successors = torch.randint(0, vocab_size, (vocab_size, len(SUCCESSOR_ODDS)), generator=g)
        out = torch.empty(size, seq_len + 1, dtype=torch.int64)
        out[:, 0] = torch.randint(0, vocab_size, (size,), generator=g)
        for t in range(seq_len):
            choice = torch.multinomial(odds, size, replacement=True, generator=g)
            out[:, t + 1] = successors[out[:, t], choice]
        return cls(out)

    @staticmethod
    def floor() -> float:
        """The chain's entropy rate in nats: no model's mean loss can go below it (a token
        whose successors coincide makes it a little lower still)."""
        return -sum(p * math.log(p) for p in SUCCESSOR_ODDS)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.tokens[indices]
        return rows[:, :-1], rows[:, 1:]
