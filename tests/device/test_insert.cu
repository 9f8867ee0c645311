// SPDX-License-Identifier: Apache-2.0
// Device tier: Op B (rope–quantize–insert) against the float64 reference, every layout.
#include <string>

#include "insert_case.hpp"

namespace {

using kvctest::DeviceArray;

struct InsertCase {
  int ratio = 2;
  int head_dim = 512;
  kvc::CacheLayout layout = kvc::CacheLayout::kFp8DsMla;
  kvc::RopeStyle style = kvc::RopeStyle::kGptJ;
  bool table_bf16 = false;
  bool index32 = false;
  bool limit_pages = false;  // pass num_pages so some slots fall past the end
  bool padded = true;
  bool sanitize = false;
  double nonfinite = 0.0;
  int64_t tokens = 3000;
  int max_chunk = 300;  // chunks of 1 .. max_chunk consecutive positions (decode: a few)
  int block_size = 64;
  // window > 0: fp8_ds_mla warp records launched directly with these windows (R = 1 or 2),
  // instead of the host API's choice.
  kvc::detail::WindowSizes windows{0, 0};

  std::string name() const {
    return std::string(kvc::cache_layout_name(layout)) + " R=" + std::to_string(ratio) +
           " D=" + std::to_string(head_dim) + (style == kvc::RopeStyle::kGptJ ? " gptj" : " neox") +
           (table_bf16 ? " bf16-table" : "") + (index32 ? " int32" : " int64") +
           (limit_pages ? " num_pages" : "") + (sanitize ? " sanitize" : "") +
           (nonfinite > 0 ? " nonfinite" : "") + " T=" + std::to_string(tokens) +
           " chunks<=" + std::to_string(max_chunk) +
           (windows.window > 0 ? " windows " + std::to_string(windows.window) + " wide " + std::to_string(windows.wide)
                               : std::string());
  }
};

/// Everything one Op B problem needs on the host and the device.
struct InsertProblem {
  InsertCase c;
  std::vector<int64_t> positions, slot;
  std::vector<uint16_t> latent;
  int64_t latent_stride_elems = 0;
  kvctest::RopeTable table;
  kvctest::CacheShape shape;
  int64_t num_pages = -1;
  std::vector<uint8_t> cache_init;
  float scale = 1.f;

  DeviceArray<int64_t> d_pos64, d_slot64;
  DeviceArray<int32_t> d_pos32, d_slot32;
  DeviceArray<uint16_t> d_latent, d_table_bf16;
  DeviceArray<float> d_table, d_scale;
  DeviceArray<uint8_t> d_cache;

  InsertProblem(const InsertCase& cs, std::mt19937_64& rng) : c(cs) {
    const int64_t T = c.tokens;
    positions = kvctest::random_positions(rng, T, 4000, c.max_chunk);
    // Every position of the batch has a table row: starts below 4000, chunks of at most
    // max_chunk positions.
    table = kvctest::rope_table(4000 + c.max_chunk + 1, c.table_bf16);
    latent_stride_elems = c.head_dim + 16;
    latent = kvctest::random_latent(rng, T, c.head_dim, latent_stride_elems, c.nonfinite);
    shape = kvctest::cache_shape(c.layout, c.head_dim, c.block_size, T / c.block_size + 3, c.padded);
    std::vector<int64_t> all(static_cast<size_t>(shape.pages * c.block_size));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slot.assign(all.begin(), all.begin() + T);
    for (auto& s : slot)
      if (rng() % 10 == 0) s = -1 - static_cast<int64_t>(rng() % 3);  // padding
    if (c.limit_pages) num_pages = shape.pages - 1;
    scale = c.layout == kvc::CacheLayout::kFp8Rows ? 0.0371f : 1.f;
    cache_init = kvctest::random_bytes(rng, static_cast<size_t>(shape.pages * shape.page_stride));
    upload();
  }

  void upload() {
    d_pos64.upload(positions);
    d_slot64.upload(slot);
    d_pos32.upload(std::vector<int32_t>(positions.begin(), positions.end()));
    d_slot32.upload(std::vector<int32_t>(slot.begin(), slot.end()));
    d_latent.upload(latent);
    d_table.upload(table.values);
    if (c.table_bf16) d_table_bf16.upload(table.bf16);
    d_scale.upload({scale});
    d_cache.upload(cache_init);
  }

  kvc::IndexPtr index(DeviceArray<int64_t>& a64, DeviceArray<int32_t>& a32) {
    return c.index32 ? kvc::IndexPtr{a32.ptr(), kvc::IndexType::kInt32}
                     : kvc::IndexPtr{a64.ptr(), kvc::IndexType::kInt64};
  }

  kvc::RecordArgs record_args() {
    kvc::RecordArgs r;
    r.rope_dim = 64;
    r.rope_style = c.style;
    r.layout = c.layout;
    r.cos_sin = c.table_bf16 ? static_cast<const void*>(d_table_bf16.ptr()) : d_table.ptr();
    r.cos_sin_dtype = c.table_bf16 ? kvc::DType::kBFloat16 : kvc::DType::kFloat32;
    r.cos_sin_stride_elems = table.stride;
    r.cos_sin_rows = table.rows;
    r.cache_slot = index(d_slot64, d_slot32);
    r.cache.data = d_cache.ptr();
    r.cache.block_size = c.block_size;
    r.cache.page_stride_bytes = shape.page_stride;
    r.cache.row_stride_bytes = shape.row_stride;
    r.cache.num_pages = num_pages;
    r.cache.scale = d_scale.ptr();
    r.sanitize = c.sanitize;
    return r;
  }

  kvc::InsertParams params() {
    kvc::InsertParams p;
    p.ratio = c.ratio;
    p.head_dim = c.head_dim;
    p.num_tokens = c.tokens;
    p.latent = reinterpret_cast<const kvc::bf16_t*>(d_latent.ptr());
    p.latent_stride_elems = latent_stride_elems;
    p.positions = index(d_pos64, d_pos32);
    p.record = record_args();
    return p;
  }

  kvcref::InsertExpected reference() const {
    kvcref::InsertInputs in;
    in.head_dim = c.head_dim;
    in.rope_dim = 64;
    in.ratio = c.ratio;
    in.rope_style = c.style == kvc::RopeStyle::kGptJ ? kvcref::RopeStyle::GptJ : kvcref::RopeStyle::NeoX;
    in.num_tokens = c.tokens;
    in.latent = latent.data();
    in.latent_stride_elems = latent_stride_elems;
    in.positions = positions.data();
    in.slot = slot.data();
    in.cos_sin = table.values.data();
    in.cos_sin_stride_elems = table.stride;
    in.cos_sin_rows = table.rows;
    in.layout = kvctest::ref_layout(c.layout);
    in.block_size = c.block_size;
    in.page_stride_bytes = shape.page_stride;
    in.row_stride_bytes = shape.row_stride;
    in.num_pages = num_pages;
    in.fp8_scale = scale;
    in.sanitize = c.sanitize;
    return kvcref::insert_reference(in, cache_init);
  }
};

/// fp8_ds_mla warp records launched with `windows` (the host API sizes them to the GPU).
template <int R>
kvc::Status launch_warp_records(const kvc::InsertParams& p, kvc::detail::WindowSizes windows) {
  using Cfg = kvc::InsertConfig<R, 512, 32>;
  return kvc::detail::launch_kernel("insert_kernel", kvc::insert_kernel<R, 512, kvc::Fp8DsMlaLayout, 32>,
                                    dim3(static_cast<unsigned>(Cfg::blocks(p.num_tokens, windows))),
                                    dim3(Cfg::kThreads), nullptr, kvc::LaunchOptions{}, p, windows);
}

void run_case(const InsertCase& c, uint64_t seed) {
  INFO(c.name(), " seed ", seed);
  std::mt19937_64 rng(seed);
  InsertProblem prob(c, rng);
  if (c.windows.window > 0) {
    REQUIRE((c.layout == kvc::CacheLayout::kFp8DsMla && c.head_dim == 512 && (c.ratio == 1 || c.ratio == 2)));
    KVC_CHECK_STATUS(c.ratio == 1 ? launch_warp_records<1>(prob.params(), c.windows)
                                  : launch_warp_records<2>(prob.params(), c.windows));
  } else {
    KVC_CHECK_STATUS(kvctest::insert_any(prob.params(), nullptr));
  }
  kvctest::sync();
  const auto want = prob.reference();
  int64_t written = 0;
  for (auto w : want.written) written += w;
  if (c.tokens >= 64) CHECK(written > 0);  // a call of a few tokens may close no group
  kvctest::check_cache(prob.d_cache.download(), want, c.nonfinite > 0, c.name().c_str());
}

}  // namespace

TEST_CASE("Op B: every layout, ratio, rope style, table dtype and index type against float64") {
  uint64_t seed = 1000;
  for (auto layout : kvc::kBuiltinLayouts)
    for (int ratio : {1, 2, 4, 128})
      for (auto style : {kvc::RopeStyle::kGptJ, kvc::RopeStyle::kNeoX}) {
        if (layout == kvc::CacheLayout::kFp8DsMlaV32 && ratio == 128) continue;  // ratios 1, 2, 4
        InsertCase c;
        c.layout = layout;
        c.head_dim = kvctest::layout_head_dim(layout, 512);
        c.ratio = ratio;
        c.style = style;
        c.table_bf16 = (seed % 2) == 1;
        c.index32 = (seed % 3) == 1;
        c.limit_pages = (seed % 4) == 2;
        c.padded = (seed % 5) != 3;
        c.tokens = ratio == 128 ? 20000 : 3000;
        run_case(c, seed++);
      }
}

TEST_CASE("Op B: decode-sized calls (a block per record), every layout and small ratio") {
  // Below kvc::kWarpRecordMinTokens a record is spread over a block, and at ratios 1 and 2
  // the window's rows are loaded before its writers are known (InsertConfig::kSpeculativeRows):
  // chunks of 1-4 tokens put two writers in one window (two requests closing side by side)
  // and non-closing tokens first; odd T ends on a partial window; at ratio 1, 2047 tokens
  // give windows of two tokens, past the speculative size (the kernel's general path).
  uint64_t seed = 1200;
  for (auto layout : kvc::kBuiltinLayouts)
    for (int ratio : {1, 2, 4})
      for (int64_t tokens : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{129}, int64_t{2047}}) {
        InsertCase c;
        c.layout = layout;
        c.head_dim = kvctest::layout_head_dim(layout, 512);
        c.ratio = ratio;
        c.tokens = tokens;
        c.max_chunk = 4;
        c.style = (seed % 2) == 0 ? kvc::RopeStyle::kGptJ : kvc::RopeStyle::kNeoX;
        c.table_bf16 = (seed % 3) == 1;
        c.index32 = (seed % 5) == 2;
        c.limit_pages = (seed % 4) == 3;
        run_case(c, seed++);
      }
}

TEST_CASE("Op B: large calls, windows sized to the GPU's waves") {
  // Warp records size their windows to the GPU (InsertConfig::windows with wave_blocks: the
  // largest window whose blocks fill 7/8 of a wave, twice that for the first windows where
  // the launch would need between one and two waves): 40000 tokens take 16-token windows
  // (on an H100, 388 of 2112 warps with 32 tokens: one wave), and 150000 tokens need several
  // waves of the largest windows.
  uint64_t seed = 1500;
  for (int ratio : {1, 2})
    for (auto layout : {kvc::CacheLayout::kFp8DsMla, kvc::CacheLayout::kBf16Rows, kvc::CacheLayout::kMxfp8,
                        kvc::CacheLayout::kNvfp4}) {
      InsertCase c;
      c.layout = layout;
      c.ratio = ratio;
      c.tokens = 40000;
      c.limit_pages = ratio == 2;
      run_case(c, seed++);
    }
  using Cfg = kvc::InsertConfig<2, 512, 32>;
  const int wave = kvc::detail::wave_blocks<kvc::insert_kernel<2, 512, kvc::Fp8DsMlaLayout, 32>>(Cfg::kThreads);
  REQUIRE(wave > 0);
  const int64_t big = 150000;
  const kvc::detail::WindowSizes windows = Cfg::windows(big, wave);
  CHECK(windows.window == Cfg::kLargeWindow);
  CHECK(windows.wide == 0);
  CHECK(Cfg::blocks(big, windows) > wave);  // several waves
  InsertCase c;
  c.layout = kvc::CacheLayout::kFp8DsMla;
  c.tokens = big;
  c.limit_pages = true;
  run_case(c, seed++);
}

TEST_CASE("Op B: warp records with every window split, launched directly") {
  // Whatever this GPU's waves make the host API choose, every window from the smallest to
  // 32 tokens runs, alone and with the first third, or all but the last one or two, of the
  // windows twice as long (the one-wave split of InsertConfig::windows), on mixed batches:
  // prefill chunks, decode chunks, padding, a partial last window.
  uint64_t seed = 1600;
  for (int ratio : {1, 2})
    for (int window = ratio; window <= 32; window *= 2)
      for (int split = 0; split < (2 * window <= 32 ? 3 : 1); ++split) {
        InsertCase c;
        c.ratio = ratio;
        c.tokens = 4999;
        c.max_chunk = 700;
        c.limit_pages = (seed % 2) == 0;
        c.style = (seed % 3) == 0 ? kvc::RopeStyle::kNeoX : kvc::RopeStyle::kGptJ;
        const int64_t n = (c.tokens + window - 1) / window;
        c.windows = {window, split == 0 ? 0 : static_cast<int>(split == 1 ? n / 3 : n / 2 - 1)};
        run_case(c, seed++);
      }
}

TEST_CASE("Op B: head dims 128 and 256 in the row layouts") {
  uint64_t seed = 2000;
  for (int head_dim : {128, 256})
    for (auto layout : {kvc::CacheLayout::kBf16Rows, kvc::CacheLayout::kFp8Rows})
      for (auto style : {kvc::RopeStyle::kGptJ, kvc::RopeStyle::kNeoX}) {
        InsertCase c;
        c.head_dim = head_dim;
        c.layout = layout;
        c.style = style;
        c.block_size = 16;
        run_case(c, seed++);
      }
}

TEST_CASE("Op B: non-finite latents, with and without the sanitizing policy") {
  uint64_t seed = 3000;
  for (auto layout : kvc::kBuiltinLayouts)
    for (bool sanitize : {false, true}) {
      InsertCase c;
      c.layout = layout;
      c.head_dim = kvctest::layout_head_dim(layout, 512);
      c.sanitize = sanitize;
      c.nonfinite = 0.3;
      c.ratio = 1;
      run_case(c, seed++);
    }
}

TEST_CASE("Op B: a CUDA graph captured once and replayed with new inputs, every layout") {
  std::mt19937_64 rng(4000);
  for (auto layout : kvc::kBuiltinLayouts) {
  InsertCase c;
  c.ratio = 2;
  c.layout = layout;
  c.head_dim = kvctest::layout_head_dim(layout, 512);
  INFO(c.name());
  InsertProblem prob(c, rng);
  cudaStream_t stream;
  KVC_CHECK_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  KVC_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const kvc::Status s = kvctest::insert_any(prob.params(), stream);
  KVC_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  REQUIRE_MESSAGE(s.ok(), s.message());
  KVC_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    // New inputs in the same buffers: latent values, positions and the poisoned cache.
    prob.latent = kvctest::random_latent(rng, c.tokens, c.head_dim, prob.latent_stride_elems, 0.0);
    prob.positions = kvctest::random_positions(rng, c.tokens, 4000);
    prob.cache_init = kvctest::random_bytes(rng, prob.cache_init.size());
    prob.d_latent.upload(prob.latent);
    prob.d_pos64.upload(prob.positions);
    prob.d_cache.upload(prob.cache_init);
    KVC_CHECK_CUDA(cudaGraphLaunch(exec, stream));
    KVC_CHECK_CUDA(cudaStreamSynchronize(stream));
    kvctest::check_cache(prob.d_cache.download(), prob.reference(), false, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  }
}

TEST_CASE("Op B: invalid arguments return an error and write nothing") {
  std::mt19937_64 rng(5000);
  InsertCase c;
  InsertProblem prob(c, rng);
  struct Breaker {
    const char* expect;
    void (*apply)(kvc::InsertParams&);
  };
  const Breaker breakers[] = {
      {"compress ratio 3", [](kvc::InsertParams& p) { p.ratio = 3; }},
      {"head dim 384", [](kvc::InsertParams& p) { p.head_dim = 384; }},
      {"fp8_ds_mla holds head dim 512", [](kvc::InsertParams& p) { p.head_dim = 256; }},
      {"latent is null", [](kvc::InsertParams& p) { p.latent = nullptr; }},
      {"latent row stride", [](kvc::InsertParams& p) { p.latent_stride_elems = 500; }},
      {"page stride", [](kvc::InsertParams& p) { p.record.cache.page_stride_bytes = 64 * 584 - 16; }},
      {"cos_sin is null", [](kvc::InsertParams& p) { p.record.cos_sin = nullptr; }},
      {"rope dim 32", [](kvc::InsertParams& p) { p.record.rope_dim = 32; }},
      {"cache slot is null", [](kvc::InsertParams& p) { p.record.cache_slot.data = nullptr; }},
      {"num_pages", [](kvc::InsertParams& p) { p.record.cache.num_pages = -7; }},
      {"not aligned", [](kvc::InsertParams& p) {
         p.record.cache.data = static_cast<uint8_t*>(p.record.cache.data) + 4; }},
  };
  for (const auto& b : breakers) {
    kvc::InsertParams p = prob.params();
    b.apply(p);
    const kvc::Status s = kvc::insert(p, nullptr);
    CHECK_MESSAGE(!s.ok(), b.expect);
    CHECK_MESSAGE(std::string(s.message()).find(b.expect) != std::string::npos, s.message(),
                  " does not name ", b.expect);
  }
  kvctest::sync();
  CHECK(prob.d_cache.download() == prob.cache_init);
  kvc::InsertParams empty = prob.params();
  empty.num_tokens = 0;
  empty.latent = nullptr;
  CHECK(kvc::insert(empty, nullptr).ok());
}
