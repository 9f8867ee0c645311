# SPDX-License-Identifier: Apache-2.0
"""The package's pure-Python surface: runs without torch, a GPU or a build (CI)."""
import inspect

import kvcompress
import kvcompress.vllm

# vLLM V4.1's signatures (vllm/models/deepseek_v4_1/common/ops/fused_compress_quant_cache.py),
# written out as parameter names and defaults.
VLLM = {
    "fused_save_compress_norm": [
        ("kv_score", None), ("positions", None), ("state_cache", None), ("slot_mapping", None),
        ("query_start_loc", None), ("token_to_req_indices", None), ("rms_norm_weight", None),
        ("rms_norm_eps", None), ("compress_ratio", None), ("latent_out", None)],
    "rope_quant_insert": [
        ("latent", None), ("positions", None), ("cos_sin_cache", None), ("kv_cache", None),
        ("slot_mapping", None), ("compress_ratio", None), ("fp8_scale", ("default", None))],
}


def positional(fn):
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY:
            continue
        assert p.kind is p.POSITIONAL_OR_KEYWORD, p
        out.append((p.name, None if p.default is p.empty else ("default", p.default)))
    return out


def keyword_only(fn):
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is p.KEYWORD_ONLY}


def test_vllm_signatures():
    for name, params in VLLM.items():
        assert positional(getattr(kvcompress, name)) == params, name
        want = {"pdl": True}
        if name == "rope_quant_insert":
            want["cache_layout"] = None  # None: chosen from the cache tensor's record size
        assert keyword_only(getattr(kvcompress, name)) == want, name


def test_fused_signature():
    fn = kvcompress.fused_compress_insert
    names = [n for n, _ in positional(fn)]
    assert names[:9] == [n for n, _ in VLLM["fused_save_compress_norm"][:9]]
    assert names[9:] == ["cos_sin_cache", "kv_cache", "kv_slot_mapping", "latent_out",
                         "fp8_scale"]
    assert keyword_only(fn) == {"cache_layout": None, "pdl": True}


def test_signature_check_accepts_vllm_and_rejects_changes():
    def theirs(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
               fp8_scale=None):
        pass

    def renamed(latent, pos, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
                fp8_scale=None):
        pass

    def more(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
             fp8_scale=None, scale_format="ue8m0"):
        pass

    def later_pdl(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
                  fp8_scale=None, *, pdl=True):
        pass

    ours = kvcompress.rope_quant_insert
    check = kvcompress.vllm.signature_mismatch
    assert check(theirs, ours) is None
    assert check(later_pdl, ours) is None
    assert "pos," in check(renamed, ours)
    assert "scale_format" in check(more, ours)


def test_ops_without_their_library_raise_importerror():
    if kvcompress.available():
        return  # the installed package: the op tests cover it
    err = kvcompress.load_error()
    assert isinstance(err, ImportError)
    try:
        kvcompress.rope_quant_insert(None, None, None, None, None, 2)
    except ImportError as e:
        assert e is err
    else:
        raise AssertionError("no ImportError")
