// SPDX-License-Identifier: Apache-2.0
// kvcompress — quantizers to fp8 e4m3: power-of-two (UE8M0) tile scales, and one fp32
// scale per tensor (contract §2.3).
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstdint>

#include "../core/array.hpp"
#include "../core/bit.hpp"
#include "../core/codecs.hpp"

KVC_NAMESPACE_BEGIN

/// The number conversions of the quantizers and record codecs through the core codecs:
/// float -> e4m3 (RNE, satfinite), one or two at a time (low byte = a), and two floats ->
/// e2m1 codes in one byte (low nibble = a). Kernels pass a hardware converter with the same
/// contract (arch::HardwareConvert).
struct SoftwareConvert {
  KVC_HOST_DEVICE static uint8_t convert(float x) { return float_to_e4m3(x); }
  KVC_HOST_DEVICE static uint16_t convert2(float a, float b) {
    return static_cast<uint16_t>(float_to_e4m3(a) | (float_to_e4m3(b) << 8));
  }
  KVC_HOST_DEVICE static uint8_t e2m1x2(float a, float b) { return float2_to_e2m1x2(a, b); }
};
/// The name of SoftwareConvert from before it converted to e2m1 as well.
using SoftwareE4m3 = SoftwareConvert;

/// e4m3 with one power-of-two scale per tile of `TileSize` dims (DeepSeek: 64), stored as a
/// UE8M0 code. For a tile with max |x| = amax:
///   a = max(amax, 1e-4)            (vLLM floors before scaling)
///   e = ceil(log2(a * fp32(1/448)))  exactly, from the bits (fp32 multiply)
///   code = clamp(e + 127, 0, 255);  value = e4m3_satfinite(x * 2^-e)
/// Scaling by 2^-e is exact, and satfinite saturation equals clamping to +-448 first.
///
/// Non-finite input: a tile holding a NaN or an infinity gets e = 128 (scale code 255,
/// UE8M0's NaN) so a reader sees the tile is bad; its finite values then quantize as
/// x * 2^-128 (0 unless |x| >= 2^118), an infinity to +-448 and a NaN to e4m3 NaN. With
/// `sanitize`, e = 127 instead (code 254, the largest finite scale, so finite values still
/// dequantize to about themselves) for readers that reject code 255.
///
/// Thread-level use: each thread computes `abs_max` of its part of a tile; the kernel
/// reduces (group max) and ORs `has_nonfinite`; then `exponent` and `quantize`:
///   int e = Ue8m0TileQuantizer<64>::exponent(tile_amax, tile_bad, /*sanitize=*/false);
///   uint8_t q = Ue8m0TileQuantizer<64>::quantize<SoftwareE4m3>(x, e);
template <int TileSize = 64>
struct Ue8m0TileQuantizer {
  static_assert(TileSize > 0, "tile size must be positive");
  static constexpr int kTileSize = TileSize;
  static constexpr float kMinAmax = 1e-4f;

  /// max |x| over a fragment (NaN-ignoring; pair with has_nonfinite).
  template <int N>
  KVC_HOST_DEVICE static float abs_max(const Array<float, N>& x, int begin = 0, int count = N) {
    float m = 0.f;
    for (int i = begin; i < begin + count; ++i) m = fmaxf(m, fabsf(x[i]));
    return m;
  }
  template <int N>
  KVC_HOST_DEVICE static bool has_nonfinite(const Array<float, N>& x, int begin = 0,
                                            int count = N) {
    bool bad = false;
    for (int i = begin; i < begin + count; ++i) bad |= !(fabsf(x[i]) <= 3.402823466e38f);
    return bad;
  }

  /// Scale exponent of a tile from its (reduced) amax and non-finite flag.
  KVC_HOST_DEVICE static int exponent(float amax, bool nonfinite, bool sanitize) {
    if (nonfinite) return sanitize ? 127 : 128;
    const float a = fmaxf(amax, kMinAmax);
    return ceil_log2(a * (1.0f / 448.0f));
  }
  KVC_HOST_DEVICE static uint8_t scale_code(int e) { return ue8m0_from_exponent(e); }

  template <class Convert = SoftwareE4m3>
  KVC_HOST_DEVICE static uint8_t quantize(float x, int e) {
    return Convert::convert(x * exp2i(-e));
  }
};

/// e4m3 with one fp32 scale for the whole tensor, read from device memory:
/// value = e4m3_satfinite(x * (1 / scale)), the reciprocal taken once in fp32.
struct PerTensorE4m3Quantizer {
  KVC_HOST_DEVICE static float inverse(float scale) { return 1.0f / scale; }
  template <class Convert = SoftwareE4m3>
  KVC_HOST_DEVICE static uint8_t quantize(float x, float inverse_scale) {
    return Convert::convert(x * inverse_scale);
  }
};

KVC_NAMESPACE_END
