// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: kvc::insert, the runtime entry point under test (ops.hpp).
#include "adversarial/lists.hpp"  // first: the compiled lists

#include <kvcompress/kvcompress.cuh>

#include "adversarial/ops.hpp"

kvc::Status adv::call_insert(const kvc::InsertParams& p, cudaStream_t stream) { return kvc::insert(p, stream); }
