// SPDX-License-Identifier: Apache-2.0
// Device tier: Op A (save–compress–norm) against the float64 reference.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compress_case.hpp"

namespace {

using kvctest::Batch;
using kvctest::BatchShape;

struct Variant {
  bool bf16 = false;
  bool index32 = false;
};

/// Marks some in-chunk tokens as padding too (slot -1): they close nothing and are not stored.
void add_inner_padding(Batch& b, std::mt19937_64& rng, int one_in) {
  for (int64_t t = 0; t < b.num_tokens(); ++t)
    if (rng() % one_in == 0) b.slot[static_cast<size_t>(t)] = -1;
}

void run_batch(Batch b, const Variant& v, std::mt19937_64& rng, const std::string& what) {
  INFO(what, " R=", b.ratio, " D=", b.head_dim, v.bf16 ? " bf16" : " fp32", v.index32 ? " int32" : " int64",
       " T=", b.num_tokens());
  if (v.bf16) kvctest::round_batch_to_bf16(b);
  kvctest::CompressDevice dev(b, v.bf16, v.index32, rng);
  KVC_CHECK_STATUS(kvc::compress(dev.params(b), nullptr));
  kvctest::sync();
  const auto want = kvcref::compress_reference(kvctest::reference_inputs(b));
  kvctest::check_compress(b, want, dev, dev.latent_init, what);
}

BatchShape shape_of(int ratio, int head_dim, std::vector<kvctest::RequestShape> requests, int padding) {
  BatchShape s;
  s.ratio = ratio;
  s.head_dim = head_dim;
  s.requests = std::move(requests);
  s.padding_tokens = padding;
  return s;
}

}  // namespace

TEST_CASE("Op A: prefill, decode, speculative verify and mixed batches against float64") {
  std::mt19937_64 rng(11);
  uint64_t n = 0;
  for (int ratio : {1, 2, 4, 128})
    for (int head_dim : {128, 512}) {
      const Variant v{(n % 2) == 1, (n % 3) == 2};
      ++n;
      // Prefill: long chunks at odd and even starts; for ratio 128 several groups.
      const int long_len = ratio == 128 ? 1100 : 700;
      run_batch(kvctest::make_batch(rng, shape_of(ratio, head_dim, {{long_len, 13}, {long_len / 2, 256}}, 0)),
                v, rng, "prefill");
      // Decode: 64 requests x 1 token at random positions.
      run_batch(kvctest::make_batch(rng, kvctest::random_shape(rng, ratio, head_dim, 64, 1, 5000, 3)), v, rng,
                "decode");
      // Speculative verify with k = 1..7 drafts: 1 + k tokens per request.
      for (int k = 1; k <= 7; ++k) {
        BatchShape s = kvctest::random_shape(rng, ratio, head_dim, 24, 0, 5000, 2);
        for (auto& r : s.requests) r.chunk_len = 1 + k;
        s.capacity = kvc::ring_capacity(ratio, k);
        run_batch(kvctest::make_batch(rng, s), v, rng, "spec k=" + std::to_string(k));
      }
      // Mixed: empty chunks, decode-sized and prefill-sized chunks, inner and trailing padding.
      BatchShape s = kvctest::random_shape(rng, ratio, head_dim, 20, 200, 3000, 5);
      s.requests[3].chunk_len = 0;
      s.requests[7].chunk_len = 0;
      Batch b = kvctest::make_batch(rng, s);
      add_inner_padding(b, rng, 9);
      run_batch(std::move(b), v, rng, "mixed");
    }
}

TEST_CASE("Op A: every compiled ratio and head dim, padded strides") {
  std::mt19937_64 rng(12);
  for (int ratio : kvc::kSupportedRatios)
    for (int head_dim : kvc::kSupportedHeadDims) {
      BatchShape s = kvctest::random_shape(rng, ratio, head_dim, 6, 3 * ratio + 5, 4000, 2);
      const int64_t width = ratio > 1 ? 2 * head_dim : head_dim;
      s.kv_score_stride_elems = width + 16;
      s.ring_row_stride = 2 * head_dim + 8;
      s.capacity = kvc::ring_capacity(ratio, 3);
      s.ring_page_stride = s.capacity * s.ring_row_stride + 16;  // vLLM pads pages like this
      for (bool bf16 : {false, true})
        run_batch(kvctest::make_batch(rng, s), Variant{bf16, ratio % 4 == 0}, rng, "all instances");
    }
}

TEST_CASE("Op A: split groups in calls of >= 16 R tokens") {
  // Ratios >= 16 on calls of many groups: chunks at odd and even starts, one longer than
  // the ring (its head group's rows are overwritten by the same call), decode requests mixed in.
  std::mt19937_64 rng(14);
  for (int ratio : {16, 32, 64, 128}) {
    const int C = kvc::ring_capacity(ratio, 1);
    BatchShape s = shape_of(ratio, 512, {{8 * ratio + 3, 5 * ratio + 7}, {3 * C + 5, 2 * ratio + 1},
                                         {5 * ratio, 0}, {2, 3 * ratio - 1}, {1, 77}},
                            2);
    s.capacity = C;
    Batch b = kvctest::make_batch(rng, s);
    REQUIRE(b.num_tokens() >= 16 * ratio);
    for (bool bf16 : {false, true})
      run_batch(Batch(b), Variant{bf16, ratio == 64}, rng, "long call R=" + std::to_string(ratio));
  }
}

namespace {

/// Op A's split groups launched directly in clusters of `cluster` blocks (1: no cluster
/// attribute, the path of GPUs before sm_90), windows of `window` tokens.
template <int R>
kvc::Status launch_split_groups(const kvc::CompressParams& p, bool bf16, int cluster, int window) {
  using Cfg = kvc::CompressConfig<R, 512, float>;
  const kvc::detail::WindowSizes windows{window, 0};
  const auto blocks = static_cast<unsigned>(Cfg::blocks(p.num_tokens, windows) * cluster);
  const auto run = [&](auto kernel) {
    return kvc::detail::launch_kernel_in_clusters("compress_kernel", kernel, dim3(blocks), dim3(Cfg::kThreads),
                                                  static_cast<unsigned>(cluster), nullptr,
                                                  kvc::LaunchOptions{true}, p, kvc::LatentEpilogue{}, windows);
  };
  return bf16 ? run(kvc::compress_kernel<R, 512, kvc::bf16_t, kvc::LatentEpilogue>)
              : run(kvc::compress_kernel<R, 512, float, kvc::LatentEpilogue>);
}

template <int R>
void run_cluster_sizes(std::mt19937_64& rng) {
  using Cfg = kvc::CompressConfig<R, 512, float>;
  static_assert(Cfg::kSplitGroup && Cfg::kMaxClusterBlocks > 1, "a ratio whose groups split over a cluster");
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  CHECK(Cfg::cluster_blocks(major) == (major >= 9 ? Cfg::kMaxClusterBlocks : 1));
  // Chunks at odd starts, one longer than the ring (its head group's ring rows are
  // overwritten by the same call: rank 0's deferred stores, once its peers' slices have
  // landed), decode and speculative requests, several groups closing in one window (a
  // peer's slot freed for the next group), padding.
  const int C = kvc::ring_capacity(R, 3);
  BatchShape s = shape_of(R, 512, {{3 * C + 5, 2 * R + 1}, {4 * R + 3, R - 1}, {2, 3 * R - 1}, {1, R - 1},
                                   {4, 5 * R - 2}, {0, 9}, {R + 7, 4 * R}},
                          3);
  s.capacity = C;
  Batch b = kvctest::make_batch(rng, s);
  add_inner_padding(b, rng, 11);
  Batch b16 = b;
  kvctest::round_batch_to_bf16(b16);
  const auto want = kvcref::compress_reference(kvctest::reference_inputs(b));
  const auto want16 = kvcref::compress_reference(kvctest::reference_inputs(b16));
  // Every window the kernel runs, by powers of two from kTokensPerBlock (16 at ratio 128)
  // down to 1 (detail::split_group_window's picks at decode), which put several requests'
  // groups on separate clusters; every cluster up to kMaxClusterBlocks (4 at ratio 128: each
  // peer's slices stored into rank 0's slot for it).
  for (int window = Cfg::kTokensPerBlock; window >= 1; window /= 2)
    for (int cluster = 1; cluster <= Cfg::kMaxClusterBlocks; cluster *= 2) {
      if (cluster > 1 && major < 9) break;
      if (window < Cfg::kTokensPerBlock / 2 && window > 1 && cluster != 2 && cluster != 4) continue;  // a sample
      for (bool bf16 : {false, true}) {
        const std::string label = "window " + std::to_string(window) + " cluster " + std::to_string(cluster);
        INFO(label, " R=", R, bf16 ? " bf16" : " fp32", " T=", b.num_tokens());
        const Batch& run = bf16 ? b16 : b;
        kvctest::CompressDevice dev(run, bf16, false, rng);
        KVC_CHECK_STATUS(launch_split_groups<R>(dev.params(run), bf16, cluster, window));
        kvctest::sync();
        kvctest::check_compress(run, bf16 ? want16 : want, dev, dev.latent_init, label);
      }
    }
}

}  // namespace

TEST_CASE("Op A: split groups pooled by clusters of every size") {
  // kvc::compress launches ratios >= 16 in clusters of CompressConfig::cluster_blocks blocks
  // on sm_90; here every power-of-two size up to it, and no cluster at all, on the same batch,
  // with every window of detail::split_group_window.
  std::mt19937_64 rng(17);
  run_cluster_sizes<32>(rng);
  run_cluster_sizes<128>(rng);
}

TEST_CASE("Op A: a direct launch with windows the instance cannot run writes nothing") {
  // compress_kernel checks its windows (CompressConfig::usable_windows): a split-group window
  // past kTokensPerBlock would overrun its shared-memory plans, an empty one would give every
  // block the same tokens, and a wide window past kMaxWindow would have no lane for its tokens.
  std::mt19937_64 rng(29);
  const auto check_nothing_written = [&](int ratio, auto kernel, unsigned threads,
                                         std::initializer_list<kvc::detail::WindowSizes> bad) {
    const int C = kvc::ring_capacity(ratio, 3);
    BatchShape s = shape_of(ratio, 512, {{3 * ratio + 1, ratio - 1}, {2, 2 * ratio - 1}, {40, 0}}, 2);
    s.capacity = C;
    const Batch b = kvctest::make_batch(rng, s);
    kvctest::CompressDevice dev(b, false, false, rng);
    const auto ring_before = dev.ring_values();
    for (const kvc::detail::WindowSizes& w : bad) {
      INFO("ratio ", ratio, " window ", w.window, " wide ", w.wide);
      const unsigned blocks = static_cast<unsigned>(b.num_tokens());  // a block a token: more than enough
      KVC_CHECK_STATUS(kvc::detail::launch_kernel_in_clusters("compress_kernel", kernel, dim3(blocks), dim3(threads), 1u,
                                                              nullptr, kvc::LaunchOptions{}, dev.params(b),
                                                              kvc::LatentEpilogue{}, w));
      kvctest::sync();
      CHECK(dev.latent.download() == dev.latent_init);
      const auto ring_after = dev.ring_values();
      CHECK(std::equal(ring_before.begin(), ring_before.end(), ring_after.begin(),
                       [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; }));
    }
  };
  using C128 = kvc::CompressConfig<128, 512, float>;
  check_nothing_written(128, kvc::compress_kernel<128, 512, float, kvc::LatentEpilogue>, C128::kThreads,
                        {{0, 0}, {C128::kTokensPerBlock + 1, 0}, {4 * C128::kTokensPerBlock, 0}, {4, 1}, {-2, 0}});
  using W2 = kvc::CompressConfig<2, 512, float, 32>;
  check_nothing_written(2, kvc::compress_kernel<2, 512, float, kvc::LatentEpilogue, 32>, W2::kThreads,
                        {{0, 0}, {3, 0}, {2 * W2::kMaxWindow, 0}, {W2::kMaxWindow, 1}, {2, -1}});
}

TEST_CASE("Op A: a direct launch of block rows for a call past their 32-bit indices writes nothing") {
  // Block rows index tokens and kv_score / latent rows in 32 bits (CompressConfig::
  // kCompactIndex); compress_kernel returns before its PDL wait for a call that does not fit
  // them (compact_index_fits). Had it run, these strides would address far past the buffers
  // (memcheck) and write the latents of the wrong rows.
  std::mt19937_64 rng(41);
  BatchShape s = shape_of(2, 512, {{2, 7}, {1, 4}, {2, 20}, {3, 1}}, 1);
  s.capacity = kvc::ring_capacity(2, 3);
  const Batch b = kvctest::make_batch(rng, s);
  kvctest::CompressDevice dev(b, false, false, rng);
  const auto ring_before = dev.ring_values();
  using Cfg = kvc::CompressConfig<2, 512, float>;
  static_assert(Cfg::kCompactIndex && Cfg::kRowThreads == 128, "ratio-2 block rows are compact-index");
  REQUIRE(kvc::use_block_rows<2, 512>(dev.params(b)));
  const auto bad = [&](const char* what, auto change) {
    INFO(what);
    kvc::CompressParams p = dev.params(b);
    change(p);
    REQUIRE_FALSE(kvc::compact_index_fits<2, 512>(p));
    KVC_CHECK_STATUS(kvc::detail::launch_kernel("compress_kernel", kvc::compress_kernel<2, 512, float, kvc::LatentEpilogue>,
                                                dim3(static_cast<unsigned>(b.num_tokens() / 2 + 1)), dim3(Cfg::kThreads),
                                                nullptr, kvc::LaunchOptions{}, p, kvc::LatentEpilogue{},
                                                Cfg::windows(b.num_tokens(), 0)));
    kvctest::sync();
    CHECK(dev.latent.download() == dev.latent_init);
    const auto ring_after = dev.ring_values();
    CHECK(std::equal(ring_before.begin(), ring_before.end(), ring_after.begin(),
                     [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; }));
  };
  bad("kv_score stride 2^31", [](kvc::CompressParams& p) { p.kv_score_stride_elems = int64_t{1} << 31; });
  bad("kv_score stride 2^32 + 1024", [](kvc::CompressParams& p) { p.kv_score_stride_elems = (int64_t{1} << 32) + 1024; });
  bad("latent stride 2^30", [](kvc::CompressParams& p) { p.latent_stride_elems = int64_t{1} << 30; });
  bad("tokens past 2^30", [](kvc::CompressParams& p) { p.num_tokens = kvc::kCompactMaxTokens + 1; });
  // The same call through kvc::compress runs, in block rows, and is right (the rest of this
  // file checks both mappings against the reference); here only that it writes latents.
  KVC_CHECK_STATUS(kvc::compress(dev.params(b), nullptr));
  kvctest::sync();
  CHECK(dev.latent.download() != dev.latent_init);
}

TEST_CASE("Op A: both row mappings, on each side of the switches (kvc::use_warp_rows)") {
  // Small calls spread a row over a block, large ones hold a row per warp: kWarpRowMinWindows
  // R-token windows, or at ratio 2 kWarpRowPrefillMinWindows when the requests are long
  // (these batches: two long chunks and 40 one-token requests, so ratio 2 switches at the
  // lower count, ratios 1 and 4 at the higher).
  // Each side of the switch, with long chunks at odd starts (head groups, ring tails longer
  // than the ring), decode requests and padding.
  std::mt19937_64 rng(15);
  for (int ratio : {1, 2, 4})
    for (int64_t windows : {kvc::kWarpRowPrefillMinWindows - 1, kvc::kWarpRowPrefillMinWindows,
                            kvc::kWarpRowMinWindows - 1, kvc::kWarpRowMinWindows}) {
      const int64_t T = windows * ratio;
      const int decode = 40, padding = 3;
      const int64_t rest = T - decode - padding;
      const int first = static_cast<int>(rest / 2 + 1), second = static_cast<int>(rest) - first;
      BatchShape s = shape_of(ratio, 512, {{first, 77}, {second, 5}}, padding);
      for (int i = 0; i < decode; ++i) s.requests.push_back({1, 1000 + 13 * i});
      Batch b = kvctest::make_batch(rng, s);
      REQUIRE(b.num_tokens() == T);
      // Which side of the switch this call is on (ratio 1 has no requests: windows only).
      const int64_t reqs = ratio > 1 ? 2 + decode : 0;
      const bool warp_rows = windows >= (ratio == 2 ? kvc::kWarpRowPrefillMinWindows : kvc::kWarpRowMinWindows);
      REQUIRE(kvc::use_warp_rows(ratio, windows, T, reqs) == warp_rows);
      for (bool bf16 : {false, true})
        run_batch(Batch(b), Variant{bf16, ratio == 2}, rng, "windows " + std::to_string(windows));
    }
}

namespace {

template <int R>
void run_wide_windows(std::mt19937_64& rng) {
  using Cfg = kvc::CompressConfig<R, 512, float, 32>;
  static_assert(Cfg::kWideWindows && Cfg::kThreads == 128, "ratio-R warp rows hold wide windows");
  const int C = kvc::ring_capacity(R, 3);
  std::vector<std::pair<std::string, BatchShape>> shapes;
  // Chunks at odd starts, longer than the ring (deferred tail stores of their head groups),
  // decode and speculative requests, empty chunks, trailing padding.
  BatchShape s = shape_of(R, 512, {{3 * C + 5, 2 * R + 1}, {C + 1, 7}, {0, 40}, {1, 1001}, {4, 333},
                                   {5 * R + 3, R - 1}, {2, 65}, {37, 12}, {1 + R, 90}},
                          3);
  s.capacity = C;
  shapes.emplace_back("long chunks", s);
  // Mixed: random chunk lengths and starts, inner padding (below), empty chunks.
  s = kvctest::random_shape(rng, R, 512, 30, 4 * C, 4000, 5);
  s.requests[4].chunk_len = 0;
  s.capacity = C;
  shapes.emplace_back("mixed", s);
  // Decode-sized requests only: every window holds several requests.
  s = kvctest::random_shape(rng, R, 512, 48, 0, 4000, 2);
  for (auto& r : s.requests) r.chunk_len = 1 + static_cast<int>(rng() % 4);
  s.capacity = C;
  shapes.emplace_back("speculative", s);
  for (const auto& entry : shapes) {
    const std::string& what = entry.first;  // a plain name: INFO captures it
    Batch b = kvctest::make_batch(rng, entry.second);
    if (what == "mixed") add_inner_padding(b, rng, 7);
    const auto want = kvcref::compress_reference(kvctest::reference_inputs(b));
    // Every window size, alone and (where twice it still fits) with the first third, or all
    // but the last one or two, of the windows twice as long (CompressConfig::windows'
    // one-wave split).
    std::vector<kvc::detail::WindowSizes> sizes;
    for (int window = R; window <= Cfg::kMaxWindow; window *= 2) {
      sizes.push_back({window, 0});
      if (2 * window > Cfg::kMaxWindow) continue;
      const int64_t n = (b.num_tokens() + window - 1) / window;
      sizes.push_back({window, static_cast<int>(n / 3)});
      sizes.push_back({window, static_cast<int>(n / 2 - 1)});
    }
    Batch b16 = b;  // the bf16 input and its reference, once for every size
    kvctest::round_batch_to_bf16(b16);
    const auto want16 = kvcref::compress_reference(kvctest::reference_inputs(b16));
    for (const kvc::detail::WindowSizes& windows : sizes)
      for (bool bf16 : {false, true}) {
        const std::string label = what + " window " + std::to_string(windows.window) + " wide " + std::to_string(windows.wide);
        INFO(label, " R=", R, bf16 ? " bf16" : " fp32", " T=", b.num_tokens());
        const Batch& run = bf16 ? b16 : b;
        const auto& expected = bf16 ? want16 : want;
        kvctest::CompressDevice dev(run, bf16, false, rng);
        KVC_CHECK_STATUS(kvctest::launch_warp_rows<R>(dev.params(run), bf16, windows));
        kvctest::sync();
        kvctest::check_compress(run, expected, dev, dev.latent_init, label);
      }
  }
}

}  // namespace

TEST_CASE("Op A: warp rows with wide windows (several groups a warp), every window size") {
  // The launch sizes a warp row's window to the GPU (CompressConfig::windows), so a
  // test call gets whatever this GPU's waves give; here every size from R to kMaxWindow
  // runs on batches with every kind of window content: chunk starts and ends, head groups
  // reading the ring, deferred stores, padding inside and after the chunks.
  std::mt19937_64 rng(16);
  run_wide_windows<2>(rng);
  run_wide_windows<4>(rng);
}

TEST_CASE("Op A: chunks longer than the ring overwrite rows the head group still reads") {
  std::mt19937_64 rng(13);
  for (int ratio : {2, 4, 8, 16, 128}) {
    // The chunk starts mid-group, so its first group reads ring rows; the tail store of the
    // same chunk hits those rows (chunk length > capacity).
    const int C = kvc::ring_capacity(ratio, 0);
    for (int64_t start : {int64_t{1}, int64_t{ratio - 1}, int64_t{5 * ratio + ratio / 2 + 1}}) {
      if (start % ratio == 0) continue;
      BatchShape s = shape_of(ratio, 512, {{3 * C + 5, start}, {C + 1, start + 7}}, 1);
      s.capacity = C;
      run_batch(kvctest::make_batch(rng, s), Variant{}, rng, "long chunk start " + std::to_string(start));
    }
  }
}

TEST_CASE("Op A: multi-step — a prefill chunk, then decode steps with speculative drafts and rollback") {
  std::mt19937_64 rng(14);
  for (int ratio : {2, 4, 128}) {
    const int k = 3;  // drafts per step
    const int C = kvc::ring_capacity(ratio, k);
    const int num_reqs = 5;
    // Step 0 defines the requests' ring blocks; later steps keep them and the ring.
    BatchShape s0 = shape_of(ratio, 512, {}, 0);
    s0.capacity = C;
    std::vector<int64_t> next(num_reqs);
    for (int r = 0; r < num_reqs; ++r) {
      const int64_t start = 2 * r + 1;  // odd starts
      const int len = r == 2 ? 0 : 40 + 17 * r;
      s0.requests.push_back({len, start});
      next[static_cast<size_t>(r)] = start + len;
    }
    Batch b = kvctest::make_batch(rng, s0);
    std::vector<int64_t> block(num_reqs);
    for (int r = 0; r < num_reqs; ++r) block[static_cast<size_t>(r)] = -1;
    // Blocks are fixed per request: recover them from step 0's slots, or assign free ones.
    std::vector<bool> used(static_cast<size_t>(b.ring_blocks), false);
    for (int r = 0; r < num_reqs; ++r)
      if (b.qsl[r + 1] > b.qsl[r]) {
        block[r] = b.slot[static_cast<size_t>(b.qsl[r])] / C;
        used[static_cast<size_t>(block[r])] = true;
      }
    for (int r = 0; r < num_reqs; ++r)
      if (block[r] < 0)
        for (int64_t x = 0; x < b.ring_blocks; ++x)
          if (!used[static_cast<size_t>(x)]) { block[r] = x; used[static_cast<size_t>(x)] = true; break; }

    kvctest::CompressDevice dev(b, false, false, rng);
    std::vector<float> ring = b.ring;
    for (int step = 0; step < 12; ++step) {
      if (step > 0) {
        BatchShape s = shape_of(ratio, 512, {}, step % 3);
        s.capacity = C;
        for (int r = 0; r < num_reqs; ++r) s.requests.push_back({1 + k, next[static_cast<size_t>(r)]});
        const std::vector<uint16_t> weight = b.weight;
        b = kvctest::make_batch(rng, s);
        b.weight = weight;
        b.ring = ring;  // the ring as the previous step left it
        for (int r = 0; r < num_reqs; ++r)
          for (int32_t t = b.qsl[r]; t < b.qsl[r + 1]; ++t)
            b.slot[static_cast<size_t>(t)] = block[r] * C + b.positions[static_cast<size_t>(t)] % C;
        dev.upload_inputs(b);
        // Accept 1..1+k of the tokens: the next step restarts after the last accepted one.
        for (int r = 0; r < num_reqs; ++r) next[static_cast<size_t>(r)] += 1 + static_cast<int64_t>(rng() % (k + 1));
      }
      dev.latent.upload(dev.latent_init);
      KVC_CHECK_STATUS(kvc::compress(dev.params(b), nullptr));
      kvctest::sync();
      const auto want = kvcref::compress_reference(kvctest::reference_inputs(b));
      kvctest::check_compress(b, want, dev, dev.latent_init, "step " + std::to_string(step));
      ring = want.ring_after;
    }
  }
}

TEST_CASE("Op A: a CUDA graph captured once and replayed with new inputs") {
  std::mt19937_64 rng(15);
  BatchShape s = kvctest::random_shape(rng, 2, 512, 32, 40, 3000, 2);
  for (auto& r : s.requests) r.chunk_len = std::max(r.chunk_len, 1);
  Batch b = kvctest::make_batch(rng, s);
  kvctest::CompressDevice dev(b, false, false, rng);
  cudaStream_t stream;
  KVC_CHECK_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  KVC_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const kvc::Status st = kvc::compress(dev.params(b), stream);
  KVC_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  REQUIRE_MESSAGE(st.ok(), st.message());
  KVC_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    // Same shapes (a graph fixes the launch), new values and new positions.
    Batch next = kvctest::make_batch(rng, s);
    next.weight = b.weight;
    for (size_t r = 0; r < s.requests.size(); ++r) {
      const int64_t shift = static_cast<int64_t>(rng() % 50);
      for (int32_t t = next.qsl[r]; t < next.qsl[r + 1]; ++t) {
        next.positions[static_cast<size_t>(t)] += shift;
        next.slot[static_cast<size_t>(t)] = (b.slot[static_cast<size_t>(b.qsl[r])] / next.capacity) * next.capacity +
                                            next.positions[static_cast<size_t>(t)] % next.capacity;
      }
    }
    dev.upload_inputs(next);
    dev.upload_ring(next.ring);
    dev.latent.upload(dev.latent_init);
    KVC_CHECK_CUDA(cudaGraphLaunch(exec, stream));
    KVC_CHECK_CUDA(cudaStreamSynchronize(stream));
    const auto want = kvcref::compress_reference(kvctest::reference_inputs(next));
    kvctest::check_compress(next, want, dev, dev.latent_init, "graph replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_CASE("Op A: invalid arguments return their own error and write nothing") {
  std::mt19937_64 rng(16);
  Batch b = kvctest::make_batch(rng, kvctest::random_shape(rng, 2, 512, 8, 20, 500, 1));
  kvctest::CompressDevice dev(b, false, false, rng);
  const auto ring_before = dev.ring_values();
  struct Breaker {
    const char* expect;
    void (*apply)(kvc::CompressParams&);
  };
  const Breaker breakers[] = {
      {"compress ratio 3", [](kvc::CompressParams& p) { p.ratio = 3; }},
      {"head dim 384", [](kvc::CompressParams& p) { p.head_dim = 384; }},
      {"kv_score is null", [](kvc::CompressParams& p) { p.kv_score = nullptr; }},
      {"kv_score row stride 1000", [](kvc::CompressParams& p) { p.kv_score_stride_elems = 1000; }},
      {"kv_score row stride 1026 is not a multiple of 4", [](kvc::CompressParams& p) { p.kv_score_stride_elems = 1026; }},
      {"positions is null", [](kvc::CompressParams& p) { p.positions.data = nullptr; }},
      {"slot is null", [](kvc::CompressParams& p) { p.slot.data = nullptr; }},
      {"qsl is null", [](kvc::CompressParams& p) { p.qsl = nullptr; }},
      {"qsl_size 1", [](kvc::CompressParams& p) { p.qsl_size = 1; }},
      {"req is null", [](kvc::CompressParams& p) { p.req = nullptr; }},
      {"ring is null", [](kvc::CompressParams& p) { p.ring = nullptr; }},
      {"ring capacity 1", [](kvc::CompressParams& p) { p.ring_layout.capacity = 1; }},
      {"ring row stride", [](kvc::CompressParams& p) { p.ring_layout.row_stride_elems = 512; }},
      {"overlaps", [](kvc::CompressParams& p) { p.ring_layout.page_stride_elems -= 4; }},
      {"weight is null", [](kvc::CompressParams& p) { p.weight = nullptr; }},
      {"latent is null", [](kvc::CompressParams& p) { p.latent = nullptr; }},
      {"latent row stride", [](kvc::CompressParams& p) { p.latent_stride_elems = 100; }},
      {"eps", [](kvc::CompressParams& p) { p.eps = -1.f; }},
      {"num_tokens -1", [](kvc::CompressParams& p) { p.num_tokens = -1; }},
      {"kv_score address", [](kvc::CompressParams& p) { p.kv_score = static_cast<const float*>(p.kv_score) + 1; }},
  };
  for (const auto& br : breakers) {
    kvc::CompressParams p = dev.params(b);
    br.apply(p);
    const kvc::Status s = kvc::compress(p, nullptr);
    CHECK_MESSAGE(!s.ok(), br.expect);
    CHECK_MESSAGE(std::string(s.message()).find(br.expect) != std::string::npos, s.message(),
                  " does not name ", br.expect);
  }
  kvctest::sync();
  CHECK(dev.latent.download() == dev.latent_init);
  CHECK(dev.ring_values().size() == ring_before.size());
  CHECK(std::equal(ring_before.begin(), ring_before.end(), dev.ring_values().begin(),
                   [](float a, float c) { return std::memcmp(&a, &c, 4) == 0; }));
  kvc::CompressParams empty = dev.params(b);
  empty.num_tokens = 0;
  empty.kv_score = nullptr;
  CHECK(kvc::compress(empty, nullptr).ok());
}
