// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: kvc::compress, the runtime entry point under test (ops.hpp).
#include "adversarial/lists.hpp"  // first: the compiled lists

#include <kvcompress/kvcompress.cuh>

#include "adversarial/ops.hpp"

kvc::Status adv::call_compress(const kvc::CompressParams& p, cudaStream_t stream) { return kvc::compress(p, stream); }
