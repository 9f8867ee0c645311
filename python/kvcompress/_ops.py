# SPDX-License-Identifier: Apache-2.0
"""The Python entry points of torch.ops.kvcompress (schemas and CUDA code in csrc/ops.cpp).

Each wrapper passes its arguments to the registered op unchanged (after plain int / float /
bool conversion of the scalars), so argument checking happens once, in C++: a wrong dtype
raises TypeError, a wrong shape, stride, device or value ValueError, each naming the argument;
nothing is written then. Sizes follow vLLM: num_tokens = slot_mapping.numel(), and the token
tensors (kv_score, positions, token_to_req_indices, latent) may hold more rows, which are
neither read as tokens nor written; num_tokens == 0 is a no-op.
"""
try:
    import torch
except ImportError:  # the package still imports: kvcompress.vllm and the signatures work
    torch = None

_LOAD_ERROR = None
if torch is None:
    _LOAD_ERROR = ImportError("kvcompress: the ops need torch, which is not installed")
else:
    try:
        from . import _C  # noqa: F401  (registers torch.ops.kvcompress.*)
    except ImportError as e:
        _LOAD_ERROR = ImportError(
            "kvcompress: the compiled ops (kvcompress._C) are missing: install the package "
            "with `pip install --no-build-isolation python/` from the repository root, and "
            "import the installed package rather than the source folder python/kvcompress "
            f"({e})")
    else:
        from . import _fake  # noqa: F401  (fake implementations for torch.compile)


def available():
    """True when torch is installed and the compiled ops are loaded."""
    return _LOAD_ERROR is None


def load_error():
    """Why the ops are not available (an ImportError), or None."""
    return _LOAD_ERROR


def _fail():
    raise _LOAD_ERROR


def fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                             token_to_req_indices, rms_norm_weight, rms_norm_eps,
                             compress_ratio, latent_out, *, pdl=True):
    """Op A (contract §1): gated pooling of every ``compress_ratio`` tokens, RMSNorm, ring update.

    num_tokens T = ``slot_mapping.numel()``. kv_score [>= T, 2*512] (ratio > 1: kv then score)
    or [>= T, 512] (ratio 1), float32 or bfloat16, rows contiguous, row stride from the tensor;
    positions [>= T] int64 or int32; state_cache [num_blocks, C, 2*512] of kv_score's dtype,
    page and row strides from the tensor (vLLM pads pages); at ratio 1 it, query_start_loc and
    token_to_req_indices are ignored (None is fine); slot_mapping [T] ring slots
    (block * C + position % C), -1 = padding, int64 or int32; query_start_loc [num_reqs+1]
    int32; token_to_req_indices [>= T] int32; rms_norm_weight [512] bfloat16; latent_out
    [>= T, 512] bfloat16: only the rows of tokens that close a group are written.
    ``pdl``: launch with programmatic dependent launch (sm_90+). Returns None.
    """
    if _LOAD_ERROR is not None:
        _fail()
    torch.ops.kvcompress.fused_save_compress_norm(
        kv_score, positions, state_cache, slot_mapping, query_start_loc, token_to_req_indices,
        rms_norm_weight, float(rms_norm_eps), int(compress_ratio), latent_out, bool(pdl))


def rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
                      fp8_scale=None, *, cache_layout=None, pdl=True):
    """Op B (contract §2): GPT-J RoPE on the last 64 dims at the group's first position,
    quantize, write one record per closing token with ``slot_mapping >= 0`` (page = slot // B).

    num_tokens T = ``slot_mapping.numel()``. latent [>= T, 512] bfloat16 ([>= T, 576] for
    fp8_ds_mla_v32); positions [>= T] int64 or int32; cos_sin_cache [max_pos, 64] float32 or
    bfloat16 (32 cos then 32 sin); kv_cache, whose dtype selects the layout: uint8 [pages, B, 584] fp8_ds_mla (page stride
    from the tensor, e.g. padded to a multiple of 576), bfloat16 [pages, B, 512] rows, or
    float8_e4m3fn [pages, B, 512] rows divided by ``fp8_scale`` (a 1-element float32 CUDA
    tensor, required then); a uint8 cache whose last dim is 528 is MXFP8, 288 page-segregated
    NVFP4 and 656 DeepSeek V3.2's fp8_ds_mla (head dim 576, compress_ratio 1 only), as vLLM
    selects them. ``cache_layout`` (keyword) names the layout instead:
    "fp8_ds_mla", "mxfp8", "nvfp4", "nvfp4_rows" (uint8 [pages, B, >= 288], 288-byte rows),
    "bf16_rows", "fp8_rows", "fp8_ds_mla_v32" (uint8 [pages, B, >= 656] rows). slot_mapping
    [T] int64 or int32; slots past pages * B are skipped. Returns None.
    """
    if _LOAD_ERROR is not None:
        _fail()
    torch.ops.kvcompress.rope_quant_insert(latent, positions, cos_sin_cache, kv_cache,
                                           slot_mapping, int(compress_ratio), fp8_scale,
                                           cache_layout, bool(pdl))


def fused_compress_insert(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                          token_to_req_indices, rms_norm_weight, rms_norm_eps, compress_ratio,
                          cos_sin_cache, kv_cache, kv_slot_mapping, latent_out=None,
                          fp8_scale=None, *, cache_layout=None, pdl=True):
    """Op A then Op B in one launch (contract §3), bit-identical to the two ops.

    The first nine arguments are fused_save_compress_norm's (slot_mapping = ring slots, and
    num_tokens T = its numel), then rope_quant_insert's cos_sin_cache, kv_cache and
    kv_slot_mapping ([>= T] cache slots); latent_out [>= T, 512] bfloat16 is optional (None:
    no latent written). Every layout but fp8_ds_mla_v32 (V3.2 compresses nothing). Returns None.
    """
    if _LOAD_ERROR is not None:
        _fail()
    torch.ops.kvcompress.fused_compress_insert(
        kv_score, positions, state_cache, slot_mapping, query_start_loc, token_to_req_indices,
        rms_norm_weight, float(rms_norm_eps), int(compress_ratio), cos_sin_cache, kv_cache,
        kv_slot_mapping, latent_out, fp8_scale, cache_layout, bool(pdl))
