# SPDX-License-Identifier: Apache-2.0
"""Fake (meta) implementations of torch.ops.kvcompress, for torch.compile and FakeTensorMode.

The ops write in place and return nothing (their schemas mark what they write), so a fake
implementation only has to return None; the CUDA implementation checks the arguments when
the compiled graph runs.
"""
import torch


@torch.library.register_fake("kvcompress::fused_save_compress_norm")
def _fused_save_compress_norm_fake(kv_score, positions, state_cache, slot_mapping,
                                   query_start_loc, token_to_req_indices, rms_norm_weight,
                                   rms_norm_eps, compress_ratio, latent_out, pdl=True):
    return None


@torch.library.register_fake("kvcompress::rope_quant_insert")
def _rope_quant_insert_fake(latent, positions, cos_sin_cache, kv_cache, slot_mapping,
                            compress_ratio, fp8_scale=None, cache_layout=None, pdl=True):
    return None


@torch.library.register_fake("kvcompress::fused_compress_insert")
def _fused_compress_insert_fake(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                                token_to_req_indices, rms_norm_weight, rms_norm_eps,
                                compress_ratio, cos_sin_cache, kv_cache, kv_slot_mapping,
                                latent_out=None, fp8_scale=None, cache_layout=None, pdl=True):
    return None
