// SPDX-License-Identifier: Apache-2.0
// kvcompress — launch options shared by every host entry point.
#pragma once

#include "../config.hpp"

KVC_NAMESPACE_BEGIN

/// How a kvcompress kernel is launched (the last argument of kvc::compress, kvc::insert,
/// kvc::fused and the launch_* templates).
struct LaunchOptions {
  /// Programmatic dependent launch (sm_90+): the kernel is launched with the
  /// programmatic-stream-serialization attribute, so its blocks may be scheduled while the
  /// previous kernel of the stream is still running; they wait (griddepcontrol.wait) for
  /// that kernel's completion before their first global memory access. This hides the
  /// launch gap between back-to-back kernels (e.g. Op A then Op B at decode). Each
  /// kvcompress kernel also lets its own successor start early. Works in stream capture
  /// (the graph gets a programmatic edge). Ignored on GPUs below sm_90.
  bool pdl = false;
};

KVC_NAMESPACE_END
