# SPDX-License-Identifier: Apache-2.0
"""05_torch_op: the kvcompress torch package in a serving step (install it first:
`pip install --no-build-isolation python/` from the repository root).

One decode step of 4 requests at compress ratio 2: Op A pools each closing pair into a latent
row and saves the step's rows in the ring; Op B rotates, quantizes and writes the 584-byte
fp8_ds_mla records. The same step compiled with torch.compile(fullgraph=True) and replayed
from a CUDA graph gives the same bytes; the fused op gives them in one launch.

    python3 examples/05_torch_op/example.py
"""
import sys

import torch

import kvcompress

D, C, B = 512, 8, 64  # head dim, ring capacity, records per cache page


def main():
    if not torch.cuda.is_available():
        print("no CUDA device, skipping")
        return 0
    dev = "cuda"
    g = torch.Generator().manual_seed(0)
    reqs, tokens_each = 4, 2
    T = reqs * tokens_each
    start = torch.tensor([7, 11, 101, 33])  # odd: each step's first token closes a group
    positions = (start[:, None] + torch.arange(tokens_each)).flatten()
    req = torch.arange(reqs, dtype=torch.int32).repeat_interleave(tokens_each)
    blocks = torch.tensor([3, 0, 2, 1]).repeat_interleave(tokens_each)
    x = dict(
        kv_score=torch.randn(T + 2, 2 * D, generator=g).to(dev),  # 2 rows of padding
        positions=torch.cat([positions, torch.zeros(2, dtype=torch.long)]).to(dev),
        # vLLM pads each ring page to 8208 floats (C rows of 2 * D, plus 16).
        state_cache=torch.zeros(reqs, C * 2 * D + 16, device=dev)[:, : C * 2 * D].unflatten(1, (C, 2 * D)),
        slot_mapping=(blocks * C + positions % C).to(dev),  # numel() = T: the step's tokens
        query_start_loc=torch.arange(0, T + 1, tokens_each, dtype=torch.int32).to(dev),
        token_to_req_indices=req.to(dev),
        rms_norm_weight=torch.ones(D, dtype=torch.bfloat16, device=dev),
        latent_out=torch.zeros(T + 2, D, dtype=torch.bfloat16, device=dev),
        cos_sin_cache=torch.randn(4096, 64, generator=g).to(dev),
        # fp8_ds_mla pages, page stride padded to a multiple of 576 bytes as vLLM does.
        kv_cache=torch.zeros(8, 37440, dtype=torch.uint8, device=dev)[:, : B * 584].unflatten(1, (B, 584)),
        cache_slots=(torch.arange(T) * 3).to(dev),
    )

    def step(x):
        kvcompress.fused_save_compress_norm(
            x["kv_score"], x["positions"], x["state_cache"], x["slot_mapping"],
            x["query_start_loc"], x["token_to_req_indices"], x["rms_norm_weight"], 1e-20, 2,
            x["latent_out"])
        kvcompress.rope_quant_insert(x["latent_out"], x["positions"], x["cos_sin_cache"],
                                     x["kv_cache"], x["cache_slots"], 2)

    def outputs():
        return [x[k].clone() for k in ("latent_out", "state_cache", "kv_cache")]

    def reset():
        for k in ("latent_out", "state_cache", "kv_cache"):
            x[k].zero_()

    step(x)
    eager = outputs()
    reset()
    torch.compile(step, fullgraph=True)(x)
    same_compiled = all(torch.equal(a, b) for a, b in zip(outputs(), eager))
    reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(x)
    reset()
    graph.replay()
    same_graph = all(torch.equal(a, b) for a, b in zip(outputs(), eager))
    reset()
    kvcompress.fused_compress_insert(
        x["kv_score"], x["positions"], x["state_cache"], x["slot_mapping"],
        x["query_start_loc"], x["token_to_req_indices"], x["rms_norm_weight"], 1e-20, 2,
        x["cos_sin_cache"], x["kv_cache"], x["cache_slots"], latent_out=x["latent_out"])
    same_fused = all(torch.equal(a, b) for a, b in zip(outputs(), eager))
    written = int((eager[0].view(torch.int16) != 0).any(1).sum())
    print(f"latent rows written: {written} (one per request); torch.compile == eager: "
          f"{same_compiled}; CUDA graph == eager: {same_graph}; fused == two ops: {same_fused}")
    return 0 if same_compiled and same_graph and same_fused and written == reqs else 1


if __name__ == "__main__":
    sys.exit(main())
