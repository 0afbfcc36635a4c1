"""Fine-tune the verifier cross-encoder on the prepared training pairs.

Input ``[CLS] a [SEP] b [SEP]`` with token_type_ids (``tokenizer.encode(a, b)``), at most 64
tokens, BCE loss, AdamW (lr 4e-5, wd 0.01), batch 32, linear warmup (5%) + linear decay over
``--epochs`` (each reshuffled), length-bucketed dynamic padding. Checkpoints ``mid.pt`` (half
way) and ``final.pt``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from training.verifier.common import CACHE, MAX_TOKENS, RUNS, SEED, Progress, read_pairs
from training.verifier.model import base_model_dir, build


def make_tokenizer(path: Path | None = None, max_tokens: int = MAX_TOKENS) -> Tokenizer:
    """The MiniLM WordPiece tokenizer with truncation at 64 and no padding (the shipped
    tokenizer.json pads to 128 by default)."""
    tok = Tokenizer.from_file(str(path or base_model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_tokens)
    return tok


def encode(tok: Tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    encs = tok.encode_batch(pairs)
    return [(e.ids, e.type_ids) for e in encs]


def collate(items: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, ...]:
    n = max(len(ids) for ids, _ in items)
    ids = np.zeros((len(items), n), dtype=np.int64)
    tt = np.zeros((len(items), n), dtype=np.int64)
    am = np.zeros((len(items), n), dtype=np.int64)
    for i, (x, t) in enumerate(items):
        ids[i, : len(x)] = x
        tt[i, : len(t)] = t
        am[i, : len(x)] = 1
    return torch.from_numpy(ids), torch.from_numpy(am), torch.from_numpy(tt)


def bucketed_batches(
    lengths: list[int], batch: int, rng: random.Random, mega: int = 50
) -> list[list[int]]:
    """Shuffle, sort by length within windows of ``mega`` batches, cut into batches, shuffle
    the batch order: little padding, still random."""
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    out: list[list[int]] = []
    w = batch * mega
    for s in range(0, len(idx), w):
        window = sorted(idx[s : s + w], key=lambda i: lengths[i])
        out.extend(window[j : j + batch] for j in range(0, len(window), batch))
    rng.shuffle(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--train", type=Path, default=CACHE / "train.jsonl")
    ap.add_argument("--out", type=Path, default=RUNS / "full")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N pairs (smoke)")
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1, help="passes over the file, each reshuffled")
    ap.add_argument("--warmup", type=float, default=0.05)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--time-budget-min",
        type=float,
        default=0.0,
        help="stop (and save final.pt, marked partial) after this many minutes",
    )
    ap.add_argument("--head", choices=("pooler", "cls"), default="pooler")
    ap.add_argument(
        "--init",
        type=Path,
        default=None,
        help="start from this checkpoint's weights (a final.pt) instead of the base model: "
        "more epochs with a fresh schedule",
    )
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument(
        "--device", default="cpu", help="torch device: cpu, or cuda on a GPU machine (TF32 on)"
    )
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument(
        "--freeze-layers",
        type=int,
        default=-1,
        help="freeze the embeddings and the first N encoder layers (-1: train everything); "
        "on a shared 2-core machine this roughly halves the cost of a step",
    )
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    pairs = read_pairs(args.train)
    if args.limit:
        pairs = pairs[: args.limit]
    tok = make_tokenizer(max_tokens=args.max_tokens)
    t0 = time.monotonic()
    enc = encode(tok, [(p.a, p.b) for p in pairs])
    labels = [1.0 if p.duplicate else 0.0 for p in pairs]
    lengths = [len(x) for x, _ in enc]
    print(
        f"[train] {len(pairs)} pairs tokenised in {time.monotonic() - t0:.1f}s, "
        f"mean len {np.mean(lengths):.1f}, truncated {sum(n >= MAX_TOKENS for n in lengths)}",
        flush=True,
    )
    batches = [b for _ in range(args.epochs) for b in bucketed_batches(lengths, args.batch, rng)]
    steps = len(batches)
    warm = max(1, int(steps * args.warmup))

    model = build(pretrained=True, head=args.head)
    if args.init is not None:
        model.load_state_dict(torch.load(args.init, map_location="cpu", weights_only=True)["model"])
    model.to(device)
    model.train()
    if args.freeze_layers >= 0:
        frozen = [model.bert.embeddings, *model.bert.encoder.layer[: args.freeze_layers]]
        for module in frozen:
            for prm in module.parameters():
                prm.requires_grad_(False)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trainable if p.ndim >= 2]
    no_decay = [p for n, p in trainable if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
    )

    budget = args.time_budget_min * 60

    def lr_at(step: int) -> float:
        # Linear decay over whichever runs out first, the steps or the time budget, so a run
        # cut by the budget still ends at a low learning rate instead of mid-schedule.
        if step < warm:
            return (step + 1) / warm
        frac = (step - warm) / max(1, steps - warm)
        if budget:
            frac = max(frac, (time.monotonic() - start) / budget)
        return max(0.02, 1.0 - frac)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    prog = Progress("train", steps, every=30.0)
    n_seen, partial = 0, False
    ema = torch.zeros((), device=device)
    start = time.monotonic()
    meta = {
        "steps": steps,
        "pairs": len(pairs),
        "lr": args.lr,
        "batch": args.batch,
        "epochs": args.epochs,
        "warmup_steps": warm,
        "weight_decay": args.weight_decay,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "head_input": args.head,
        "freeze_layers": args.freeze_layers,
        "init": str(args.init) if args.init else "base model",
        "device": args.device,
        "head": "dropout 0.1 + linear on "
        + ("BERT pooler output (tanh dense on [CLS])" if args.head == "pooler" else "[CLS]"),
    }

    def save(name: str, step: int) -> None:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save({"model": state, "step": step, "meta": meta}, args.out / name)
        print(f"[train] saved {args.out / name} at step {step}", flush=True)

    for step, b in enumerate(batches):
        ids, am, tt = (x.to(device) for x in collate([enc[i] for i in b]))
        y = torch.tensor([[labels[i]] for i in b], device=device)
        logits = model(ids, am, tt)
        loss = loss_fn(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trainable], 1.0)
        opt.step()
        sched.step()
        # The loss stays a tensor between progress lines: reading it every step would make
        # a GPU wait for each step before the next is queued.
        ema = loss.detach() if step == 0 else 0.98 * ema + 0.02 * loss.detach()
        n_seen += len(b)
        el = time.monotonic() - start
        if step % 50 == 0 or step + 1 == steps:
            run_loss = float(ema)
            prog.update(
                step + 1,
                extra=f"loss {run_loss:.4f} lr {sched.get_last_lr()[0]:.2e} "
                f"pairs/s {n_seen / max(el, 1e-9):.1f}",
            )
        if step + 1 == steps // 2:
            save("mid.pt", step + 1)
        if step + 1 == steps // 4 or step + 1 == (3 * steps) // 4:
            save("ckpt.pt", step + 1)
        if budget and el > budget and step + 1 < steps:
            print(f"[train] time budget reached at step {step + 1}/{steps}", flush=True)
            partial = True
            break
    run_loss = float(ema)
    meta.update(
        {"partial": partial, "seconds": time.monotonic() - start, "final_loss_ema": run_loss}
    )
    save("final.pt", step + 1)
    (args.out / "train_meta.json").write_text(json.dumps(meta, indent=2))
    print(
        f"[train] done in {(time.monotonic() - start) / 60:.1f} min "
        f"({n_seen / (time.monotonic() - start):.1f} pairs/s)",
        flush=True,
    )
    return 0 if not math.isnan(run_loss) else 1


if __name__ == "__main__":
    raise SystemExit(main())
