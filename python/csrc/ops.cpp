// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — the ops' schemas (TORCH_LIBRARY), their CUDA implementations
// (TORCH_LIBRARY_IMPL, compress_op.cu / insert_op.cu / fused_op.cu) and the Python module
// kvcompress._C whose import registers them. Fake (meta) implementations are registered in
// Python (kvcompress/_fake.py), so torch.compile traces the ops and CUDA graphs capture them.
//
// The schemas state what each op writes: `(a!)` marks a tensor written in place. Names,
// orders and defaults of the leading arguments are vLLM V4.1's; `pdl` is ours.
#include <Python.h>

#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(kvcompress, m) {
  m.def(
      "fused_save_compress_norm(Tensor kv_score, Tensor positions, Tensor(a!)? state_cache, "
      "Tensor slot_mapping, Tensor? query_start_loc, Tensor? token_to_req_indices, "
      "Tensor rms_norm_weight, float rms_norm_eps, int compress_ratio, Tensor(b!) latent_out, "
      "bool pdl=True) -> ()");
  m.def(
      "rope_quant_insert(Tensor latent, Tensor positions, Tensor cos_sin_cache, "
      "Tensor(a!) kv_cache, Tensor slot_mapping, int compress_ratio, Tensor? fp8_scale=None, "
      "str? cache_layout=None, bool pdl=True) -> ()");
  m.def(
      "fused_compress_insert(Tensor kv_score, Tensor positions, Tensor(a!)? state_cache, "
      "Tensor slot_mapping, Tensor? query_start_loc, Tensor? token_to_req_indices, "
      "Tensor rms_norm_weight, float rms_norm_eps, int compress_ratio, Tensor cos_sin_cache, "
      "Tensor(b!) kv_cache, Tensor kv_slot_mapping, Tensor(c!)? latent_out=None, "
      "Tensor? fp8_scale=None, str? cache_layout=None, bool pdl=True) -> ()");
}

TORCH_LIBRARY_IMPL(kvcompress, CUDA, m) {
  m.impl("fused_save_compress_norm", &kvc_torch::fused_save_compress_norm);
  m.impl("rope_quant_insert", &kvc_torch::rope_quant_insert);
  m.impl("fused_compress_insert", &kvc_torch::fused_compress_insert);
}

// All-CPU calls reach the same functions, whose first device check raises ValueError
// "<op>: <argument> must be a CUDA tensor" (instead of the dispatcher's NotImplementedError).
TORCH_LIBRARY_IMPL(kvcompress, CPU, m) {
  m.impl("fused_save_compress_norm", &kvc_torch::fused_save_compress_norm);
  m.impl("rope_quant_insert", &kvc_torch::rope_quant_insert);
  m.impl("fused_compress_insert", &kvc_torch::fused_compress_insert);
}

// `import kvcompress._C` loads this library (running the registrations above); the module
// itself is empty.
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvcompress._C",
                               "kvcompress ops (torch.ops.kvcompress)", -1, nullptr};
  return PyModule_Create(&module);
}
