// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: the runtime API's compiled lists for this program (launch/dispatch.hpp),
// the configuration vLLM compiles plus ratio 4: what the cases call, not all 216 kernels.
// Every translation unit of kvc_adversarial_tests includes this first (the lists must be
// the same in all of them). A header, not compile definitions: nvcc splits -D values at
// commas.
#pragma once

#define KVC_RATIOS 1, 2, 4
#define KVC_HEAD_DIMS 512
#define KVC_DTYPES kFloat32
#define KVC_LAYOUTS kFp8DsMla
