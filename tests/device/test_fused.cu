// SPDX-License-Identifier: Apache-2.0
// Device tier: the fused op writes exactly what Op A then Op B write, bit for bit.
#include <numeric>
#include <string>

#include "compress_case.hpp"
#include "insert_case.hpp"

namespace {

using kvctest::Batch;
using kvctest::DeviceArray;

struct FusedCase {
  int ratio;
  int head_dim;
  kvc::CacheLayout layout;
  kvc::RopeStyle style;
  bool bf16;
  bool write_latent;
  int window = 0;  // > 0: fp8_ds_mla warp rows launched directly with windows of this many tokens
  int split = 0;   // ... and 2 x window for none (0), the first third (1) or all but the last one or two (2)
};

// Head dim 576 (V3.2) is outside the default head-dim list: its instances at ratio 2.
kvc::Status compress_any(const kvc::CompressParams& p, bool bf16) {
  if (p.head_dim != 576) return kvc::compress(p, nullptr);
  if (p.ratio != 2) return kvc::Status::not_supported("test: head dim 576 at ratio 2 only");
  return bf16 ? kvc::launch_compress<2, 576, kvc::bf16_t>(p, nullptr)
              : kvc::launch_compress<2, 576, float>(p, nullptr);
}
kvc::Status fused_any(const kvc::FusedParams& p, bool bf16) {
  if (p.compress.head_dim != 576) return kvc::fused(p, nullptr);
  if (p.compress.ratio != 2) return kvc::Status::not_supported("test: head dim 576 at ratio 2 only");
  return bf16 ? kvc::launch_fused<2, 576, kvc::bf16_t, kvc::Fp8DsMlaV32Layout>(p, nullptr)
              : kvc::launch_fused<2, 576, float, kvc::Fp8DsMlaV32Layout>(p, nullptr);
}

void run_fused(const FusedCase& c, uint64_t seed) {
  // std::string: doctest prints a plain const char* as a pointer.
  INFO("fused R=", c.ratio, " D=", c.head_dim, " ", std::string(kvc::cache_layout_name(c.layout)),
       std::string(c.style == kvc::RopeStyle::kGptJ ? " gptj" : " neox"), std::string(c.bf16 ? " bf16" : " fp32"),
       std::string(c.write_latent ? " +latent" : " no latent"), " window ", c.window, " split ", c.split);
  std::mt19937_64 rng(seed);
  kvctest::BatchShape s = kvctest::random_shape(rng, c.ratio, c.head_dim, 12, 4 * c.ratio + 60, 3000, 3);
  s.requests[0].chunk_len = 0;
  Batch b = kvctest::make_batch(rng, s);
  if (c.bf16) kvctest::round_batch_to_bf16(b);
  const int64_t T = b.num_tokens();

  // Cache slots: a random permutation over pages; padding where the ring slot is padding,
  // plus some more.
  const int block_size = 64;
  const auto shape = kvctest::cache_shape(c.layout, c.head_dim, block_size, T / block_size + 2, true);
  std::vector<int64_t> all(static_cast<size_t>(shape.pages * block_size));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> cache_slot(all.begin(), all.begin() + T);
  for (int64_t t = 0; t < T; ++t)
    if (b.slot[static_cast<size_t>(t)] < 0 || rng() % 8 == 0) cache_slot[static_cast<size_t>(t)] = -1;
  const auto cache_init = kvctest::random_bytes(rng, static_cast<size_t>(shape.pages * shape.page_stride));
  const auto table = kvctest::rope_table(3000 + 4 * c.ratio + 61, false);
  DeviceArray<float> d_table(table.values), d_scale(std::vector<float>{0.05f});
  DeviceArray<int64_t> d_cache_slot(cache_slot);

  // Op A then Op B.
  kvctest::CompressDevice ab(b, c.bf16, false, rng);
  DeviceArray<uint8_t> cache_ab(cache_init);
  kvc::RecordArgs record;
  record.rope_style = c.style;
  record.layout = c.layout;
  record.cos_sin = d_table.ptr();
  record.cos_sin_stride_elems = 64;
  record.cos_sin_rows = table.rows;
  record.cache_slot = kvc::IndexPtr{d_cache_slot.ptr(), kvc::IndexType::kInt64};
  record.cache.block_size = block_size;
  record.cache.page_stride_bytes = shape.page_stride;
  record.cache.row_stride_bytes = shape.row_stride;
  record.cache.scale = d_scale.ptr();
  record.cache.data = cache_ab.ptr();
  const kvc::CompressParams pa = ab.params(b);
  // Warp rows with given windows: Op A with the same windows (the same code path as the
  // fused op's), else what the host API picks for both.
  kvc::detail::WindowSizes windows{0, 0};
  if (c.window > 0) {
    REQUIRE((c.layout == kvc::CacheLayout::kFp8DsMla && c.head_dim == 512 && (c.ratio == 2 || c.ratio == 4)));
    const int64_t n = (T + c.window - 1) / c.window;
    windows = {c.window, c.split == 0 ? 0 : static_cast<int>(c.split == 1 ? n / 3 : n / 2 - 1)};
    KVC_CHECK_STATUS(c.ratio == 2 ? kvctest::launch_warp_rows<2>(pa, c.bf16, windows)
                                  : kvctest::launch_warp_rows<4>(pa, c.bf16, windows));
  } else {
    KVC_CHECK_STATUS(compress_any(pa, c.bf16));
  }
  kvc::InsertParams pb;
  pb.ratio = c.ratio;
  pb.head_dim = c.head_dim;
  pb.num_tokens = T;
  pb.latent = pa.latent;
  pb.latent_stride_elems = pa.latent_stride_elems;
  pb.positions = pa.positions;
  pb.record = record;
  KVC_CHECK_STATUS(kvctest::insert_any(pb, nullptr));

  // Fused, from the same initial ring, latent poison and cache poison.
  kvctest::CompressDevice fu(b, c.bf16, false, rng);
  fu.latent_init = ab.latent_init;
  fu.latent.upload(fu.latent_init);
  DeviceArray<uint8_t> cache_fu(cache_init);
  kvc::FusedParams pf;
  pf.compress = fu.params(b);
  if (!c.write_latent) pf.compress.latent = nullptr;
  pf.record = record;
  pf.record.cache.data = cache_fu.ptr();
  if (c.window > 0) {
    const kvc::RecordEpilogue<kvc::Fp8DsMlaLayout> epilogue{pf.record};
    KVC_CHECK_STATUS(c.ratio == 2 ? kvctest::launch_warp_rows<2>(pf.compress, c.bf16, windows, epilogue)
                                  : kvctest::launch_warp_rows<4>(pf.compress, c.bf16, windows, epilogue));
  } else {
    KVC_CHECK_STATUS(fused_any(pf, c.bf16));
  }
  kvctest::sync();

  const auto bytes_ab = cache_ab.download(), bytes_fu = cache_fu.download();
  int64_t changed = 0;
  for (size_t i = 0; i < bytes_ab.size(); ++i) {
    if (bytes_ab[i] != bytes_fu[i])
      FAIL("cache byte ", i, ": A+B ", kvctest::hex(bytes_ab[i]), ", fused ", kvctest::hex(bytes_fu[i]));
    changed += bytes_ab[i] != cache_init[i];
  }
  CHECK(changed > 0);
  if (c.write_latent)
    CHECK(fu.latent.download() == ab.latent.download());
  else
    CHECK(fu.latent.download() == fu.latent_init);
  if (c.ratio > 1) {
    const auto ra = ab.ring_values(), rf = fu.ring_values();
    REQUIRE(ra.size() == rf.size());
    CHECK(std::memcmp(ra.data(), rf.data(), ra.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("fused op equals Op A then Op B, bit for bit") {
  uint64_t seed = 7000;
  for (int ratio : {1, 2, 4, 128})
    for (auto layout : kvc::kBuiltinLayouts)
      for (bool bf16 : {false, true}) {
        if (layout == kvc::CacheLayout::kFp8DsMlaV32 && ratio != 2) continue;  // 576: ratio 2
        const auto style = (seed % 2) ? kvc::RopeStyle::kNeoX : kvc::RopeStyle::kGptJ;
        run_fused({ratio, kvctest::layout_head_dim(layout, 512), layout, style, bf16, (seed % 3) != 0}, seed);
        ++seed;
      }
  for (auto layout : {kvc::CacheLayout::kBf16Rows, kvc::CacheLayout::kFp8Rows})
    for (auto style : {kvc::RopeStyle::kGptJ, kvc::RopeStyle::kNeoX})
      run_fused({2, 128, layout, style, false, true}, seed++);
}

TEST_CASE("fused warp rows with wide windows equal Op A then Op B, every window size") {
  // The launch sizes the warp rows' windows to the GPU; here every size from R up, alone
  // and with some windows twice as long (the one-wave split).
  uint64_t seed = 7600;
  for (int ratio : {2, 4}) {
    const int widest = ratio == 2 ? kvc::CompressConfig<2, 512, float, 32>::kMaxWindow
                                  : kvc::CompressConfig<4, 512, float, 32>::kMaxWindow;
    for (int window = ratio; window <= widest; window *= 2)
      for (int split = 0; split < (2 * window <= widest ? 3 : 1); ++split)
        for (bool bf16 : {false, true}) {
          const auto style = (seed % 2) ? kvc::RopeStyle::kNeoX : kvc::RopeStyle::kGptJ;
          run_fused({ratio, 512, kvc::CacheLayout::kFp8DsMla, style, bf16, (seed % 3) != 0, window, split}, seed);
          ++seed;
        }
  }
}
