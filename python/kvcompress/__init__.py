# SPDX-License-Identifier: Apache-2.0
"""kvcompress for PyTorch: DeepSeek V4.1's KV-cache compressor ops as ``torch.ops.kvcompress``.

    import kvcompress
    kvcompress.fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping,
                                        query_start_loc, token_to_req_indices, rms_norm_weight,
                                        rms_norm_eps, compress_ratio, latent_out)
    kvcompress.rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping,
                                 compress_ratio, fp8_scale=None)
    kvcompress.fused_compress_insert(...)   # both in one launch

    import kvcompress.vllm; kvcompress.vllm.patch()   # vLLM's V4.1 ops -> these

The first two have vLLM V4.1's signatures; ``pdl`` (and the fused op's extras) are keyword
arguments with defaults. The ops are registered with schemas that state what they write, fake
implementations, and CUDA implementations, so ``torch.compile(fullgraph=True)`` traces them
and CUDA graphs capture them. See python/README.md.

Importing this package needs no torch (``available()`` is then False and the ops raise
ImportError); the vLLM swap's checks and the signatures work without it.
"""
from ._ops import (  # noqa: F401
    available,
    fused_compress_insert,
    fused_save_compress_norm,
    load_error,
    rope_quant_insert,
)
from ._version import __version__  # noqa: F401

__all__ = [
    "available",
    "fused_compress_insert",
    "fused_save_compress_norm",
    "load_error",
    "rope_quant_insert",
]
