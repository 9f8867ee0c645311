# SPDX-License-Identifier: Apache-2.0
"""kvcompress.vllm.patch() against a stub vLLM package tree (vLLM itself is not installable
here): the module path of vLLM's V4.1 ops, a compressor and an attention module that import
the two names, as vLLM's do. Needs no torch."""
import importlib.util
import sys
import textwrap

import pytest

import kvcompress
import kvcompress.vllm as kv_vllm

OPS = "vllm.models.deepseek_v4_1.common.ops.fused_compress_quant_cache"

VLLM_OPS_SOURCE = '''
def fused_save_compress_norm(kv_score, positions, state_cache, slot_mapping, query_start_loc,
                             token_to_req_indices, rms_norm_weight, rms_norm_eps,
                             compress_ratio, latent_out):
    return "vllm A"


def rope_quant_insert(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
                      fp8_scale=None):
    return "vllm B"
'''

COMPRESSOR_SOURCE = '''
from vllm.models.deepseek_v4_1.common.ops.fused_compress_quant_cache import (
    fused_save_compress_norm,
    rope_quant_insert,
)
'''

ATTENTION_SOURCE = '''
from vllm.models.deepseek_v4_1.common.ops.fused_compress_quant_cache import (
    rope_quant_insert as _insert,
)
'''


def write_tree(root, ops_source=VLLM_OPS_SOURCE, with_v41=True):
    files = {"vllm/__init__.py": "", "vllm/models/__init__.py": ""}
    if with_v41:
        files.update({
            "vllm/models/deepseek_v4_1/__init__.py": "",
            "vllm/models/deepseek_v4_1/common/__init__.py": "",
            "vllm/models/deepseek_v4_1/common/ops/__init__.py": "",
            "vllm/models/deepseek_v4_1/common/ops/fused_compress_quant_cache.py": ops_source,
            "vllm/models/deepseek_v4_1/compressor.py": COMPRESSOR_SOURCE,
            "vllm/models/deepseek_v4_1/attention.py": ATTENTION_SOURCE,
        })
    for path, text in files.items():
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))


@pytest.fixture
def stub(tmp_path, monkeypatch):
    """Yields a function that writes a stub tree and puts it on sys.path; cleans up after."""
    def make(**kw):
        write_tree(tmp_path, **kw)
        monkeypatch.syspath_prepend(str(tmp_path))
        return tmp_path

    def forget():
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]

    forget()
    yield make
    forget()


def test_patch_swaps_every_binding_and_unpatch_restores(stub):
    stub()
    import vllm.models.deepseek_v4_1.attention as attention  # loaded before the patch
    ops = sys.modules[OPS]
    vllm_a, vllm_b = ops.fused_save_compress_norm, ops.rope_quant_insert

    replaced = kv_vllm.patch()

    compressor = sys.modules["vllm.models.deepseek_v4_1.compressor"]  # imported by patch()
    assert ops.fused_save_compress_norm is kvcompress.fused_save_compress_norm
    assert ops.rope_quant_insert is kvcompress.rope_quant_insert
    assert compressor.fused_save_compress_norm is kvcompress.fused_save_compress_norm
    assert compressor.rope_quant_insert is kvcompress.rope_quant_insert
    assert attention._insert is kvcompress.rope_quant_insert
    assert replaced == {
        f"{OPS}.fused_save_compress_norm": vllm_a,
        f"{OPS}.rope_quant_insert": vllm_b,
        "vllm.models.deepseek_v4_1.compressor.fused_save_compress_norm": vllm_a,
        "vllm.models.deepseek_v4_1.compressor.rope_quant_insert": vllm_b,
        "vllm.models.deepseek_v4_1.attention._insert": vllm_b,
    }
    # A module imported after the swap gets ours from the ops module.
    assert kv_vllm.patch() == {}  # a second call changes nothing

    kv_vllm.unpatch(replaced)
    assert ops.fused_save_compress_norm is vllm_a and ops.rope_quant_insert is vllm_b
    assert compressor.rope_quant_insert is vllm_b and attention._insert is vllm_b
    assert ops.rope_quant_insert(*range(6)) == "vllm B"


def test_patch_refuses_a_changed_signature_and_changes_nothing(stub):
    changed = VLLM_OPS_SOURCE.replace("compress_ratio, latent_out):",
                                      "compress_ratio, latent_out, pdl=False):")
    stub(ops_source=changed)
    import vllm.models.deepseek_v4_1.compressor as compressor
    before = compressor.fused_save_compress_norm, compressor.rope_quant_insert
    with pytest.raises(kv_vllm.VLLMPatchError, match=r"fused_save_compress_norm changed its "
                       r"signature: vLLM has \(.*pdl=False\)"):
        kv_vllm.patch()
    assert (compressor.fused_save_compress_norm, compressor.rope_quant_insert) == before
    ops = sys.modules[OPS]
    assert ops.rope_quant_insert is before[1]  # B was fine, but nothing is swapped


def test_patch_refuses_a_missing_function(stub):
    stub(ops_source=VLLM_OPS_SOURCE.split("def rope_quant_insert")[0])
    with pytest.raises(kv_vllm.VLLMPatchError, match=r"has no rope_quant_insert"):
        kv_vllm.patch()
    assert sys.modules[OPS].fused_save_compress_norm is not kvcompress.fused_save_compress_norm


def test_patch_refuses_without_v41(stub):
    stub(with_v41=False)
    with pytest.raises(kv_vllm.VLLMPatchError, match=r"no DeepSeek V4.1 module"):
        kv_vllm.patch()


def test_patch_refuses_without_vllm(stub):
    # The fixture removed any vllm module; no stub tree is on the path.
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("a real vLLM is installed here")
    with pytest.raises(kv_vllm.VLLMPatchError, match=r"vLLM is not installed"):
        kv_vllm.patch()
