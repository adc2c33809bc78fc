"""The end-to-end benchmark's PyTorch workloads: real models, random data, fixed seeds.

Each builder takes the CUDA device and returns a Workload whose step() runs one step and returns
its loss (a tensor, a list of tensors, or None); the caller synchronizes the device around each
step. Models are built on the CPU from fixed seeds (identical weights under every allocator) and
moved to the device; nothing is downloaded (transformers models come from configs built here).

| name | what one step does |
|---|---|
| resnet50_train | torchvision ResNet-50, batch 64 at 224 px, bf16 autocast, SGD with momentum |
| gpt2_train | GPT-2 small (12 layers, 768 wide) from GPT2Config, batch 8 x 1024 tokens, bf16 autocast, AdamW |
| bert_infer_dynamic | BERT-base from BertConfig, inference, 8 forwards of random batch 1-32 x length 16-512, bf16 |
| resnet18_side_stream | ResNet-18 training, batch 64; each batch copied from pinned memory and normalized on a side stream, used on the main stream after record_stream |
| multi_model_streams | ResNet-18, a 4-layer Transformer encoder and an MLP, each training on its own CUDA stream; forwards, backwards and optimizer steps interleaved |
| llm_decode_kv | a GPT-style decoder (8 layers, 768 wide) written here, in bf16, batch 32: prefill 128 tokens, then 256 greedy tokens one at a time, each layer's KV cache grown with torch.cat |
| resnet50_varbatch_train | ResNet-50 training as resnet50_train, but each step's batch drawn from 16-96 |
| detection_varsize_train | torchvision Faster R-CNN (MobileNetV3-Large FPN, random weights), 4 images a step of random sizes 320-800 px with 1-8 random boxes each, SGD |
| seq2seq_random_len_train | nn.Transformer encoder-decoder (6+6 layers, 512 wide) with embeddings and an output layer over 32,000 tokens, batch 32, random source and target lengths 16-256 each step, bf16 autocast, AdamW |
| llm_generate_hf | GPT-2 small (12 layers, 768 wide) in bf16 through transformers' generate: batch 8, a random prompt of 16-256 tokens, 128 greedy tokens |
"""

import random

import torch
from torch import nn


class Workload:
    def __init__(self, description, step):
        self.description = description
        self.step = step


def _seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)


def _cuda_gen(device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _classifier_step(model, opt, loss_fn, x, y):
    """One training step of an image classifier under bf16 autocast; returns the loss."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = loss_fn(out.float(), y)
    loss.backward()
    opt.step()
    return loss


def _resnet50(device, size, next_batch, description):
    """ResNet-50 training whose step takes a batch of next_batch() images."""
    import torchvision

    _seed(0)
    model = torchvision.models.resnet50(weights=None).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = _cuda_gen(device, 1)

    def step():
        b = next_batch()
        x = torch.randn(b, 3, size, size, device=device, generator=g)
        y = torch.randint(0, 1000, (b,), device=device, generator=g)
        return _classifier_step(model, opt, loss_fn, x, y)

    return Workload(description, step)


def resnet50_train(device, batch=64, size=224):
    return _resnet50(device, size, lambda: batch,
                     f"torchvision resnet50, batch {batch}x{size}px, bf16 autocast, SGD")


def gpt2_train(device, batch=8, seq=1024):
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed(0)
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = _cuda_gen(device, 1)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device, generator=g)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    return Workload(f"GPT2LMHeadModel 12x768, batch {batch}x{seq} tokens, bf16 autocast, AdamW",
                    step)


def bert_infer_dynamic(device, forwards=8, max_batch=32, min_len=16, max_len=512):
    from transformers import BertConfig, BertModel

    _seed(0)
    cfg = BertConfig()  # BERT-base: 12 layers, 768 wide, 512 positions
    model = BertModel(cfg).to(device).eval()
    rng = random.Random(1)
    g = _cuda_gen(device, 1)

    def step():
        out = None
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(forwards):
                b = rng.randint(1, max_batch)
                n = rng.randint(min_len, max_len)
                ids = torch.randint(0, cfg.vocab_size, (b, n), device=device, generator=g)
                mask = torch.ones(b, n, dtype=torch.long, device=device)
                out = model(input_ids=ids, attention_mask=mask).last_hidden_state.float().mean()
        return out

    return Workload(f"BertModel base, inference, {forwards} forwards/step of random batch "
                    f"1-{max_batch} x length {min_len}-{max_len}, bf16 autocast", step)


def resnet18_side_stream(device, batch=64, size=224):
    import torchvision

    _seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # Two pinned host batches, alternated (a data loader's double buffer).
    host_x = [torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8).pin_memory()
              for _ in range(2)]
    host_y = [torch.randint(0, 1000, (batch,)).pin_memory() for _ in range(2)]
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    side = torch.cuda.Stream(device)
    main = torch.cuda.current_stream(device)
    state = {"i": 0, "next": None}

    def prefetch(i):
        # Allocated on the side stream (copy + normalization there), used on the main stream.
        side.wait_stream(main)  # the host buffer's previous copy and mean/std are ready
        with torch.cuda.stream(side):
            x = host_x[i % 2].to(device, non_blocking=True)
            x = (x.float() - mean) / std
            y = host_y[i % 2].to(device, non_blocking=True)
        return x, y

    def step():
        if state["next"] is None:
            state["next"] = prefetch(state["i"])
        main.wait_stream(side)
        x, y = state["next"]
        x.record_stream(main)  # freed on the main stream's timeline, not the side stream's
        y.record_stream(main)
        state["i"] += 1
        state["next"] = prefetch(state["i"])  # overlaps with this step's compute
        loss = _classifier_step(model, opt, loss_fn, x, y)
        del x, y
        return loss

    return Workload(f"torchvision resnet18, batch {batch}x{size}px, bf16 autocast, SGD; input "
                    "copy + normalization on a side stream, record_stream(main)", step)


class _Mlp(nn.Module):
    def __init__(self, d=2048, h=4096, depth=4):
        super().__init__()
        layers = []
        for i in range(depth):
            layers += [nn.Linear(d if i == 0 else h, h), nn.GELU()]
        layers.append(nn.Linear(h, d))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def multi_model_streams(device):
    import torchvision

    _seed(0)
    main = torch.cuda.current_stream(device)
    jobs = []

    def add(name, model, opt_cls, make_batch, loss_of):
        model = model.to(device)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(main)  # the weights were copied on the main stream
        jobs.append({"name": name, "model": model, "opt": opt_cls(model.parameters()),
                     "stream": stream, "make_batch": make_batch, "loss_of": loss_of})

    g = [_cuda_gen(device, s) for s in (1, 2, 3)]
    ce = nn.CrossEntropyLoss()
    add("resnet18", torchvision.models.resnet18(weights=None),
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
        lambda: (torch.randn(32, 3, 160, 160, device=device, generator=g[0]),
                 torch.randint(0, 1000, (32,), device=device, generator=g[0])),
        lambda out, y: ce(out.float(), y))
    add("transformer_encoder",
        nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 4,
                              enable_nested_tensor=False),
        lambda p: torch.optim.AdamW(p, lr=1e-4),
        lambda: (torch.randn(16, 256, 512, device=device, generator=g[1]), None),
        lambda out, y: out.float().pow(2).mean())
    add("mlp", _Mlp(), lambda p: torch.optim.AdamW(p, lr=1e-4),
        lambda: (torch.randn(512, 2048, device=device, generator=g[2]), None),
        lambda out, y: out.float().pow(2).mean())

    def step():
        losses = []
        for j in jobs:  # forwards, each on its own stream
            with torch.cuda.stream(j["stream"]):
                x, y = j["make_batch"]()
                j["opt"].zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = j["model"](x)
                j["loss"] = j["loss_of"](out, y)
                del x, y, out
        for j in jobs:  # backwards
            with torch.cuda.stream(j["stream"]):
                j["loss"].backward()
        for j in jobs:  # optimizer steps
            with torch.cuda.stream(j["stream"]):
                j["opt"].step()
                losses.append(j.pop("loss").detach())
        return losses

    return Workload("resnet18 (32x160px, SGD) + TransformerEncoder 4x512 (16x256, AdamW) + "
                    "MLP 2048-4096x4 (512, AdamW), one CUDA stream each, bf16 autocast", step)


class _Block(nn.Module):
    """A pre-LayerNorm GPT block whose attention keeps its own KV cache, grown with torch.cat
    by one token per decoding step (as transformers' DynamicCache does)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, cache):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        if cache:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        cache[:] = [k, v]
        # Causal within the new tokens; a single new token attends to the whole cache.
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class _Decoder(nn.Module):
    def __init__(self, vocab=50257, d=768, heads=12, layers=8, positions=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, caches, start):
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        for blk, cache in zip(self.blocks, caches):
            x = blk(x, cache)
        return self.head(self.ln(x[:, -1]))  # logits of the last position only


def llm_decode_kv(device, batch=32, prompt=128, new_tokens=256):
    _seed(0)
    model = _Decoder().to(device=device, dtype=torch.bfloat16).eval()
    g = _cuda_gen(device, 1)

    def step():
        with torch.inference_mode():
            ids = torch.randint(0, 50257, (batch, prompt), device=device, generator=g)
            caches = [[] for _ in model.blocks]
            tok = model(ids, caches, 0).argmax(-1, keepdim=True)  # prefill
            checksum = tok.sum()
            for i in range(new_tokens - 1):
                tok = model(tok, caches, prompt + i).argmax(-1, keepdim=True)
                checksum = checksum + tok.sum()
            del caches
        return checksum.float()

    return Workload(f"GPT-style decoder written here (8 layers, 768 wide, 12 heads, bf16), batch "
                    f"{batch}: prefill {prompt} tokens, then {new_tokens} greedy tokens, KV cache "
                    "grown by torch.cat each token", step)


def resnet50_varbatch_train(device, max_batch=96, min_batch=16, size=224):
    rng = random.Random(1)
    return _resnet50(device, size, lambda: rng.randint(min_batch, max_batch),
                     f"torchvision resnet50, random batch {min_batch}-{max_batch} each step x "
                     f"{size}px, bf16 autocast, SGD")


def detection_varsize_train(device, images=4, min_size=320, max_size=800, max_boxes=8):
    import torchvision

    _seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=min_size,
        max_size=max_size).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    rng = random.Random(1)
    g = _cuda_gen(device, 1)

    def box(h, w):
        x0, y0 = rng.uniform(0, w * 0.7), rng.uniform(0, h * 0.7)
        return [x0, y0, x0 + rng.uniform(16, w - x0), y0 + rng.uniform(16, h - y0)]

    def step():
        batch, targets = [], []
        for _ in range(images):
            h = rng.randrange(min_size, max_size + 1, 32)
            w = rng.randrange(min_size, max_size + 1, 32)
            batch.append(torch.rand(3, h, w, device=device, generator=g))
            n = rng.randint(1, max_boxes)
            targets.append({
                "boxes": torch.tensor([box(h, w) for _ in range(n)], device=device),
                "labels": torch.randint(1, 91, (n,), device=device, generator=g),
            })
        opt.zero_grad(set_to_none=True)
        loss = sum(model(batch, targets).values())
        loss.backward()
        opt.step()
        return loss

    return Workload(f"torchvision fasterrcnn_mobilenet_v3_large_fpn, {images} images/step of "
                    f"random sizes {min_size}-{max_size}px with 1-{max_boxes} boxes, SGD", step)


def seq2seq_random_len_train(device, batch=32, min_len=16, max_len=256, d=512, vocab=32000):
    _seed(0)
    model = nn.ModuleDict({
        "src": nn.Embedding(vocab, d),
        "tgt": nn.Embedding(vocab, d),
        "core": nn.Transformer(d_model=d, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                               dim_feedforward=4 * d, batch_first=True),
        "out": nn.Linear(d, vocab),
    }).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    rng = random.Random(1)
    g = _cuda_gen(device, 1)

    def step():
        s, t = rng.randint(min_len, max_len), rng.randint(min_len, max_len)
        src = torch.randint(0, vocab, (batch, s), device=device, generator=g)
        tgt = torch.randint(0, vocab, (batch, t + 1), device=device, generator=g)
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model["core"](model["src"](src), model["tgt"](tgt[:, :-1]), tgt_mask=mask,
                              tgt_is_causal=True)
            logits = model["out"](h)
        loss = loss_fn(logits.float().reshape(-1, vocab), tgt[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return Workload(f"nn.Transformer encoder-decoder 6+6x{d}, vocab {vocab}, batch {batch}, "
                    f"random source and target lengths {min_len}-{max_len}, bf16 autocast, AdamW",
                    step)


def llm_generate_hf(device, batch=8, min_prompt=16, max_prompt=256, new_tokens=128):
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed(0)
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(device=device, dtype=torch.bfloat16).eval()
    rng = random.Random(1)
    g = _cuda_gen(device, 1)

    def step():
        n = rng.randint(min_prompt, max_prompt)
        ids = torch.randint(0, cfg.vocab_size, (batch, n), device=device, generator=g)
        with torch.inference_mode():
            # min_new_tokens: random weights may emit the end token early; every step makes the
            # same number of tokens.
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=0)
        return out[:, -1].float().mean()

    return Workload(f"GPT2LMHeadModel 12x768 in bf16 through generate: batch {batch}, random "
                    f"prompt {min_prompt}-{max_prompt} tokens, {new_tokens} greedy tokens", step)


WORKLOADS = {
    "resnet50_train": resnet50_train,
    "gpt2_train": gpt2_train,
    "bert_infer_dynamic": bert_infer_dynamic,
    "resnet18_side_stream": resnet18_side_stream,
    "multi_model_streams": multi_model_streams,
    "llm_decode_kv": llm_decode_kv,
    "resnet50_varbatch_train": resnet50_varbatch_train,
    "detection_varsize_train": detection_varsize_train,
    "seq2seq_random_len_train": seq2seq_random_len_train,
    "llm_generate_hf": llm_generate_hf,
}
NAMES = list(WORKLOADS)


# The size each workload scales with, for capacity runs (tools/e2e/capacity.py).
SIZE_PARAM = {
    "resnet50_train": "batch",
    "gpt2_train": "batch",
    "bert_infer_dynamic": "max_batch",
    "resnet18_side_stream": "batch",
    "llm_decode_kv": "batch",
    "resnet50_varbatch_train": "max_batch",
    "detection_varsize_train": "images",
    "seq2seq_random_len_train": "batch",
    "llm_generate_hf": "batch",
}


def build(name, device, size=None):
    """Builds workload `name`; `size` sets its SIZE_PARAM (default: the workload's own)."""
    if name not in WORKLOADS:
        raise RuntimeError(f"unknown workload {name!r}; known: {', '.join(NAMES)}")
    if size is None:
        return WORKLOADS[name](device)
    if name not in SIZE_PARAM:
        raise RuntimeError(f"workload {name!r} has no size to vary")
    return WORKLOADS[name](device, **{SIZE_PARAM[name]: size})
