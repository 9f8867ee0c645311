// SPDX-License-Identifier: Apache-2.0
// 05_torch_op — Python bindings of the three ops (compiled by the host compiler; the ops
// themselves are in compress_op.cu, insert_op.cu and fused_op.cu).
#include <torch/extension.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kvcompress ops for DeepSeek V4.1's compressed KV cache (vLLM V4.1 conventions)";
  m.def("fused_save_compress_norm", &kvc_torch::fused_save_compress_norm,
        "Op A: pool every compress_ratio tokens with the softmax gate, RMS-normalise into "
        "latent_out, update the ring (state_cache). In place.",
        py::arg("kv_score"), py::arg("positions"), py::arg("state_cache"),
        py::arg("slot_mapping"), py::arg("query_start_loc"), py::arg("token_to_req_indices"),
        py::arg("rms_norm_weight"), py::arg("rms_norm_eps"), py::arg("compress_ratio"),
        py::arg("latent_out"), py::arg("pdl") = true);
  m.def("rope_quant_insert", &kvc_torch::rope_quant_insert,
        "Op B: rotate (GPT-J RoPE on the last 64 dims at the group's first position), quantize "
        "and write one cache record per closing token. In place.",
        py::arg("latent"), py::arg("positions"), py::arg("cos_sin_cache"), py::arg("kv_cache"),
        py::arg("slot_mapping"), py::arg("compress_ratio"), py::arg("fp8_scale") = py::none(),
        py::arg("pdl") = true);
  m.def("fused_compress_insert", &kvc_torch::fused_compress_insert,
        "Op A and Op B in one launch (latent_out optional). In place.",
        py::arg("kv_score"), py::arg("positions"), py::arg("state_cache"),
        py::arg("slot_mapping"), py::arg("query_start_loc"), py::arg("token_to_req_indices"),
        py::arg("rms_norm_weight"), py::arg("rms_norm_eps"), py::arg("compress_ratio"),
        py::arg("cos_sin_cache"), py::arg("kv_cache"), py::arg("kv_slot_mapping"),
        py::arg("latent_out") = py::none(), py::arg("fp8_scale") = py::none(),
        py::arg("pdl") = true);
}
