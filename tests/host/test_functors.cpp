// SPDX-License-Identifier: Apache-2.0
// Host tier: the per-thread functors GatedPool and RmsNorm (functor/*.hpp) on fragments,
// against float64 formulas written out in this file (contract §1.3, §1.4).
#include <doctest/doctest.h>

#include <kvcompress/functor/gated_pool.hpp>
#include <kvcompress/functor/rms_norm.hpp>

#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kN = 16;  // channels per fragment
using Frag = kvc::Array<float, kN>;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// The members of one group; heap-allocated (R = 128 fragments are large for a stack).
template <int R, int N = kN>
struct Group {
  kvc::Array<float, N> kv[R];
  kvc::Array<float, N> score[R];
};

/// contract §1.3 in float64, one channel: softmax over the members, per channel.
template <int R, int N>
double pool64(const Group<R, N>& g, int channel, int first = 0, int count = R) {
  double m = -std::numeric_limits<double>::infinity();
  for (int q = first; q < first + count; ++q) m = std::max(m, double(g.score[q][channel]));
  double num = 0, den = 0;
  for (int q = first; q < first + count; ++q) {
    const double w = std::exp(double(g.score[q][channel]) - m);
    num += double(g.kv[q][channel]) * w;
    den += w;
  }
  return num / den;
}

template <int R, int N>
double max_abs_kv(const Group<R, N>& g, int channel, int first = 0, int count = R) {
  double a = 0;
  for (int q = first; q < first + count; ++q) a = std::max(a, std::fabs(double(g.kv[q][channel])));
  return a;
}

template <int R, int N>
void fill_random(Group<R, N>& g, std::mt19937_64& rng, float kv_range, float score_lo,
                 float score_hi) {
  std::uniform_real_distribution<float> kv(-kv_range, kv_range), sc(score_lo, score_hi);
  for (int q = 0; q < R; ++q)
    for (int i = 0; i < N; ++i) {
      g.kv[q][i] = kv(rng);
      g.score[q][i] = sc(rng);
    }
}

/// Compares pooled values with the float64 formula: |got - want| <= 1e-5 * max |kv|.
struct PoolChecker {
  int64_t checked = 0, mismatches = 0;
  std::string first;
  void operator()(float got, double want, double scale, const char* what, int channel) {
    ++checked;
    const bool ok = std::isfinite(got) && std::fabs(double(got) - want) <= 1e-5 * scale;
    if (!ok && mismatches++ == 0) {
      char buf[192];
      std::snprintf(buf, sizeof buf, "%s channel %d: got %a (0x%08x), float64 %a, max|kv| %g", what,
                    channel, got, fbits(got), want, scale);
      first = buf;
    }
  }
};

#define KVC_REPORT(checker)                                                 \
  do {                                                                      \
    INFO("checked ", (checker).checked, ", mismatches ", (checker).mismatches, \
         "; first: ", (checker).first);                                     \
    CHECK((checker).checked > 0);                                           \
    CHECK((checker).mismatches == 0);                                       \
  } while (0)

template <int R>
void check_pool_random(uint64_t seed, int trials, float kv_range, float score_lo, float score_hi) {
  std::mt19937_64 rng(seed);
  PoolChecker check;
  auto g = std::make_unique<Group<R>>();
  for (int trial = 0; trial < trials; ++trial) {
    fill_random(*g, rng, kv_range, score_lo, score_hi);
    const Frag out = kvc::GatedPool<R>::pool(g->kv, g->score);
    for (int i = 0; i < kN; ++i) check(out[i], pool64(*g, i), max_abs_kv(*g, i), "pool", i);
  }
  KVC_REPORT(check);
}

/// Reinterprets members [first, first + Count) of a group as the array `partial` takes.
template <int Count, int N>
const kvc::Array<float, N> (&members(const kvc::Array<float, N>* base, int first))[Count] {
  return *reinterpret_cast<const kvc::Array<float, N>(*)[Count]>(base + first);
}

}  // namespace

TEST_CASE("GatedPool<R>::pool on random fragments equals the float64 softmax formula") {
  check_pool_random<2>(21, 2000, 3.f, -6.f, 6.f);
  check_pool_random<4>(41, 1000, 3.f, -6.f, 6.f);
  check_pool_random<8>(81, 500, 3.f, -6.f, 6.f);
  check_pool_random<16>(161, 300, 3.f, -6.f, 6.f);
  check_pool_random<128>(1281, 60, 3.f, -6.f, 6.f);
}

TEST_CASE("GatedPool<R>::pool with extreme scores (+-80) and a large spread") {
  check_pool_random<2>(22, 1000, 100.f, -80.f, 80.f);
  check_pool_random<4>(42, 500, 1e-3f, -80.f, 80.f);
  check_pool_random<16>(162, 200, 10.f, -80.f, 80.f);
  check_pool_random<128>(1282, 40, 1e4f, -80.f, 80.f);
  check_pool_random<8>(82, 300, 1.f, -3000.f, 3000.f);
  check_pool_random<128>(1283, 20, 1.f, 70.f, 80.f);  // all large: no overflow after - max
}

TEST_CASE("GatedPool: hand case, equal scores average, one dominant score selects") {
  kvc::Array<float, 2> kv[2], score[2];
  kv[0][0] = 1.f;  kv[1][0] = 3.f;  score[0][0] = 0.5f; score[1][0] = 0.5f;    // mean = 2
  kv[0][1] = -4.f; kv[1][1] = 8.f;  score[0][1] = 0.f;  score[1][1] = std::log(3.f);  // 1:3
  const auto out = kvc::GatedPool<2>::pool(kv, score);
  CHECK(out[0] == 2.f);
  CHECK(std::fabs(out[1] - 5.f) <= 1e-5f);  // (-4 * 1 + 8 * 3) / 4 = 5
}

template <int R, int Parts>
void check_split(uint64_t seed, int trials) {
  static_assert(R % Parts == 0, "");
  constexpr int kPart = R / Parts;
  std::mt19937_64 rng(seed);
  PoolChecker check;
  PoolChecker exact_empty;
  auto g = std::make_unique<Group<R>>();
  using Pool = kvc::GatedPool<R>;
  for (int trial = 0; trial < trials; ++trial) {
    fill_random(*g, rng, 3.f, -8.f, 8.f);
    // Partials of the parts, then merged pairwise in a tree: (0+1)+(2+3) ...
    std::vector<kvc::PoolState<kN>> states;
    for (int p = 0; p < Parts; ++p)
      states.push_back(Pool::template partial<kPart>(members<kPart>(g->kv, p * kPart),
                                                     members<kPart>(g->score, p * kPart)));
    for (int width = 1; width < Parts; width *= 2)
      for (int p = 0; p + width < Parts; p += 2 * width) Pool::merge(states[p], states[p + width]);
    const Frag tree = Pool::finish(states[0]);
    // Sequential merge into the empty state.
    auto seq = Pool::template empty<kN>();
    for (int p = 0; p < Parts; ++p)
      Pool::merge(seq, Pool::template partial<kPart>(members<kPart>(g->kv, p * kPart),
                                                     members<kPart>(g->score, p * kPart)));
    const Frag sequential = Pool::finish(seq);
    // Unequal split: 1 member, then the rest.
    auto uneven = Pool::template partial<1>(members<1>(g->kv, 0), members<1>(g->score, 0));
    Pool::merge(uneven, Pool::template partial<R - 1>(members<R - 1>(g->kv, 1),
                                                      members<R - 1>(g->score, 1)));
    const Frag one_rest = Pool::finish(uneven);
    // Merging the empty state changes nothing.
    auto whole = Pool::template partial<R>(g->kv, g->score);
    const Frag before = Pool::finish(whole);
    Pool::merge(whole, Pool::template empty<kN>());
    const Frag after = Pool::finish(whole);
    for (int i = 0; i < kN; ++i) {
      const double want = pool64(*g, i), scale = max_abs_kv(*g, i);
      check(tree[i], want, scale, "tree merge", i);
      check(sequential[i], want, scale, "sequential merge", i);
      check(one_rest[i], want, scale, "1 + (R-1) merge", i);
      exact_empty(after[i], double(before[i]), 0.0, "merge(empty) changed", i);
    }
  }
  KVC_REPORT(check);
  KVC_REPORT(exact_empty);
}

TEST_CASE("GatedPool partial/merge over any split equals pool") {
  check_split<128, 8>(1, 40);
  check_split<128, 2>(2, 20);
  check_split<16, 4>(3, 200);
  check_split<8, 8>(4, 200);
  check_split<2, 2>(5, 500);
  check_split<4, 2>(6, 500);
}

TEST_CASE("GatedPool: -inf scores weigh 0, all -inf gives NaN, NaN and +inf scores give NaN") {
  constexpr int R = 8;
  std::mt19937_64 rng(99);
  auto g = std::make_unique<Group<R>>();
  fill_random(*g, rng, 3.f, -5.f, 5.f);
  // Channel c: member (c % R) has score -inf (for c < R); channel 8: all -inf;
  // channel 9: member 0 NaN; channel 10: member 5 NaN; channel 11: member 3 +inf;
  // channel 12: all -inf but one; channel 13: -inf in member 0 (the first max candidate).
  for (int c = 0; c < R; ++c) g->score[c][c] = -kInf;
  for (int q = 0; q < R; ++q) g->score[q][8] = -kInf;
  g->score[0][9] = kNaN;
  g->score[5][10] = kNaN;
  g->score[3][11] = kInf;
  for (int q = 0; q < R; ++q) g->score[q][12] = q == 6 ? 1.f : -kInf;
  g->score[0][13] = -kInf;

  // Expected for the -inf cases: the pooled value of the finite members only.
  auto finite_members = [&](int channel) {
    double m = -1e300, num = 0, den = 0;
    for (int q = 0; q < R; ++q)
      if (std::isfinite(g->score[q][channel])) m = std::max(m, double(g->score[q][channel]));
    for (int q = 0; q < R; ++q)
      if (std::isfinite(g->score[q][channel])) {
        const double w = std::exp(double(g->score[q][channel]) - m);
        num += double(g->kv[q][channel]) * w;
        den += w;
      }
    return num / den;
  };

  auto check_all = [&](const Frag& out, const char* how) {
    INFO(how);
    PoolChecker check;
    for (int c = 0; c < R; ++c) check(out[c], finite_members(c), max_abs_kv(*g, c), how, c);
    check(out[12], double(g->kv[6][12]), 1.0, how, 12);
    check(out[13], finite_members(13), max_abs_kv(*g, 13), how, 13);
    check(out[14], pool64(*g, 14), max_abs_kv(*g, 14), how, 14);  // untouched channels
    check(out[15], pool64(*g, 15), max_abs_kv(*g, 15), how, 15);
    KVC_REPORT(check);
    CHECK(std::isnan(out[8]));
    CHECK(std::isnan(out[9]));
    CHECK(std::isnan(out[10]));
    CHECK(std::isnan(out[11]));
    // The reference agrees on the NaN cases (its formula is the same).
    CHECK(std::isnan(pool64(*g, 8)));
    CHECK(std::isnan(pool64(*g, 9)));
    CHECK(std::isnan(pool64(*g, 10)));
    CHECK(std::isnan(pool64(*g, 11)));
  };
  using Pool = kvc::GatedPool<R>;
  check_all(Pool::pool(g->kv, g->score), "pool");
  // Same through partial/merge with the special members in either half.
  auto a = Pool::template partial<4>(members<4>(g->kv, 0), members<4>(g->score, 0));
  Pool::merge(a, Pool::template partial<4>(members<4>(g->kv, 4), members<4>(g->score, 4)));
  check_all(Pool::finish(a), "partial 4 + 4");
  auto b = Pool::template partial<4>(members<4>(g->kv, 4), members<4>(g->score, 4));
  Pool::merge(b, Pool::template partial<4>(members<4>(g->kv, 0), members<4>(g->score, 0)));
  check_all(Pool::finish(b), "partial 4 + 4, merged in the other order");
  auto c = Pool::template empty<kN>();
  for (int q = 0; q < R; ++q)
    Pool::merge(c, Pool::template partial<1>(members<1>(g->kv, q), members<1>(g->score, q)));
  check_all(Pool::finish(c), "8 single-member partials");
}

TEST_CASE("GatedPool<1>::pool is the identity, bit for bit") {
  std::mt19937_64 rng(1);
  kvc::Array<float, 512> kv[1];
  for (int i = 0; i < 512; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i == 0) u = 0x7fc0dead;  // a NaN payload survives
    if (i == 1) u = 0x80000000;  // -0
    std::memcpy(&kv[0][i], &u, 4);
  }
  const auto out = kvc::GatedPool<1>::pool(kv);
  int mismatches = 0;
  for (int i = 0; i < 512; ++i) mismatches += fbits(out[i]) != fbits(kv[0][i]);
  CHECK(mismatches == 0);
  static_assert(kvc::GatedPool<1>::kRatio == 1 && kvc::GatedPool<128>::kRatio == 128, "");
}

// ---------------------------------------------------------------------------------------
// RmsNorm

namespace {

/// contract §1.4 in float64: x / sqrt(sum x^2 / D + eps) * w.
template <int D>
std::vector<double> rms_norm64(const kvc::Array<float, D>& x, const kvc::Array<uint16_t, D>& w,
                               float eps) {
  double ss = 0;
  for (int d = 0; d < D; ++d) ss += double(x[d]) * double(x[d]);
  const double denom = std::sqrt(ss / D + double(eps));
  std::vector<double> out(D);
  for (int d = 0; d < D; ++d) out[d] = double(x[d]) / denom * kvcref::bf16_to_double(w[d]);
  return out;
}

/// Relative bound of the fp32 evaluation: a sum of D positive terms ((D-1) u), halved by the
/// square root, plus a handful of roundings (divide, add eps, sqrt, reciprocal, 2 products).
template <int D>
double rms_tolerance() {
  return (D / 2.0 + 8.0) * std::ldexp(1.0, -24);
}

template <int D>
struct RmsCase {
  kvc::Array<float, D> x;
  kvc::Array<uint16_t, D> w;
};

template <int D>
void check_rms(const RmsCase<D>& c, float eps, const char* what) {
  using Norm = kvc::RmsNorm<D>;
  const auto want = rms_norm64<D>(c.x, c.w, eps);
  const auto out = Norm::apply(c.x, Norm::inv_rms(Norm::sum_squares(c.x), eps), c.w);
  // The same row split into 4 fragments, sum_squares added up by the "kernel".
  constexpr int kQ = D / 4;
  kvc::Array<float, kQ> frag[4];
  kvc::Array<uint16_t, kQ> wfrag[4];
  float total = 0.f;
  for (int f = 0; f < 4; ++f) {
    for (int i = 0; i < kQ; ++i) {
      frag[f][i] = c.x[f * kQ + i];
      wfrag[f][i] = c.w[f * kQ + i];
    }
    total += Norm::sum_squares(frag[f]);
  }
  const float inv = Norm::inv_rms(total, eps);
  int64_t mismatches = 0;
  std::string first;
  const double tol = rms_tolerance<D>();
  for (int d = 0; d < D; ++d) {
    const float split = Norm::apply(frag[d / kQ], inv, wfrag[d / kQ])[d % kQ];
    for (float got : {out[d], split}) {
      if (!(std::fabs(double(got) - want[d]) <= tol * std::fabs(want[d])) && mismatches++ == 0) {
        char buf[192];
        std::snprintf(buf, sizeof buf, "%s D=%d eps=%g d=%d: got %a (0x%08x), float64 %a", what, D,
                      double(eps), d, got, fbits(got), want[d]);
        first = buf;
      }
    }
  }
  INFO(first);
  CHECK(mismatches == 0);
}

template <int D>
void rms_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto c = std::make_unique<RmsCase<D>>();
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float eps : {1e-20f, 1e-6f}) {
    for (float scale : {1.f, 300.f, 1e-3f, 1e-10f, 1e-18f}) {
      for (int trial = 0; trial < 5; ++trial) {
        for (int d = 0; d < D; ++d) {
          c->x[d] = u(rng) * scale;
          c->w[d] = kvcref::bf16_from_float(u(rng) * 2.f);
        }
        check_rms<D>(*c, eps, "random");
      }
    }
  }
}

}  // namespace

TEST_CASE("RmsNorm<D>::apply(x, inv_rms(sum_squares(x), eps), w) equals float64, D = 128/256/512") {
  rms_random<128>(128);
  rms_random<256>(256);
  rms_random<512>(512);
}

TEST_CASE("RmsNorm: constant vectors by hand") {
  auto c = std::make_unique<RmsCase<512>>();
  using Norm = kvc::RmsNorm<512>;
  // x = 2 everywhere, eps 0: sum 2048, mean 4, rms 2 -> out = weight exactly.
  c->x.fill(2.f);
  c->w.fill(0x3f80);  // 1.0
  CHECK(Norm::sum_squares(c->x) == 2048.f);
  CHECK(Norm::inv_rms(2048.f, 0.f) == 0.5f);
  auto out = Norm::apply(c->x, Norm::inv_rms(Norm::sum_squares(c->x), 0.f), c->w);
  for (int d = 0; d < 512; ++d) REQUIRE(out[d] == 1.f);
  c->w.fill(0xbfc0);  // -1.5
  out = Norm::apply(c->x, 0.5f, c->w);
  for (int d = 0; d < 512; ++d) REQUIRE(out[d] == -1.5f);
  // x = 1e-3, eps = 1e-6: mean square equals eps, out = 1 / sqrt(2).
  c->x.fill(1e-3f);
  c->w.fill(0x3f80);
  out = Norm::apply(c->x, Norm::inv_rms(Norm::sum_squares(c->x), 1e-6f), c->w);
  for (int d = 0; d < 512; ++d) REQUIRE(std::fabs(double(out[d]) - std::sqrt(0.5)) <= 1e-5);
  // x = 0: eps keeps it finite, out = 0.
  c->x.fill(0.f);
  out = Norm::apply(c->x, Norm::inv_rms(Norm::sum_squares(c->x), 1e-20f), c->w);
  for (int d = 0; d < 512; ++d) REQUIRE(out[d] == 0.f);
  // eps matters at eps 1e-20 when the mean square is ~1e-20.
  c->x.fill(1e-10f);
  check_rms<512>(*c, 1e-20f, "x = 1e-10, eps = 1e-20");
  const float inv = Norm::inv_rms(Norm::sum_squares(c->x), 1e-20f);
  CHECK(std::fabs(double(inv) * 1e-10 - std::sqrt(0.5)) <= 1e-5);
}
