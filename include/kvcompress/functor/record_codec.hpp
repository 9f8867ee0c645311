// SPDX-License-Identifier: Apache-2.0
// kvcompress — record codecs: a rotated row -> the bytes of a cache record (contract §2.3).
//
// One codec per layout/cache.hpp Encoding. A tiled codec makes a tile's scale from the
// tile's reduced magnitude, then encodes any slice of the tile's values with it:
//   uint32_t m = max over the tile of magnitude_bits(y)    (the caller reduces: one thread
//                                                           on the host, lanes on the device)
//   auto s = RecordCodec<Enc>::scale<Convert>(m, sanitize);
//   RecordCodec<Enc>::put_scale(scale_bytes + t * kScaleBytes, s);
//   Array<uint8_t, N * value bytes> q = RecordCodec<Enc>::encode<Convert>(y_slice, s);
// magnitude_bits orders like |y| for finite values and puts infinity and NaN above them,
// so one unsigned max gives a tile's amax and whether it holds a non-finite value.
//
// encode_record<Layout>() runs the codecs over a whole row on the host (the kernels' record
// writer, kernel/record_writer.cuh, runs them over a thread's slice of it).
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "../core/array.hpp"
#include "../core/bit.hpp"
#include "../core/codecs.hpp"
#include "../layout/cache.hpp"
#include "quantize.hpp"

KVC_NAMESPACE_BEGIN

/// |y|'s fp32 bits: ordered like |y|; >= 0x7f800000 for infinity and NaN.
KVC_HOST_DEVICE uint32_t magnitude_bits(float y) { return float_bits(y) & 0x7fffffffu; }
inline constexpr uint32_t kNonFiniteMagnitude = 0x7f800000u;

template <Encoding Enc>
struct RecordCodec;

/// kBf16: the row's bf16 bits (RoPE: the bf16 rounding of the rotation).
template <>
struct RecordCodec<Encoding::kBf16> {};

/// kE4m3Ue8m0 (fp8_ds_mla NoPE, MXFP8): Ue8m0TileQuantizer's rules. A non-finite tile gets
/// code 255 (254 when sanitizing).
template <>
struct RecordCodec<Encoding::kE4m3Ue8m0> {
  struct Scale {
    float multiplier;  // 2^-e
    uint8_t code;
  };
  template <class Convert>
  KVC_HOST_DEVICE static Scale scale(uint32_t amax_bits, bool sanitize) {
    const int e = Ue8m0TileQuantizer<>::exponent(bits_float(amax_bits),
                                                 amax_bits >= kNonFiniteMagnitude, sanitize);
    return {exp2i(-e), Ue8m0TileQuantizer<>::scale_code(e)};
  }
  KVC_HOST_DEVICE static void put_scale(uint8_t* dst, const Scale& s) { *dst = s.code; }
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint8_t, N> encode(const Array<float, N>& y, const Scale& s) {
    static_assert(N % 2 == 0, "e4m3 pairs");
    Array<uint8_t, N> q;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; i += 2) {
      const uint16_t pair = Convert::convert2(y[i] * s.multiplier, y[i + 1] * s.multiplier);
      q[i] = static_cast<uint8_t>(pair & 0xffu);
      q[i + 1] = static_cast<uint8_t>(pair >> 8);
    }
    return q;
  }
  /// encode() as little-endian 32-bit words (value 4w + k in byte k of word w): the same
  /// bytes in memory, built from two e4m3 pairs per word instead of byte by byte.
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint32_t, N / 4> encode_words(const Array<float, N>& y,
                                                              const Scale& s) {
    static_assert(N % 4 == 0, "whole 32-bit words");
    Array<uint32_t, N / 4> w;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; i += 4) {
      const uint32_t lo = Convert::convert2(y[i] * s.multiplier, y[i + 1] * s.multiplier);
      const uint32_t hi = Convert::convert2(y[i + 2] * s.multiplier, y[i + 3] * s.multiplier);
      w[i / 4] = lo | hi << 16;
    }
    return w;
  }
};

/// kE4m3Pow2F32 (V3.2's 656-byte record): scale 2^e with e = ceil(log2(max(amax / 448,
/// 1e-4))) (IEEE division), stored as fp32; values e4m3(x * 2^-e), exact scaling, so equal
/// to e4m3(clamp(x / scale, +-448)). A non-finite tile: e = 128 and a stored NaN (e = 127
/// and 2^127 when sanitizing), its values as the UE8M0 codec's.
template <>
struct RecordCodec<Encoding::kE4m3Pow2F32> {
  struct Scale {
    float multiplier;  // 2^-e
    uint32_t stored;   // fp32 bits of the stored scale
  };
  static constexpr float kMinScale = 1e-4f;
  template <class Convert>
  KVC_HOST_DEVICE static Scale scale(uint32_t amax_bits, bool sanitize) {
    int e;
    if (amax_bits >= kNonFiniteMagnitude) {
      e = sanitize ? 127 : 128;
    } else {
      e = ceil_log2(fmaxf(div_rn(bits_float(amax_bits), 448.0f), kMinScale));
    }
    return {exp2i(-e), e == 128 ? 0x7fc00000u : static_cast<uint32_t>(e + 127) << 23};
  }
  KVC_HOST_DEVICE static void put_scale(uint8_t* dst, const Scale& s) {
    *reinterpret_cast<uint32_t*>(dst) = s.stored;  // 4-byte aligned: records are 16-aligned
  }
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint8_t, N> encode(const Array<float, N>& y, const Scale& s) {
    return RecordCodec<Encoding::kE4m3Ue8m0>::encode<Convert>(
        y, RecordCodec<Encoding::kE4m3Ue8m0>::Scale{s.multiplier, 0});
  }
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint32_t, N / 4> encode_words(const Array<float, N>& y,
                                                              const Scale& s) {
    return RecordCodec<Encoding::kE4m3Ue8m0>::encode_words<Convert>(
        y, RecordCodec<Encoding::kE4m3Ue8m0>::Scale{s.multiplier, 0});
  }
};

/// kE2m1E4m3 (NVFP4): scale S = e4m3(clamp(amax / 6, 2^-9, 448)) (IEEE division), stored as
/// its e4m3 byte; values e2m1(x / S) with IEEE round-to-nearest division (a reciprocal
/// multiply would move e2m1 ties), round to nearest even, saturating at +-6, NaN -> 0, the
/// sign from the fp32 sign bit. A non-finite tile stores 0x7f (e4m3 NaN; its values then
/// encode x / NaN = NaN as 0), or 0x7e (448) when sanitizing.
///
/// The quotient of a finite tile: q = RN(|x| * r) with r = RN(1 / S), then one correction
/// with the exact residual |x| - q * S (an fma): RN(q + r * residual) is RN(|x| / S) for
/// every quotient in the normal range (Markstein's theorem; S is normal or an e4m3
/// subnormal >= 2^-9, and |x| / S <= max(6.1, amax / 448) never overflows), the sign then
/// x's own (x / S keeps it, -0 included). Quotients below 2^-126 may round differently and
/// encode 0 all the same. Without the division's range check and slow path the code has no
/// branch; tests/host/test_record_formats.cpp checks it against IEEE division at every e2m1
/// midpoint of every scale. Non-finite tiles divide (div_rn): x / 448 of an infinity.
template <>
struct RecordCodec<Encoding::kE2m1E4m3> {
  struct Scale {
    float divisor;     // float(e4m3 code)
    float reciprocal;  // RN(1 / divisor)
    bool finite;       // the tile's amax is finite
    uint8_t code;
  };
  /// RN(x / s.divisor) (see above).
  KVC_HOST_DEVICE static float quotient(float x, const Scale& s) {
    if (!s.finite) return div_rn(x, s.divisor);
    const float a = fabsf(x);
    const float q = a * s.reciprocal;
    return copysignf(fmaf(fmaf(-q, s.divisor, a), s.reciprocal, q), x);
  }
  static constexpr float kMinScale = 1.0f / 512.0f;  // e4m3's smallest subnormal, 2^-9
  template <class Convert>
  KVC_HOST_DEVICE static Scale scale(uint32_t amax_bits, bool sanitize) {
    uint8_t code;
    if (amax_bits >= kNonFiniteMagnitude) {
      code = sanitize ? uint8_t{0x7e} : kE4m3NaN;
    } else {
      const float t = fminf(fmaxf(div_rn(bits_float(amax_bits), kE2m1Max), kMinScale), kE4m3Max);
      code = Convert::convert(t);
    }
    const float divisor = e4m3_to_float(code);
    return {divisor, div_rn(1.0f, divisor), amax_bits < kNonFiniteMagnitude, code};
  }
  KVC_HOST_DEVICE static void put_scale(uint8_t* dst, const Scale& s) { *dst = s.code; }
  /// N values -> N / 2 bytes, value 2i in the low nibble of byte i.
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint8_t, N / 2> encode(const Array<float, N>& y, const Scale& s) {
    static_assert(N % 2 == 0, "e2m1 pairs");
    Array<uint8_t, N / 2> q;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; i += 2)
      q[i / 2] = Convert::e2m1x2(quotient(y[i], s), quotient(y[i + 1], s));
    return q;
  }
};

/// kE4m3Tensor (fp8 rows): PerTensorE4m3Quantizer, e4m3(x * (1 / scale)) with the scale read
/// from CacheParams::scale; no stored scale.
template <>
struct RecordCodec<Encoding::kE4m3Tensor> {
  template <class Convert, int N>
  KVC_HOST_DEVICE static Array<uint8_t, N> encode(const Array<float, N>& y, float inverse) {
    Array<uint8_t, N> q;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) q[i] = PerTensorE4m3Quantizer::quantize<Convert>(y[i], inverse);
    return q;
  }
};

namespace detail {

/// The value a record codec encodes for channel k of a row: the bf16 value, or for a RoPE
/// channel of a kFp32Rope layout the fp32 rotation.
template <class Layout>
KVC_HOST_DEVICE float record_value(int k, uint16_t bits, float rotated) {
  return Layout::kFp32Rope && k >= Layout::kNopeDim ? rotated : bf16_to_float(bits);
}

template <class Layout, class Convert, class Seg>
void encode_segment_host(const CacheParams& c, uint8_t* values, uint8_t* scales,
                         const uint16_t* bits, const float* rope32, bool sanitize) {
  constexpr Encoding kEnc = Seg::kEncoding;
  const auto value = [&](int k) {
    return record_value<Layout>(k, bits[k], Layout::kFp32Rope && k >= Layout::kNopeDim
                                                ? rope32[k - Layout::kNopeDim]
                                                : 0.f);
  };
  if constexpr (kEnc == Encoding::kBf16) {
    for (int k = Seg::kBegin; k < Seg::kEnd; ++k)
      std::memcpy(values + Seg::kValueOffset + 2 * (k - Seg::kBegin), &bits[k], 2);
  } else if constexpr (kEnc == Encoding::kE4m3Tensor) {
    const float inverse = PerTensorE4m3Quantizer::inverse(*c.scale);
    for (int k = Seg::kBegin; k < Seg::kEnd; ++k) {
      Array<float, 1> y{{value(k)}};
      values[Seg::kValueOffset + (k - Seg::kBegin)] =
          RecordCodec<kEnc>::template encode<Convert>(y, inverse)[0];
    }
  } else {
    using Codec = RecordCodec<kEnc>;
    for (int t = 0; t < Seg::kTiles; ++t) {
      const int k0 = Seg::kBegin + t * Seg::kTile;
      uint32_t m = 0;
      for (int k = k0; k < k0 + Seg::kTile; ++k) m = m > magnitude_bits(value(k)) ? m : magnitude_bits(value(k));
      const auto s = Codec::template scale<Convert>(m, sanitize);
      Codec::put_scale(scales + Seg::kScaleOffset + t * scale_bytes(kEnc), s);
      for (int k = k0; k < k0 + Seg::kTile; k += 2) {
        Array<float, 2> y{{value(k), value(k + 1)}};
        const auto q = Codec::template encode<Convert>(y, s);
        std::memcpy(values + Seg::kValueOffset + (k - Seg::kBegin) * value_half_bytes(kEnc) / 2,
                    &q, sizeof q);
      }
    }
  }
}

template <class Layout, class Convert, class... Segs>
void encode_record_host(SegmentList<Segs...>, const CacheParams& c, uint8_t* values,
                        uint8_t* scales, const uint16_t* bits, const float* rope32, bool sanitize) {
  (encode_segment_host<Layout, Convert, Segs>(c, values, scales, bits, rope32, sanitize), ...);
}

}  // namespace detail

/// Writes the record of (page, row) into host memory at c.data (c.scale, if the format reads
/// it, in host memory too), from a rotated row: `bits` = the row's kHeadDim bf16 values
/// (NoPE from the latent, RoPE the bf16 rounding of the rotation), `rope32` = the kRopeDim
/// rotated values in fp32 (read by kFp32Rope formats only; sanitized NaN -> 0 like `bits`).
/// The bytes equal what the kernels write for the same row.
template <class Layout, class Convert = SoftwareConvert>
void encode_record(const CacheParams& c, int64_t page, int64_t row, const uint16_t* bits,
                   const float* rope32, bool sanitize) {
  uint8_t* base = static_cast<uint8_t*>(c.data);
  uint8_t* values = base + Layout::value_offset(c, page, row);
  uint8_t* scales = base + Layout::scale_offset(c, page, row);
  detail::encode_record_host<Layout, Convert>(typename Layout::Segments{}, c, values, scales, bits,
                                              rope32, sanitize);
  if constexpr (!Layout::ByteMap::kUsesRowStride)
    for (int i = Layout::kScaleUsed; i < Layout::ByteMap::kScaleBytes; ++i) scales[i] = 0;
}

KVC_NAMESPACE_END
