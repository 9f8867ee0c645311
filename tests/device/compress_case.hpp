// SPDX-License-Identifier: Apache-2.0
// Device tier: an Op A batch (tests/common/batch.hpp) on the device, and the checks of its
// outputs against the float64 reference.
#pragma once

#include <kvcompress/kvcompress.cuh>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/batch.hpp"
#include "device_util.cuh"
#include "reference/reference.hpp"

namespace kvctest {

/// Rounds a batch's kv_score and ring to bf16 values (for the bf16-input kernels), so the
/// reference sees exactly what the device reads.
inline void round_batch_to_bf16(Batch& b) {
  for (auto& x : b.kv_score) x = static_cast<float>(kvcref::bf16_to_double(kvcref::bf16_from_float(x)));
  for (auto& x : b.ring) x = static_cast<float>(kvcref::bf16_to_double(kvcref::bf16_from_float(x)));
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = kvcref::bf16_from_float(v[i]);
  return out;
}

/// Device buffers of one Op A call. The latent is poisoned with random bits.
struct CompressDevice {
  bool bf16 = false, index32 = false;
  int64_t latent_stride_elems = 0;
  DeviceArray<float> kv32, ring32;
  DeviceArray<uint16_t> kv16, ring16, weight, latent;
  DeviceArray<int64_t> pos64, slot64;
  DeviceArray<int32_t> pos32, slot32, qsl, req;
  std::vector<uint16_t> latent_init;

  CompressDevice(const Batch& b, bool use_bf16, bool use_index32, std::mt19937_64& rng)
      : bf16(use_bf16), index32(use_index32) {
    latent_stride_elems = b.head_dim + 8;
    upload_inputs(b);
    if (b.ratio > 1) upload_ring(b.ring);
    weight.upload(b.weight);
    latent_init.resize(static_cast<size_t>(std::max<int64_t>(1, b.num_tokens()) * latent_stride_elems));
    for (auto& x : latent_init) x = static_cast<uint16_t>(rng());
    latent.upload(latent_init);
  }

  /// New per-call inputs (kv_score, positions, slots, qsl, req) keeping the ring.
  void upload_inputs(const Batch& b) {
    if (bf16)
      kv16.upload(to_bf16_bits(b.kv_score));
    else
      kv32.upload(b.kv_score);
    pos64.upload(b.positions);
    slot64.upload(b.slot);
    pos32.upload(std::vector<int32_t>(b.positions.begin(), b.positions.end()));
    slot32.upload(std::vector<int32_t>(b.slot.begin(), b.slot.end()));
    qsl.upload(b.qsl);
    req.upload(b.req.empty() ? std::vector<int32_t>{0} : b.req);
  }
  void upload_ring(const std::vector<float>& ring) {
    if (bf16)
      ring16.upload(to_bf16_bits(ring));
    else
      ring32.upload(ring);
  }
  /// The ring as float values (bf16 rings widened exactly).
  std::vector<float> ring_values() const {
    if (!bf16) return ring32.download();
    const auto bits = ring16.download();
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = static_cast<float>(kvcref::bf16_to_double(bits[i]));
    return out;
  }

  kvc::CompressParams params(const Batch& b) {
    kvc::CompressParams p;
    p.ratio = b.ratio;
    p.head_dim = b.head_dim;
    p.dtype = bf16 ? kvc::DType::kBFloat16 : kvc::DType::kFloat32;
    p.num_tokens = b.num_tokens();
    p.kv_score = bf16 ? static_cast<const void*>(kv16.ptr()) : kv32.ptr();
    p.kv_score_stride_elems = b.stride;
    p.positions = index32 ? kvc::IndexPtr{pos32.ptr(), kvc::IndexType::kInt32}
                          : kvc::IndexPtr{pos64.ptr(), kvc::IndexType::kInt64};
    p.slot = index32 ? kvc::IndexPtr{slot32.ptr(), kvc::IndexType::kInt32}
                     : kvc::IndexPtr{slot64.ptr(), kvc::IndexType::kInt64};
    p.qsl = qsl.ptr();
    p.qsl_size = static_cast<int64_t>(b.qsl.size());
    p.req = req.ptr();
    if (b.ratio > 1) {
      p.ring = bf16 ? static_cast<void*>(ring16.ptr()) : ring32.ptr();
      p.ring_layout = kvc::RingLayout{b.capacity, b.ring_page_stride, b.ring_row_stride, b.ring_num_blocks};
    }
    p.weight = reinterpret_cast<const kvc::bf16_t*>(weight.ptr());
    p.eps = b.eps;
    p.latent = reinterpret_cast<kvc::bf16_t*>(latent.ptr());
    p.latent_stride_elems = latent_stride_elems;
    return p;
  }
};

/// The stated per-element bound on a latent: one bf16 ulp of the float64 value, plus the
/// fp32 evaluation's own rounding, c * 2^-24 of the magnitude of the terms it sums (see
/// kvcref::CompressExpected::magnitude); c covers exp (2 ulp), R additions, the merge
/// rescales and the norm's sum of D squares. Only where pooling cancels is the second
/// term more than a tiny fraction of the first.
inline double latent_tolerance(double exact, double magnitude, int ratio, int head_dim) {
  return kvcref::bf16_ulp(exact) + (2.0 * ratio + 16.0 + head_dim / 32.0) * std::ldexp(magnitude, -24);
}

/// Latents within latent_tolerance() where a group closes, untouched (poison) elsewhere,
/// padding columns untouched; ring bit-exact. Reports the first mismatch only (a loop of
/// plain comparisons: millions of elements per test).
inline void check_compress(const Batch& b, const kvcref::CompressExpected& want,
                           const CompressDevice& dev, const std::vector<uint16_t>& latent_before,
                           const std::string& what) {
  const auto latent = dev.latent.download();
  const int64_t T = b.num_tokens(), D = b.head_dim, S = dev.latent_stride_elems;
  for (int64_t t = 0; t < T; ++t) {
    const bool closes = want.closes[static_cast<size_t>(t)] != 0;
    for (int64_t d = 0; d < S; ++d) {
      const size_t i = static_cast<size_t>(t * S + d);
      if (!closes || d >= D) {
        if (latent[i] != latent_before[i])
          FAIL(what, ": latent token ", t, " dim ", d, " was written but must stay untouched");
        continue;
      }
      const size_t k = static_cast<size_t>(t * D + d);
      const double exact = want.latent[k];
      const double got = kvcref::bf16_to_double(latent[i]);
      const bool ok = std::isnan(exact)
                          ? std::isnan(got)
                          : std::fabs(got - exact) <= latent_tolerance(exact, want.magnitude[k], b.ratio, b.head_dim);
      if (!ok)
        FAIL(what, ": latent token ", t, " dim ", d, " is ", got, " (", hex(latent[i]), "), float64 ", exact,
             ", magnitude ", want.magnitude[k]);
    }
  }
  if (b.ratio > 1) {
    const auto ring = dev.ring_values();
    REQUIRE(ring.size() == want.ring_after.size());
    for (size_t i = 0; i < ring.size(); ++i) {
      uint32_t g, w;
      std::memcpy(&g, &ring[i], 4);
      std::memcpy(&w, &want.ring_after[i], 4);
      if (dev.bf16) {
        w = static_cast<uint32_t>(kvcref::bf16_from_float(want.ring_after[i])) << 16;
        g &= 0xffff0000u;
      }
      if (g != w)
        FAIL(what, ": ring element ", i, " (block ", i / b.ring_page_stride, ", row ",
             (i % b.ring_page_stride) / b.ring_row_stride, ") is ", hex(g), ", expected ", hex(w));
    }
  }
}

/// The warp-row instance <R, 512> (In: fp32 or bf16 as `bf16` says) of Op A with
/// `epilogue` (LatentEpilogue: plain Op A; RecordEpilogue: the fused op), launched with
/// `windows` instead of the host API's choice (wide windows: kvc::compress sizes them to the
/// GPU's waves, CompressConfig::windows). Op A and the fused op launched with the same
/// windows run the same code path (the block rows of a small call do not: another mapping,
/// another summation order, latents equal only within their bound).
template <int R, class Epilogue = kvc::LatentEpilogue>
kvc::Status launch_warp_rows(const kvc::CompressParams& p, bool bf16, kvc::detail::WindowSizes windows,
                             const Epilogue& epilogue = Epilogue{}) {
  const int64_t blocks = kvc::CompressConfig<R, 512, float, 32>::blocks(p.num_tokens, windows);
  const auto run = [&](auto kernel) {
    return kvc::detail::launch_kernel("compress_kernel", kernel, dim3(static_cast<unsigned>(blocks)), dim3(128),
                                      nullptr, kvc::LaunchOptions{}, p, epilogue, windows);
  };
  // The instance kvc::compress picks for these windows (Ratio tokens each: the one with the
  // window a constant).
  if (!kvc::CompressConfig<R, 512, float, 32>::reads_windows(windows))
    return bf16 ? run(kvc::compress_kernel<R, 512, kvc::bf16_t, Epilogue, 32, true>)
                : run(kvc::compress_kernel<R, 512, float, Epilogue, 32, true>);
  return bf16 ? run(kvc::compress_kernel<R, 512, kvc::bf16_t, Epilogue, 32>)
              : run(kvc::compress_kernel<R, 512, float, Epilogue, 32>);
}

}  // namespace kvctest
