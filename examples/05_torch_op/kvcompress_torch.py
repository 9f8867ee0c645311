# SPDX-License-Identifier: Apache-2.0
"""kvcompress as PyTorch ops, built just in time (examples/05_torch_op).

    import kvcompress_torch as kvt          # with examples/05_torch_op on sys.path
    kvt.load()                              # first call compiles (ninja, ~3 min cold), then cached
    kvt.fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping,
                                 query_start_loc, token_to_req_indices, rms_norm_weight,
                                 rms_norm_eps, compress_ratio, latent_out)
    kvt.rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping,
                          compress_ratio, fp8_scale=None)

The argument orders, dtypes and shapes are those of vLLM's DeepSeek V4.1 compressor
(``fused_save_compress_norm`` and ``rope_quant_insert``); every op works in place on the
current CUDA stream, validates its arguments first and raises TypeError (wrong dtype),
ValueError (wrong shape, stride, device or value) or RuntimeError (CUDA error) with a
message naming the argument. Every op also takes the keyword ``pdl`` (default True): it is
launched with programmatic dependent launch on sm_90+ (ignored below), so in a CUDA graph or
a busy stream its blocks are scheduled while the previous kernel finishes, and they wait for
it before touching memory — the same results, without the launch gap between kernels
(``kvc::LaunchOptions::pdl``). A kernel you launch after ours with the PDL attribute must
wait (``cudaGridDependencySynchronize``) before reading what ours wrote, as PDL requires.
The cache dtype selects the layout:

* uint8 ``[pages, B, 584]``: fp8_ds_mla (per page B*576 value bytes, then B*8 scale bytes;
  page stride = ``kv_cache.stride(0)`` bytes, may be padded);
* bfloat16 ``[pages, B, 512]``: plain bf16 rows;
* float8_e4m3fn ``[pages, B, 512]``: plain e4m3 rows scaled by ``fp8_scale`` (a 1-element
  float32 CUDA tensor, required then).

Environment: ``KVC_TORCH_ARCH`` (e.g. ``90``, ``90a``, ``100a``) overrides the architecture
(default: the current GPU's); ``KVC_TORCH_BUILD_DIR`` the build directory (default: torch's
extension cache); ``MAX_JOBS`` ninja's parallelism (torch's default is the CPU count).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
INCLUDE = REPO / "include"
# One op per translation unit (88 kernel instances in all, head dim 512 only), so that
# ninja compiles the three .cu files in parallel.
SOURCES = ["bindings.cpp", "compress_op.cu", "insert_op.cu", "fused_op.cu"]
EXTENSION_NAME = "kvcompress_torch_ops"

_module = None
_lock = threading.Lock()


def _arch() -> str:
    arch = os.environ.get("KVC_TORCH_ARCH")
    if arch:
        return arch.strip()
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}{minor}"
    return "90"


def cuda_flags(arch: Optional[str] = None) -> list:
    arch = arch or _arch()
    return [
        "-O3",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        # An explicit -gencode also stops torch from adding its own TORCH_CUDA_ARCH_LIST.
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
    ]


def load(verbose: bool = False):
    """Builds (first call, or after a source change) and imports the extension; cached."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            from torch.utils.cpp_extension import load as _load

            build_dir = os.environ.get("KVC_TORCH_BUILD_DIR")
            if build_dir:
                os.makedirs(build_dir, exist_ok=True)
            _module = _load(
                name=EXTENSION_NAME,
                sources=[str(HERE / s) for s in SOURCES],
                extra_cflags=["-O3", "-std=c++17"],
                extra_cuda_cflags=cuda_flags(),
                extra_include_paths=[str(INCLUDE), str(HERE)],
                build_directory=build_dir,
                verbose=verbose,
            )
    return _module


def fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                             token_to_req_indices, rms_norm_weight, rms_norm_eps,
                             compress_ratio, latent_out, *, pdl=True):
    """Op A (contract §1): gated pooling of every ``compress_ratio`` tokens, RMSNorm, ring update.

    kv_score [T, 2*512] (ratio > 1: kv then score) or [T, 512] (ratio 1), float32 or
    bfloat16; positions [T] int64 (or int32); state_cache [num_blocks, C, 2*512] of
    kv_score's dtype, strides from the tensor (None allowed at ratio 1); slot_mapping [T]
    ring slots, -1 = padding; query_start_loc [num_reqs+1] int32; token_to_req_indices [T]
    int32; rms_norm_weight [512] bfloat16; latent_out [T, 512] bfloat16: only the rows of
    tokens that close a group are written. Returns None.
    """
    load().fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping,
                                    query_start_loc, token_to_req_indices, rms_norm_weight,
                                    float(rms_norm_eps), int(compress_ratio), latent_out,
                                    bool(pdl))


def rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
                      fp8_scale=None, *, pdl=True):
    """Op B (contract §2): GPT-J RoPE on the last 64 dims at the group's first position, quantize,
    write one record per closing token with ``slot_mapping >= 0`` (page = slot // B).

    latent [T, 512] bfloat16; positions [T] int64; cos_sin_cache [max_pos, 64] float32 or
    bfloat16 (32 cos then 32 sin); kv_cache uint8 [pages, B, 584] / bfloat16 [pages, B, 512] /
    float8_e4m3fn [pages, B, 512]; slot_mapping [T] int64; fp8_scale: 1-element float32
    CUDA tensor for a float8_e4m3fn cache. Returns None.
    """
    load().rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping,
                             int(compress_ratio), fp8_scale, bool(pdl))


def fused_compress_insert(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                          token_to_req_indices, rms_norm_weight, rms_norm_eps, compress_ratio,
                          cos_sin_cache, kv_cache, kv_slot_mapping, latent_out=None,
                          fp8_scale=None, *, pdl=True):
    """Op A then Op B in one launch (contract §3), bit-identical to the two ops.

    The first nine arguments are fused_save_compress_norm's (slot_mapping = ring slots), then
    rope_quant_insert's cos_sin_cache, kv_cache and kv_slot_mapping (cache slots);
    latent_out [T, 512] bfloat16 is optional (None: no latent written). Returns None.
    """
    load().fused_compress_insert(kv_score, positions, state_cache, slot_mapping,
                                 query_start_loc, token_to_req_indices, rms_norm_weight,
                                 float(rms_norm_eps), int(compress_ratio), cos_sin_cache,
                                 kv_cache, kv_slot_mapping, latent_out, fp8_scale, bool(pdl))
