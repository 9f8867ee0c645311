// SPDX-License-Identifier: Apache-2.0
// kvcompress — independent float64 host reference (docs/contract.md §1 and §2).
//
// This header is the test oracle for the library. It deliberately includes
// nothing from include/: every codec and every formula here is written from
// the format definitions and from docs/contract.md, in plain host C++17,
// favouring clarity over speed (but everything is O(T * D)).
//
// Conventions and resolved ambiguities (see also the comments at each function):
//
//  * bf16 / e4m3 codecs are value-based: decoders evaluate the format formula,
//    encoders find the nearest representable value by arithmetic on doubles
//    (bf16) or by a binary search over the ordered finite codes (e4m3). No
//    bit tricks.
//  * e4m3 encoding keeps the sign of zero: a negative value that rounds to zero
//    gives 0x80 (this is what IEEE-style hardware conversion does).
//  * Op A trailing tokens (index >= qsl[num_reqs]) are handled like any other
//    token: when slot >= 0 they close groups using req[t] (and the chunk start
//    position of that request); they belong to no chunk, so the ring update
//    (contract §1.5: "each request's chunk's last min(n, C) tokens") never stores them.
//  * Op A non-finite inputs: no special handling; IEEE float64 results propagate.
//  * Skipped tokens (issue 13). Op A / fused: a token with ring slot >= 0 is padding (as
//    if its slot were -1) when the ring bound is given (R > 1, ring_num_blocks >= 0) and
//    the slot is at or past ring_num_blocks * C (ring_slot_out_of_range), or else when its
//    position is negative (position_out_of_range); R = 1 has no ring, only the position
//    rule applies. Op B: a token with cache slot >= 0 and a negative position writes no
//    record (position_out_of_range); a closing token whose slot is at or past
//    num_pages * B (when given) writes none (cache_slot_out_of_range), else one whose group
//    position is at or past cos_sin_rows (when given) writes none (position_out_of_range).
//    Each skipped token is counted once, under the first rule in these orders. Fused: Op
//    A's rules, then Op B's record rules for the tokens Op A closes (fused_reference).
//  * non_finite_rows (Op A, fused): one per closing group whose pooled row holds a NaN or
//    an infinity, or whose float64 sum of squares exceeds FLT_MAX (the fp32 sum then
//    overflows to inf, rsqrt(inf) = 0, and the latent is zero: the reference then expects
//    0). The fp32 kernel decides on its own rounded sum; inputs near FLT_MAX are ambiguous
//    and tests keep away from them.
//  * Op B non-finite policy (the library follows this definition):
//      Fp8DsMla NoPE tile k: if any element of the tile is NaN or +-inf, the
//        tile's scale byte is 0xFF (0xFE when sanitize), and each element is
//        quantized as: NaN -> 0x7F | sign-bit-of-the-NaN (0xFF for a negative
//        NaN), +-inf -> +-448 (0x7E / 0xFE), finite x -> e4m3_rne_satfinite(
//        clamp(x * 2^-e, -448, 448)) with e = 128 (e = 127 when sanitize, so the
//        stored scale 2^(code-127) still dequantizes finite values).
//      RoPE values (all layouts): rotated exactly in float64 with natural IEEE
//        propagation. sanitize == true: a NaN rotated value becomes +0.0
//        (bf16 0x0000) before it is stored or further quantized; inf stays.
//        sanitize == false: NaN stays NaN; the image holds 0x7FC0 | sign and the
//        tolerance entry has exact = NaN (a tester accepts any NaN there).
//      Fp8Rows: NaN -> 0x7F | sign of the NaN, +-inf -> 0x7E / 0xFE (satfinite).
//        Note: on a GPU an fp32 multiply of a NaN yields the canonical positive
//        NaN, so a kernel has to carry the sign explicitly to match this.
//      Mxfp8 / Nvfp4 / Nvfp4Rows (D = 512, P = 64): the whole row y (NoPE dims and the
//        RoPE dims) is quantized in tiles. Their RoPE values are NOT the float64 ones:
//        they are the contract's fp32 rotation (rope_fp32 below, one fma-compensated
//        product per element), a NaN becoming +0.0f when sanitize. Mxfp8 tile (32 dims)
//        with a NaN/inf: UE8M0 byte 0xFF (0xFE when sanitize), e = 128 (127), values as
//        Fp8DsMla. Nvfp4 tile (16 dims) with a NaN/inf: e4m3 scale byte 0x7F (NaN), or
//        0x7E (448) when sanitize, and every value is quantized with that scale (so
//        unsanitized every code is 0; sanitized inf -> +-6, NaN -> 0).
//      Fp8DsMlaV32 (D = 576, P = 64): NoPE tile (128 dims) with a NaN/inf: fp32 scale
//        bits 0x7FC00000 (NaN), e = 128, or 0x7F000000 (2^127), e = 127, when sanitize;
//        values as Fp8DsMla. RoPE values as bf16, float64-exact as the other layouts.
//  * e2m1 (FP4) encoding keeps the sign of zero like e4m3 (-0.1 -> 0x8) but NaN -> 0x0.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvcref {

// ============================================================================
// Scalar codecs
// ============================================================================

// bf16: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa bits.
//   exponent 0      : subnormal, value = m * 2^-133  (2^(1-127) * m / 2^7)
//   exponent 1..254 : normal,    value = (1 + m/128) * 2^(exp-127)
//   exponent 255    : m == 0 -> inf, else NaN
inline double bf16_to_double(uint16_t bits) {
  const bool neg = (bits >> 15) & 1u;
  const int exp = (bits >> 7) & 0xff;
  const int man = bits & 0x7f;
  double mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<double>(man), -133);
  } else if (exp == 255) {
    mag = (man == 0) ? std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::quiet_NaN();
  } else {
    mag = std::ldexp(1.0 + man / 128.0, exp - 127);
  }
  return neg ? -mag : mag;
}

namespace detail {

inline constexpr double kBf16MinNormal = 1.1754943508222875e-38;  // 2^-126

// Exponent E with 2^E <= a < 2^(E+1), for finite a > 0.
inline int floor_log2(double a) {
  int k = 0;
  std::frexp(a, &k);  // a = f * 2^k, f in [0.5, 1)
  return k - 1;
}

// Encode a non-negative value that is exactly representable in bf16 (or
// >= 2^128, which means inf). `neg` selects the sign bit.
inline uint16_t bf16_encode_exact(double v, bool neg) {
  const uint16_t sign = neg ? 0x8000u : 0u;
  if (v == 0.0) return sign;
  if (v >= std::ldexp(1.0, 128)) return static_cast<uint16_t>(sign | 0x7f80u);
  if (v < kBf16MinNormal) {
    const double m = std::ldexp(v, 133);  // integer 1..127
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  const int e = floor_log2(v);            // -126..127
  const double m = std::ldexp(v, -e) * 128.0 - 128.0;  // integer 0..127
  return static_cast<uint16_t>(sign | (static_cast<unsigned>(e + 127) << 7) |
                               static_cast<unsigned>(m));
}

// Round a non-negative finite q to the nearest integer, ties to even.
inline double round_half_even(double q) {
  const double n = std::floor(q);
  const double frac = q - n;  // exact for the magnitudes used here
  if (frac > 0.5) return n + 1.0;
  if (frac < 0.5) return n;
  return (std::fmod(n, 2.0) == 0.0) ? n : n + 1.0;
}

}  // namespace detail

// Spacing of bf16 numbers in the binade containing |x|; below the smallest
// normal (and at 0) the subnormal spacing 2^-133. inf/NaN -> inf/NaN.
inline double bf16_ulp(double x) {
  const double a = std::fabs(x);
  if (std::isnan(a)) return a;
  if (std::isinf(a)) return a;
  if (a < detail::kBf16MinNormal) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, detail::floor_log2(a) - 7);
}

// Round-to-nearest-even of a double to bf16 (IEEE semantics: values at or
// beyond max + half ulp round to inf). NaN -> 0x7FC0 with the NaN's sign.
inline uint16_t bf16_round(double x) {
  const bool neg = std::signbit(x);
  const uint16_t sign = neg ? 0x8000u : 0u;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7fc0u);
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7f80u);
  const double a = std::fabs(x);
  if (a == 0.0) return sign;
  const double spacing = bf16_ulp(a);
  const double q = a / spacing;  // exact: division by a power of two
  const double n = detail::round_half_even(q);
  return detail::bf16_encode_exact(n * spacing, neg);
}

// float -> double is exact, so a single RNE from the double is the correct
// float -> bf16 rounding.
inline uint16_t bf16_from_float(float x) { return bf16_round(static_cast<double>(x)); }

// OCP FP8 E4M3 ("fn" variant): 1 sign, 4 exponent bits (bias 7), 3 mantissa.
//   exponent 0            : subnormal, value = m * 2^-9
//   exponent 1..15        : normal,    value = (1 + m/8) * 2^(exp-7)
//   exponent 15, m == 7   : NaN (0x7F / 0xFF); no infinities; max 448 (0x7E)
inline double e4m3_to_double(uint8_t code) {
  const bool neg = (code >> 7) & 1u;
  const int exp = (code >> 3) & 0xf;
  const int man = code & 0x7;
  double mag;
  if (exp == 15 && man == 7) {
    mag = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<double>(man), -9);
  } else {
    mag = std::ldexp(1.0 + man / 8.0, exp - 7);
  }
  return neg ? -mag : mag;
}

// Nearest e4m3 value, ties to the code with an even mantissa (= even code);
// |x| >= 448 (incl. inf) saturates to +-448; NaN -> 0x7F | sign.
// Works on the ordered list of the 127 finite non-negative codes 0x00..0x7E
// (their values increase strictly with the code, checked in the tests).
inline uint8_t e4m3_rne_satfinite(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80u : 0u;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7fu);
  const double a = std::fabs(x);
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7eu);
  // The values of the 127 finite non-negative codes, in code (= value) order.
  static const std::array<double, 127> values = [] {
    std::array<double, 127> v{};
    for (int c = 0; c < 127; ++c) v[static_cast<size_t>(c)] = e4m3_to_double(static_cast<uint8_t>(c));
    return v;
  }();
  // Binary search: largest code lo in [0, 0x7E] with value(lo) <= a.
  int lo = 0, hi = 0x7e;  // invariant: value(lo) <= a < value(hi) (a < 448)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (values[static_cast<size_t>(mid)] <= a) lo = mid; else hi = mid;
  }
  const double vlo = values[static_cast<size_t>(lo)];
  const double vhi = values[static_cast<size_t>(hi)];
  // Both differences are exact (Sterbenz, or vlo == 0).
  const double dlo = a - vlo, dhi = vhi - a;
  int code;
  if (dlo < dhi) code = lo;
  else if (dhi < dlo) code = hi;
  else code = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint8_t>(sign | code);
}

// OCP FP4 E2M1: 1 sign bit (bit 3), 2 exponent bits (bias 1), 1 mantissa bit.
//   exponent 0     : subnormal, value = m * 0.5
//   exponent 1..3  : normal,    value = (1 + m/2) * 2^(exp-1)
//   no NaN, no infinities; magnitudes of codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
inline double e2m1_to_double(uint8_t code) {
  const bool neg = (code >> 3) & 1u;
  const int exp = (code >> 1) & 0x3;
  const int man = code & 0x1;
  const double mag = (exp == 0) ? 0.5 * man : std::ldexp(1.0 + man / 2.0, exp - 1);
  return neg ? -mag : mag;
}

// Nearest e2m1 value, ties to the even code (even mantissa bit); |x| > 6 (incl. inf)
// saturates to +-6; NaN -> 0x0 (no sign). The sign bit comes from x even when the
// magnitude rounds to 0 (-0.0 -> 0x8, -0.1 -> 0x8). The midpoints of adjacent
// magnitudes are exact dyadic doubles, so comparing against them is exact.
inline uint8_t e2m1_rne_satfinite(double x) {
  if (std::isnan(x)) return 0x0u;
  const uint8_t sign = std::signbit(x) ? 0x8u : 0u;
  const double a = std::fabs(x);
  if (a >= 6.0) return static_cast<uint8_t>(sign | 0x7u);
  int lo = 0;  // largest code with value(lo) <= a (a < 6, so lo <= 6)
  while (lo < 6 && e2m1_to_double(static_cast<uint8_t>(lo + 1)) <= a) ++lo;
  const int hi = lo + 1;
  const double mid = 0.5 * (e2m1_to_double(static_cast<uint8_t>(lo)) +
                            e2m1_to_double(static_cast<uint8_t>(hi)));
  int code;
  if (a < mid) code = lo;
  else if (a > mid) code = hi;
  else code = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint8_t>(sign | code);
}

// Smallest integer e with 2^e >= v, for finite v > 0 (exact, from frexp).
inline int ceil_log2_exact(double v) {
  if (!(v > 0.0) || std::isinf(v))
    throw std::invalid_argument("ceil_log2_exact: v must be finite and > 0");
  int k = 0;
  const double f = std::frexp(v, &k);  // v = f * 2^k, f in [0.5, 1)
  return (f == 0.5) ? k - 1 : k;
}

// |ordinal(a) - ordinal(b)|, ordinal = position of the finite code in value
// order (-448 -> -126, ..., -0 and +0 -> 0, ..., 448 -> 126). NaN codes: the
// distance is 0 when both are NaN, else 1000 (never within a tolerance).
inline int e4m3_code_distance(uint8_t a, uint8_t b) {
  auto is_nan = [](uint8_t c) { return (c & 0x7f) == 0x7f; };
  if (is_nan(a) || is_nan(b)) return (is_nan(a) && is_nan(b)) ? 0 : 1000;
  auto ordinal = [](uint8_t c) {
    const int mag = c & 0x7f;  // position among the non-negative codes
    return (c & 0x80) ? -mag : mag;
  };
  const int d = ordinal(a) - ordinal(b);
  return d < 0 ? -d : d;
}

// ============================================================================
// Counts of skipped tokens and non-finite rows (the library's kvc::ErrorCounters)
// ============================================================================

struct ErrorCounts {
  uint64_t ring_slot_out_of_range = 0;   // Op A, fused
  uint64_t cache_slot_out_of_range = 0;  // Op B, fused
  uint64_t position_out_of_range = 0;    // all ops
  uint64_t non_finite_rows = 0;          // Op A, fused
  uint64_t total() const {
    return ring_slot_out_of_range + cache_slot_out_of_range + position_out_of_range + non_finite_rows;
  }
  ErrorCounts& operator+=(const ErrorCounts& o) {
    ring_slot_out_of_range += o.ring_slot_out_of_range;
    cache_slot_out_of_range += o.cache_slot_out_of_range;
    position_out_of_range += o.position_out_of_range;
    non_finite_rows += o.non_finite_rows;
    return *this;
  }
  bool operator==(const ErrorCounts& o) const {
    return ring_slot_out_of_range == o.ring_slot_out_of_range &&
           cache_slot_out_of_range == o.cache_slot_out_of_range &&
           position_out_of_range == o.position_out_of_range && non_finite_rows == o.non_finite_rows;
  }
  bool operator!=(const ErrorCounts& o) const { return !(*this == o); }
};

// ============================================================================
// contract §1, Op A (save, compress, norm)
// ============================================================================

struct CompressInputs {
  int head_dim = 512;           // D
  int ratio = 2;                // R
  int64_t num_tokens = 0;       // T
  const float* kv_score = nullptr; int64_t kv_score_stride_elems = 0;  // elements
  const int64_t* positions = nullptr;
  const int64_t* slot = nullptr;        // ring slot (R > 1); < 0 = padding
  const int32_t* qsl = nullptr; int num_reqs = 0;  // num_reqs + 1 entries
  const int32_t* req = nullptr;         // [T] token -> request
  const float* ring = nullptr;          // ring BEFORE the call (R > 1)
  int ring_capacity = 0;                // C
  int64_t ring_page_stride = 0, ring_row_stride = 0;  // elements
  int64_t ring_elems = 0;               // total floats in the ring buffer
  int64_t ring_num_blocks = -1;         // R > 1, when >= 0: slots >= ring_num_blocks * C are padding
  const uint16_t* weight = nullptr;     // [D] bf16 bits
  float eps = 1e-6f;
};

struct CompressExpected {
  std::vector<uint8_t> closes;    // [T] 1 where token t writes a latent row
  std::vector<double> latent;     // [T*D] float64 output (NaN where !closes)
  // [T*D] magnitude of the terms an fp32 evaluation sums for each output element:
  // sum_q |kv_q| w_q / sum_q w_q / rms * |weight|. Where pooling cancels, |latent| is far
  // below it, and fp32 rounding (a few units of 2^-24 of it) can exceed one bf16 ulp of
  // the tiny result; a tester bounds the error by ulp_bf16(latent) + c * 2^-24 * magnitude.
  std::vector<double> magnitude;
  std::vector<float> ring_after;  // [ring_elems]; empty when R == 1
  // [T] the slot each token is treated with: slot[t], or -1 for padding and skipped tokens.
  std::vector<int64_t> used_slot;
  ErrorCounts errors;             // ring_slot / position_out_of_range, non_finite_rows
};

namespace detail {
inline void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("kvcref: ") + what);
}
}  // namespace detail

inline CompressExpected compress_reference(const CompressInputs& in) {
  using detail::require;
  const int D = in.head_dim;
  const int R = in.ratio;
  const int64_t T = in.num_tokens;
  require(D > 0 && R >= 1 && T >= 0, "bad D / R / T");
  CompressExpected out;
  out.closes.assign(static_cast<size_t>(T), 0);
  out.latent.assign(static_cast<size_t>(T * D), std::numeric_limits<double>::quiet_NaN());
  out.magnitude.assign(static_cast<size_t>(T * D), 0.0);
  if (T == 0) {
    if (R > 1 && in.ring) out.ring_after.assign(in.ring, in.ring + in.ring_elems);
    return out;
  }
  require(in.kv_score && in.positions && in.slot && in.weight, "null input");
  const int C = in.ring_capacity;
  if (R > 1) {
    require(in.qsl && in.req && in.ring && C >= R, "ring inputs");
    require(in.num_reqs >= 0, "num_reqs");
  }

  const double eps = static_cast<double>(in.eps);
  std::vector<double> weight(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) weight[d] = bf16_to_double(in.weight[d]);

  // Pointer to the kv part of a ring row (score part at +D), checked.
  auto ring_row = [&](int64_t block, int64_t row) -> const float* {
    const int64_t off = block * in.ring_page_stride + row * in.ring_row_stride;
    require(block >= 0 && off >= 0 && off + 2 * D <= in.ring_elems, "ring row out of range");
    return in.ring + off;
  };
  auto kv_row = [&](int64_t t) -> const float* {
    require(t >= 0 && t < T, "kv_score row out of range");
    return in.kv_score + t * in.kv_score_stride_elems;
  };

  // The slot each token is treated with: skipped tokens become padding, counted once (the
  // ring bound first). s / C >= num_blocks is s >= num_blocks * C without the overflow.
  out.used_slot.assign(in.slot, in.slot + T);
  for (int64_t t = 0; t < T; ++t) {
    int64_t& s = out.used_slot[static_cast<size_t>(t)];
    if (s < 0) continue;
    if (R > 1 && in.ring_num_blocks >= 0 && s / C >= in.ring_num_blocks) {
      ++out.errors.ring_slot_out_of_range;
      s = -1;
    } else if (in.positions[t] < 0) {
      ++out.errors.position_out_of_range;
      s = -1;
    }
  }
  const std::vector<int64_t>& slot = out.used_slot;

  std::vector<double> pooled(static_cast<size_t>(D)), pooled_abs(static_cast<size_t>(D));
  std::vector<const float*> members(static_cast<size_t>(R));

  for (int64_t t = 0; t < T; ++t) {
    if (slot[t] < 0) continue;                    // padding (contract §1.1), or skipped
    const int64_t p = in.positions[t];
    if ((p + 1) % R != 0) continue;               // does not close a group
    out.closes[t] = 1;

    if (R == 1) {
      const float* kv = kv_row(t);
      for (int d = 0; d < D; ++d) {
        pooled[d] = static_cast<double>(kv[d]);
        pooled_abs[d] = std::fabs(pooled[d]);
      }
    } else {
      const int r = in.req[t];
      require(r >= 0 && r < in.num_reqs, "req[t] out of range");
      const int32_t first = in.qsl[r];
      require(first >= 0 && first < T, "request of a closing token is empty");
      const int64_t chunk_start = in.positions[first];
      const int64_t block = slot[t] / C;
      // Gather the R members q = p-R+1 .. p (contract §1.2).
      for (int j = 0; j < R; ++j) {
        const int64_t q = p - R + 1 + j;
        if (q >= chunk_start) {
          members[j] = kv_row(t - (p - q));
        } else {
          require(q >= 0, "negative group position");
          members[j] = ring_row(block, q % C);   // old ring contents
        }
      }
      // Softmax pooling per channel, float64 (contract §1.3).
      for (int d = 0; d < D; ++d) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < R; ++j) mx = std::max(mx, static_cast<double>(members[j][D + d]));
        // (a NaN score is skipped by std::max but still makes its weight NaN)
        double num = 0.0, den = 0.0, num_abs = 0.0;
        for (int j = 0; j < R; ++j) {
          const double w = std::exp(static_cast<double>(members[j][D + d]) - mx);
          num += static_cast<double>(members[j][d]) * w;
          num_abs += std::fabs(static_cast<double>(members[j][d])) * w;
          den += w;
        }
        pooled[d] = num / den;
        pooled_abs[d] = num_abs / den;
      }
    }

    // RMSNorm, float64 (contract §1.4).
    double ss = 0.0;
    bool finite = true;
    for (int d = 0; d < D; ++d) {
      ss += pooled[d] * pooled[d];
      finite = finite && std::isfinite(pooled[d]);
    }
    if (!finite || ss > static_cast<double>(FLT_MAX)) ++out.errors.non_finite_rows;
    // A finite row whose fp32 sum of squares overflows: rsqrt(inf) = 0, the latent is 0.
    const bool overflows = finite && ss > static_cast<double>(FLT_MAX);
    const double denom = std::sqrt(ss / D + eps);
    for (int d = 0; d < D; ++d) {
      const size_t i = static_cast<size_t>(t * D + d);
      out.latent[i] = overflows ? 0.0 : pooled[d] / denom * weight[d];
      out.magnitude[i] = overflows ? 0.0 : pooled_abs[d] / denom * std::fabs(weight[d]);
    }
  }

  // Ring update (contract §1.5): bit-exact copies of whole rows (2D floats).
  if (R > 1) {
    out.ring_after.assign(in.ring, in.ring + in.ring_elems);
    for (int r = 0; r < in.num_reqs; ++r) {
      const int64_t b = in.qsl[r], e = in.qsl[r + 1];
      require(b >= 0 && e >= b && e <= T, "qsl out of range");
      const int64_t n = e - b;
      for (int64_t t = e - std::min<int64_t>(n, C); t < e; ++t) {
        if (slot[t] < 0) continue;
        const int64_t block = slot[t] / C, row = slot[t] % C;
        const int64_t off = block * in.ring_page_stride + row * in.ring_row_stride;
        require(off >= 0 && off + 2 * D <= in.ring_elems, "ring store out of range");
        std::memcpy(out.ring_after.data() + off, kv_row(t), sizeof(float) * 2 * D);
      }
    }
  }
  return out;
}

// ============================================================================
// contract §2, Op B (rope, quantize, insert)
// ============================================================================

// Mxfp8, Nvfp4 (page-segregated values / scales like Fp8DsMla), Nvfp4Rows (one record
// per row, row_stride_bytes apart): D = 512, P = 64. Fp8DsMlaV32: D = 576, P = 64,
// one 656-byte record per row, row_stride_bytes apart.
enum class Layout { Fp8DsMla, Bf16Rows, Fp8Rows, Mxfp8, Nvfp4, Nvfp4Rows, Fp8DsMlaV32 };
enum class RopeStyle { GptJ, NeoX };

struct InsertInputs {
  int head_dim = 512, rope_dim = 64, ratio = 2;
  RopeStyle rope_style = RopeStyle::GptJ;
  int64_t num_tokens = 0;
  const uint16_t* latent = nullptr; int64_t latent_stride_elems = 0;  // bf16 bits, elements
  const int64_t* positions = nullptr;
  const int64_t* slot = nullptr;         // page = slot / B, row = slot % B; < 0 skipped
  const float* cos_sin = nullptr; int64_t cos_sin_stride_elems = 0;  // [max_pos, P]
  Layout layout = Layout::Fp8DsMla;
  int block_size = 64;                   // B
  int64_t page_stride_bytes = 0;
  int64_t row_stride_bytes = 0;          // plain rows layouts only
  int64_t num_pages = -1;                // -1: not given
  int64_t cos_sin_rows = -1;             // rows of cos_sin; -1: not given (every group position is in the table)
  float fp8_scale = 1.0f;                // Fp8Rows per-tensor scale
  bool sanitize = false;
};

struct InsertExpected {
  std::vector<uint8_t> cache;
  struct RopeValue { int64_t byte_offset; double exact; };  // within 1 bf16 ulp of exact (NaN: any NaN)
  std::vector<RopeValue> rope_bf16;
  struct RopeCode { int64_t byte_offset; uint8_t code; };   // within 1 e4m3 code
  std::vector<RopeCode> rope_fp8;
  std::vector<uint8_t> written;          // [T]
  ErrorCounts errors;                    // cache_slot / position_out_of_range
};

// Bytes of one fp8_ds_mla record's value row / scale row and per-page layout.
inline constexpr int64_t kDsMlaValueBytes = 576;  // 448 e4m3 + 64 bf16
inline constexpr int64_t kDsMlaScaleBytes = 8;    // 7 UE8M0 + 1 zero byte

// Bytes of one record of `layout` (head_dim matters only for the plain rows layouts).
inline int64_t record_bytes(Layout layout, int head_dim) {
  switch (layout) {
    case Layout::Fp8DsMla: return 584;     // 576 values + 8 scales
    case Layout::Bf16Rows: return 2 * static_cast<int64_t>(head_dim);
    case Layout::Fp8Rows: return head_dim;
    case Layout::Mxfp8: return 528;        // 512 e4m3 + 16 UE8M0
    case Layout::Nvfp4: return 288;        // 256 packed e2m1 + 32 e4m3
    case Layout::Nvfp4Rows: return 288;
    case Layout::Fp8DsMlaV32: return 656;  // 512 e4m3 + 4 fp32 + 64 bf16
  }
  throw std::invalid_argument("kvcref: record_bytes: unknown layout");
}

// vLLM's page stride for block_size rows: the page-segregated layouts round the page up to
// a multiple of their value row (576 / 512 bytes), V32 and the rows layouts do not.
inline int64_t vllm_page_stride(Layout layout, int block_size, int head_dim = 512) {
  const int64_t B = block_size;
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  switch (layout) {
    case Layout::Fp8DsMla: return round_up(B * 584, 576);
    case Layout::Mxfp8: return round_up(B * 528, 512);
    case Layout::Nvfp4:
    case Layout::Nvfp4Rows: return round_up(B * 288, 512);
    case Layout::Fp8DsMlaV32: return B * 656;
    case Layout::Bf16Rows:
    case Layout::Fp8Rows: return B * record_bytes(layout, head_dim);
  }
  throw std::invalid_argument("kvcref: vllm_page_stride: unknown layout");
}

// The contract's fp32 RoPE element (Mxfp8 / Nvfp4 / Nvfp4Rows): xv is the element, ov its
// pair partner, c / s the table's cos / sin; first = xv is the pair's first element (the one
// that gets x*c - y*s). The product ov*s is carried as p + pe (pe its exact fma residual,
// 0 when p is not finite). Explicit std::fma and plain float operations, one per statement.
inline float rope_fp32(float xv, float ov, float c, float s, bool first) {
  const float p = ov * s;
  const float pe = (std::fabs(p) <= FLT_MAX) ? std::fma(ov, s, -p) : 0.0f;
  if (first) {
    const float h = std::fma(xv, c, -p);
    return h - pe;
  }
  const float h = std::fma(xv, c, p);
  return h + pe;
}

namespace detail {

inline void put_u32(std::vector<uint8_t>& cache, int64_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i)  // little-endian
    cache[static_cast<size_t>(off + i)] = static_cast<uint8_t>((v >> (8 * i)) & 0xff);
}

inline void put_bf16(std::vector<uint8_t>& cache, int64_t off, uint16_t v) {
  cache[static_cast<size_t>(off)] = static_cast<uint8_t>(v & 0xff);  // little-endian
  cache[static_cast<size_t>(off + 1)] = static_cast<uint8_t>(v >> 8);
}

// fp32 product of two floats: the double product is exact (24 + 24 bits), so
// one rounding to float is the correctly rounded fp32 multiply.
inline float fmul32(float a, float b) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
}

inline double clamp448(double v) {
  if (std::isnan(v)) return v;
  return std::min(448.0, std::max(-448.0, v));
}

}  // namespace detail

inline InsertExpected insert_reference(const InsertInputs& in,
                                       const std::vector<uint8_t>& initial_cache) {
  using detail::require;
  const int D = in.head_dim, P = in.rope_dim, R = in.ratio, B = in.block_size;
  const int N = D - P;
  const int64_t T = in.num_tokens;
  require(D > 0 && P > 0 && P % 2 == 0 && P <= D && R >= 1 && B > 0 && T >= 0, "bad dims");
  if (in.layout == Layout::Fp8DsMla) require(D == 512 && P == 64, "Fp8DsMla needs D=512, P=64");
  if (in.layout == Layout::Mxfp8 || in.layout == Layout::Nvfp4 || in.layout == Layout::Nvfp4Rows)
    require(D == 512 && P == 64, "Mxfp8 / Nvfp4 / Nvfp4Rows need D=512, P=64");
  if (in.layout == Layout::Fp8DsMlaV32) require(D == 576 && P == 64, "Fp8DsMlaV32 needs D=576, P=64");
  const bool fp32_rope =
      in.layout == Layout::Mxfp8 || in.layout == Layout::Nvfp4 || in.layout == Layout::Nvfp4Rows;

  InsertExpected out;
  out.cache = initial_cache;
  out.written.assign(static_cast<size_t>(T), 0);
  if (T == 0) return out;
  require(in.latent && in.positions && in.slot && in.cos_sin, "null input");
  const int64_t cache_size = static_cast<int64_t>(out.cache.size());
  auto check_range = [&](int64_t off, int64_t len) {
    require(off >= 0 && off + len <= cache_size, "record outside the cache image");
  };

  std::vector<double> x(static_cast<size_t>(D));       // float(latent), exact
  std::vector<double> rot(static_cast<size_t>(P));     // exact rotated RoPE values
  std::vector<float> y(static_cast<size_t>(D));        // fp32 row (x, then rope_fp32)
  const int H = P / 2;

  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = in.slot[t];
    const int64_t p = in.positions[t];
    if (s < 0) continue;
    if (p < 0) { ++out.errors.position_out_of_range; continue; }
    if ((p + 1) % R != 0) continue;
    // s / B >= num_pages is s >= num_pages * B without the overflow.
    if (in.num_pages >= 0 && s / B >= in.num_pages) { ++out.errors.cache_slot_out_of_range; continue; }
    const int64_t g = (p / R) * R;  // the group's first position
    if (in.cos_sin_rows >= 0 && g >= in.cos_sin_rows) { ++out.errors.position_out_of_range; continue; }
    out.written[t] = 1;
    const int64_t page = s / B, row = s % B;

    const uint16_t* lat = in.latent + t * in.latent_stride_elems;
    for (int d = 0; d < D; ++d) x[d] = bf16_to_double(lat[d]);

    // RoPE at the group's first position g (contract §2.2), exact in float64.
    const float* cs = in.cos_sin + g * in.cos_sin_stride_elems;
    for (int i = 0; i < H; ++i) {
      const double c = static_cast<double>(cs[i]);
      const double sn = static_cast<double>(cs[H + i]);
      int ia, ib;  // indices (relative to N) of the pair
      if (in.rope_style == RopeStyle::GptJ) { ia = 2 * i; ib = 2 * i + 1; }
      else { ia = i; ib = i + H; }
      const double e = x[N + ia], o = x[N + ib];
      rot[ia] = e * c - o * sn;
      rot[ib] = o * c + e * sn;
    }
    if (in.sanitize)
      for (int j = 0; j < P; ++j)
        if (std::isnan(rot[j])) rot[j] = 0.0;   // +0.0
    if (fp32_rope) {
      // The fp32 row: x for the NoPE dims, the contract's fp32 rotation for the RoPE dims.
      for (int d = 0; d < N; ++d) y[d] = static_cast<float>(x[d]);
      for (int i = 0; i < H; ++i) {
        const float c = cs[i], sn = cs[H + i];
        int ia, ib;
        if (in.rope_style == RopeStyle::GptJ) { ia = 2 * i; ib = 2 * i + 1; }
        else { ia = i; ib = i + H; }
        const float e = static_cast<float>(x[N + ia]), o = static_cast<float>(x[N + ib]);
        y[N + ia] = rope_fp32(e, o, c, sn, true);
        y[N + ib] = rope_fp32(o, e, c, sn, false);
      }
      if (in.sanitize)
        for (int j = 0; j < P; ++j)
          if (std::isnan(y[N + j])) y[N + j] = 0.0f;  // +0.0f
    }

    if (in.layout == Layout::Fp8DsMla) {
      const int64_t base = page * in.page_stride_bytes;
      const int64_t vrow = base + row * kDsMlaValueBytes;
      const int64_t srow = base + static_cast<int64_t>(B) * kDsMlaValueBytes + row * kDsMlaScaleBytes;
      check_range(vrow, kDsMlaValueBytes);
      check_range(srow, kDsMlaScaleBytes);
      for (int k = 0; k < N / 64; ++k) {
        bool nonfinite = false;
        float amax = 0.0f;  // max |x| in fp32 (bf16 values are exact in fp32)
        for (int j = 0; j < 64; ++j) {
          const double v = x[64 * k + j];
          if (!std::isfinite(v)) { nonfinite = true; continue; }
          amax = std::max(amax, static_cast<float>(std::fabs(v)));
        }
        int e;
        uint8_t scale_byte;
        if (nonfinite) {
          e = in.sanitize ? 127 : 128;
          scale_byte = in.sanitize ? 0xFE : 0xFF;
        } else {
          const float a = std::max(amax, 1e-4f);                 // floor before scaling (vLLM)
          const float v = detail::fmul32(a, 1.0f / 448.0f);      // fp32 multiply
          e = ceil_log2_exact(static_cast<double>(v));
          scale_byte = static_cast<uint8_t>(std::min(255, std::max(0, e + 127)));
        }
        out.cache[static_cast<size_t>(srow + k)] = scale_byte;
        for (int j = 0; j < 64; ++j) {
          const double v = x[64 * k + j];
          uint8_t code;
          if (std::isnan(v)) code = std::signbit(v) ? 0xFF : 0x7F;
          else code = e4m3_rne_satfinite(detail::clamp448(std::ldexp(v, -e)));  // inf -> +-448
          out.cache[static_cast<size_t>(vrow + 64 * k + j)] = code;
        }
      }
      out.cache[static_cast<size_t>(srow + N / 64)] = 0;
      for (int j = 0; j < P; ++j) {
        const int64_t off = vrow + N + 2 * j;
        detail::put_bf16(out.cache, off, bf16_round(rot[j]));
        out.rope_bf16.push_back({off, rot[j]});
      }
    } else if (in.layout == Layout::Bf16Rows) {
      const int64_t rec = page * in.page_stride_bytes + row * in.row_stride_bytes;
      check_range(rec, 2 * static_cast<int64_t>(D));
      for (int d = 0; d < N; ++d) detail::put_bf16(out.cache, rec + 2 * d, lat[d]);
      for (int j = 0; j < P; ++j) {
        const int64_t off = rec + 2 * (N + j);
        detail::put_bf16(out.cache, off, bf16_round(rot[j]));
        out.rope_bf16.push_back({off, rot[j]});
      }
    } else if (in.layout == Layout::Mxfp8) {
      const int64_t base = page * in.page_stride_bytes;
      const int64_t vrow = base + row * 512;
      const int64_t srow = base + static_cast<int64_t>(B) * 512 + row * 16;
      check_range(vrow, 512);
      check_range(srow, 16);
      for (int k = 0; k < 16; ++k) {
        bool nonfinite = false;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
          const float v = y[32 * k + j];
          if (!std::isfinite(v)) { nonfinite = true; continue; }
          amax = std::max(amax, std::fabs(v));
        }
        int e;
        uint8_t scale_byte;
        if (nonfinite) {
          e = in.sanitize ? 127 : 128;
          scale_byte = in.sanitize ? 0xFE : 0xFF;
        } else {
          const float a = std::max(amax, 1e-4f);
          const float v = detail::fmul32(a, 1.0f / 448.0f);      // fp32 multiply
          e = ceil_log2_exact(static_cast<double>(v));
          scale_byte = static_cast<uint8_t>(std::min(255, std::max(0, e + 127)));
        }
        out.cache[static_cast<size_t>(srow + k)] = scale_byte;
        for (int j = 0; j < 32; ++j) {
          const double v = static_cast<double>(y[32 * k + j]);
          uint8_t code;
          if (std::isnan(v)) code = std::signbit(v) ? 0xFF : 0x7F;
          else code = e4m3_rne_satfinite(detail::clamp448(std::ldexp(v, -e)));
          out.cache[static_cast<size_t>(vrow + 32 * k + j)] = code;
        }
      }
    } else if (in.layout == Layout::Nvfp4 || in.layout == Layout::Nvfp4Rows) {
      int64_t vals, scales;
      if (in.layout == Layout::Nvfp4) {
        const int64_t base = page * in.page_stride_bytes;
        vals = base + row * 256;
        scales = base + static_cast<int64_t>(B) * 256 + row * 32;
      } else {
        vals = page * in.page_stride_bytes + row * in.row_stride_bytes;
        scales = vals + 256;
      }
      check_range(vals, 256);
      check_range(scales, 32);
      std::array<uint8_t, 512> codes{};
      for (int k = 0; k < 32; ++k) {
        bool nonfinite = false;
        float amax = 0.0f;
        for (int j = 0; j < 16; ++j) {
          const float v = y[16 * k + j];
          if (!std::isfinite(v)) { nonfinite = true; continue; }
          amax = std::max(amax, std::fabs(v));
        }
        uint8_t scale_byte;
        if (nonfinite) {
          scale_byte = in.sanitize ? 0x7E : 0x7F;
        } else {
          float t = amax / 6.0f;                                 // fp32 division
          t = std::min(448.0f, std::max(0.001953125f, t));       // [2^-9, 448]
          scale_byte = e4m3_rne_satfinite(static_cast<double>(t));
        }
        const float S = static_cast<float>(e4m3_to_double(scale_byte));  // exact (or NaN)
        out.cache[static_cast<size_t>(scales + k)] = scale_byte;
        for (int j = 0; j < 16; ++j) {
          const float q = y[16 * k + j] / S;                    // fp32 division
          codes[static_cast<size_t>(16 * k + j)] = e2m1_rne_satfinite(static_cast<double>(q));
        }
      }
      for (int b = 0; b < 256; ++b)
        out.cache[static_cast<size_t>(vals + b)] = static_cast<uint8_t>(
            codes[static_cast<size_t>(2 * b)] | (codes[static_cast<size_t>(2 * b + 1)] << 4));
    } else if (in.layout == Layout::Fp8DsMlaV32) {
      const int64_t rec = page * in.page_stride_bytes + row * in.row_stride_bytes;
      check_range(rec, 656);
      for (int k = 0; k < 4; ++k) {
        bool nonfinite = false;
        float amax = 0.0f;
        for (int j = 0; j < 128; ++j) {
          const double v = x[128 * k + j];
          if (!std::isfinite(v)) { nonfinite = true; continue; }
          amax = std::max(amax, static_cast<float>(std::fabs(v)));
        }
        int e;
        uint32_t scale_bits;
        if (nonfinite) {
          e = in.sanitize ? 127 : 128;
          scale_bits = in.sanitize ? 0x7F000000u : 0x7FC00000u;
        } else {
          const float v = std::max(amax / 448.0f, 1e-4f);      // fp32 division, then floor
          e = ceil_log2_exact(static_cast<double>(v));          // -13 .. 120: a normal fp32
          scale_bits = static_cast<uint32_t>(e + 127) << 23;
        }
        detail::put_u32(out.cache, rec + 512 + 4 * k, scale_bits);
        for (int j = 0; j < 128; ++j) {
          const double v = x[128 * k + j];
          uint8_t code;
          if (std::isnan(v)) code = std::signbit(v) ? 0xFF : 0x7F;
          else code = e4m3_rne_satfinite(detail::clamp448(std::ldexp(v, -e)));
          out.cache[static_cast<size_t>(rec + 128 * k + j)] = code;
        }
      }
      for (int j = 0; j < P; ++j) {
        const int64_t off = rec + 528 + 2 * j;
        detail::put_bf16(out.cache, off, bf16_round(rot[j]));
        out.rope_bf16.push_back({off, rot[j]});
      }
    } else {  // Fp8Rows
      const int64_t rec = page * in.page_stride_bytes + row * in.row_stride_bytes;
      check_range(rec, D);
      const float inv = 1.0f / in.fp8_scale;  // fp32 reciprocal, once
      auto quant = [&](uint16_t ybits) -> uint8_t {
        const float y = static_cast<float>(bf16_to_double(ybits));
        if (std::isnan(y)) return std::signbit(y) ? 0xFF : 0x7F;
        const float v = detail::fmul32(y, inv);
        return e4m3_rne_satfinite(detail::clamp448(static_cast<double>(v)));
      };
      for (int d = 0; d < N; ++d) out.cache[static_cast<size_t>(rec + d)] = quant(lat[d]);
      for (int j = 0; j < P; ++j) {
        const int64_t off = rec + N + j;
        const uint8_t code = quant(bf16_round(rot[j]));
        out.cache[static_cast<size_t>(off)] = code;
        out.rope_fp8.push_back({off, code});
      }
    }
  }
  return out;
}

// ============================================================================
// contract §3, the fused op
// ============================================================================

struct FusedExpected {
  CompressExpected compress;
  InsertExpected insert;
  ErrorCounts errors;  // both halves, as the fused op counts them in compress.errors
};

// Op A on `a`, then Op B's record rules on the tokens Op A closes: `b.slot` holds the cache
// slots; b's ratio, head dim, token count and positions are taken from `a`. The records are
// made from `b.latent` when given (e.g. the latent a device ran Op A to, as the fused op
// rotates its own rounded row), else from the float64 latent rounded to bf16. A token Op A
// skips or does not close writes no record and is not counted again by Op B's rules.
inline FusedExpected fused_reference(const CompressInputs& a, InsertInputs b,
                                     const std::vector<uint8_t>& initial_cache) {
  using detail::require;
  const int64_t T = a.num_tokens;
  const int D = a.head_dim;
  FusedExpected out;
  out.compress = compress_reference(a);
  require(T == 0 || b.slot != nullptr, "null cache slots");
  std::vector<int64_t> record_slot(static_cast<size_t>(T), -1);
  for (int64_t t = 0; t < T; ++t)
    if (out.compress.closes[static_cast<size_t>(t)]) record_slot[static_cast<size_t>(t)] = b.slot[t];
  std::vector<uint16_t> rounded;
  if (b.latent == nullptr) {
    rounded.assign(static_cast<size_t>(T * D), 0);
    for (size_t i = 0; i < rounded.size(); ++i)
      if (out.compress.closes[i / static_cast<size_t>(D)]) rounded[i] = bf16_round(out.compress.latent[i]);
    b.latent = rounded.data();
    b.latent_stride_elems = D;
  }
  b.ratio = a.ratio;
  b.head_dim = D;
  b.num_tokens = T;
  b.positions = a.positions;
  b.slot = record_slot.data();
  out.insert = insert_reference(b, initial_cache);
  out.errors = out.compress.errors;
  out.errors += out.insert.errors;
  return out;
}

}  // namespace kvcref
