// SPDX-License-Identifier: Apache-2.0
// kvc_debug_contract_tests: the KVC_DEBUG contract checks (kernel/contract_check.cuh) trap.
//
// Compiled with KVC_DEBUG. A trap leaves the CUDA context unusable, so every case runs in a
// child process: the parent makes no CUDA call itself, it re-runs this executable as
// `kvc_debug_contract_tests --case N` and reads the child's output and exit status.
// A broken-contract case passes when the child's synchronisation reported a CUDA error
// (exit 3) and its output holds the check's one-line message "[name]"; a valid case passes
// when the child exits 0 with no message. `--probe` (the first child) exits 77 with a skip
// line when there is no CUDA device; the parent then exits 77 too (ctest: Skipped).
//
//   kvc_debug_contract_tests            all cases
//   kvc_debug_contract_tests --case 7   one case, in this process (prints its trap message)
//   kvc_debug_contract_tests --list
#if !defined(KVC_DEBUG)
#error "tests/debug/main.cu is the KVC_DEBUG test: compile it with -DKVC_DEBUG"
#endif

#include <kvcompress/launch/insert.cuh>
#include <kvcompress/launch/fused.cuh>

#include <cuda_runtime.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kRatio = 2;
constexpr int kHeadDim = 512;
constexpr int kCapacity = 8;
constexpr int kBlockSize = 64;      // fp8_ds_mla records per cache page
constexpr int64_t kPageBytes = 37440;  // vLLM's padded fp8_ds_mla page at B = 64

// Child exit codes.
constexpr int kExitOk = 0;
constexpr int kExitCudaError = 3;  // what a trap gives
constexpr int kExitSetup = 4;      // the case itself is broken (validation, allocation)

/// One call's index data in host memory: requests packed in order, each in its own ring
/// block (slot = block * C + pos % C), optional padding, cache slots for the writing tokens.
struct Batch {
  std::vector<int64_t> pos, slot, cache_slot;
  std::vector<int32_t> qsl{0}, req;
  int64_t ring_blocks = 0;  // allocated blocks
  int64_t num_blocks = -1;  // RingLayout::num_blocks given to the op

  int64_t tokens() const { return static_cast<int64_t>(pos.size()); }
  int num_reqs() const { return static_cast<int>(qsl.size()) - 1; }

  void request(int len, int64_t start, int64_t block) {
    const int r = num_reqs();
    for (int i = 0; i < len; ++i) {
      pos.push_back(start + i);
      slot.push_back(block * kCapacity + (start + i) % kCapacity);
      req.push_back(r);
    }
    qsl.push_back(static_cast<int32_t>(pos.size()));
    ring_blocks = std::max(ring_blocks, block + 1);
  }
  /// Trailing tokens after the last request: slot -1, the last request's index.
  void trailing_padding(int n) {
    for (int i = 0; i < n; ++i) {
      pos.push_back(2 * i + 1);
      slot.push_back(-1);
      req.push_back(num_reqs() - 1);
    }
  }
  /// A distinct cache slot for every token that closes a group with a ring slot, -1 else.
  void number_records() {
    cache_slot.assign(pos.size(), -1);
    int64_t next = 0;
    for (size_t t = 0; t < pos.size(); ++t)
      if (slot[t] >= 0 && pos[t] >= 0 && (pos[t] + 1) % kRatio == 0) cache_slot[t] = next++;
  }
};

/// The small valid batch the broken cases start from: 4 requests (one empty, one decode
/// step), padding inside a request and after the last one. Tokens:
///   0..4   request 0, positions 0..4, block 3 (token 2 is padding)
///          request 1, empty
///   5..16  request 2, positions 33..44, block 0
///   17     request 3, position 9, block 1 (decode)
///   18..20 trailing padding
/// Block 2 belongs to no request.
Batch small_batch() {
  Batch b;
  b.request(5, 0, 3);
  b.request(0, 17, 4);
  b.request(12, 33, 0);
  b.request(1, 9, 1);
  b.trailing_padding(3);
  b.slot[2] = -1;
  b.ring_blocks = 5;
  b.number_records();
  return b;
}

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    if (cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) ptr = nullptr;
    else cudaMemset(ptr, 0, std::max<size_t>(n, 1) * sizeof(T));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (ptr && !host.empty())
      cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

enum Ops : unsigned { kCompress = 1u, kInsert = 2u, kFused = 4u, kAllOps = 7u };

/// Device copies of a batch and the params of the three ops over them.
struct Problem {
  int64_t T;
  DeviceBuffer<float> kv_score, ring, cos_sin;
  DeviceBuffer<int64_t> pos, slot, cache_slot;
  DeviceBuffer<int32_t> qsl, req;
  DeviceBuffer<uint16_t> weight, latent;
  DeviceBuffer<uint8_t> cache;
  kvc::CompressParams a;
  kvc::InsertParams b;
  kvc::FusedParams f;

  static int64_t max_of(const std::vector<int64_t>& v) {
    int64_t m = 0;
    for (int64_t x : v) m = std::max(m, x);
    return m;
  }

  explicit Problem(const Batch& batch)
      : T(batch.tokens()),
        kv_score(static_cast<size_t>(T) * 2 * kHeadDim),
        ring(static_cast<size_t>(batch.ring_blocks) * kCapacity * 2 * kHeadDim),
        cos_sin(static_cast<size_t>(max_of(batch.pos) + kRatio + 1) * 64),
        pos(batch.pos),
        slot(batch.slot),
        cache_slot(batch.cache_slot),
        qsl(batch.qsl),
        req(batch.req),
        weight(std::vector<uint16_t>(kHeadDim, 0x3f80)),  // bf16 1.0
        latent(static_cast<size_t>(T) * kHeadDim),
        cache(static_cast<size_t>(max_of(batch.cache_slot) / kBlockSize + 1) * kPageBytes) {
    a.ratio = kRatio;
    a.head_dim = kHeadDim;
    a.dtype = kvc::DType::kFloat32;
    a.num_tokens = T;
    a.kv_score = kv_score.ptr;
    a.kv_score_stride_elems = 2 * kHeadDim;
    a.positions = {pos.ptr, kvc::IndexType::kInt64};
    a.slot = {slot.ptr, kvc::IndexType::kInt64};
    a.qsl = qsl.ptr;
    a.qsl_size = static_cast<int64_t>(batch.qsl.size());
    a.req = req.ptr;
    a.ring = ring.ptr;
    a.ring_layout.capacity = kCapacity;
    a.ring_layout.page_stride_elems = int64_t{kCapacity} * 2 * kHeadDim;
    a.ring_layout.row_stride_elems = 2 * kHeadDim;
    a.ring_layout.num_blocks = batch.num_blocks;
    a.weight = reinterpret_cast<const kvc::bf16_t*>(weight.ptr);
    a.eps = 1e-6f;
    a.latent = reinterpret_cast<kvc::bf16_t*>(latent.ptr);
    a.latent_stride_elems = kHeadDim;

    kvc::RecordArgs r;
    r.layout = kvc::CacheLayout::kFp8DsMla;
    r.cos_sin = cos_sin.ptr;
    r.cos_sin_dtype = kvc::DType::kFloat32;
    r.cos_sin_stride_elems = 64;
    r.cos_sin_rows = max_of(batch.pos) + kRatio + 1;
    r.cache_slot = {cache_slot.ptr, kvc::IndexType::kInt64};
    r.cache.data = cache.ptr;
    r.cache.block_size = kBlockSize;
    r.cache.page_stride_bytes = kPageBytes;

    b.ratio = kRatio;
    b.head_dim = kHeadDim;
    b.num_tokens = T;
    b.latent = a.latent;
    b.latent_stride_elems = kHeadDim;
    b.positions = a.positions;
    b.record = r;

    f.compress = a;
    f.record = r;
  }

  bool allocated() const {
    return kv_score.ptr && ring.ptr && cos_sin.ptr && pos.ptr && slot.ptr && cache_slot.ptr &&
           qsl.ptr && req.ptr && weight.ptr && latent.ptr && cache.ptr;
  }

  /// Runs the ops of `ops` (Op A, Op B, fused, in this order), then synchronises.
  int run(unsigned ops) {
    if (!allocated()) {
      std::printf("case setup: cudaMalloc failed\n");
      return kExitSetup;
    }
    const struct {
      unsigned op;
      const char* name;
    } order[] = {{kCompress, "kvc::launch_compress"}, {kInsert, "kvc::launch_insert"},
                 {kFused, "kvc::launch_fused"}};
    for (const auto& o : order) {
      if (!(ops & o.op)) continue;
      kvc::Status s;
      if (o.op == kCompress) s = kvc::launch_compress<kRatio, kHeadDim, float>(a, nullptr);
      if (o.op == kInsert) s = kvc::launch_insert<kRatio, kHeadDim, kvc::Fp8DsMlaLayout>(b, nullptr);
      if (o.op == kFused) s = kvc::launch_fused<kRatio, kHeadDim, float, kvc::Fp8DsMlaLayout>(f, nullptr);
      if (s.code() == kvc::StatusCode::kInvalidArgument || s.code() == kvc::StatusCode::kNotSupported) {
        std::printf("case setup: %s rejected the params: %s\n", o.name, s.message());
        return kExitSetup;
      }
      if (!s.ok()) {
        std::printf("%s: %s\n", o.name, s.message());
        return kExitCudaError;
      }
    }
    const cudaError_t err = cudaDeviceSynchronize();
    std::printf("synchronize: %s (%s)\n", cudaGetErrorName(err), cudaGetErrorString(err));
    return err == cudaSuccess ? kExitOk : kExitCudaError;
  }
};

int run_batch(const Batch& batch, unsigned ops) {
  Problem problem(batch);
  return problem.run(ops);
}

/// Milliseconds of `launch` on the default stream (one warm-up call first).
template <class Launch>
float time_ms(Launch&& launch) {
  launch();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  launch();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

/// Large valid calls (one 32768-token prefill chunk; 256 requests of 128 tokens): no trap,
/// and the time of the checks alone.
int valid_large() {
  for (int requests : {1, 256}) {
    Batch batch;
    const int len = 32768 / requests;
    for (int r = 0; r < requests; ++r) batch.request(len, r % 2 == 0 ? 0 : 17, r);
    batch.number_records();
    Problem problem(batch);
    const int rc = problem.run(kAllOps);
    if (rc != kExitOk) return rc;
    const float op_a = time_ms([&] {
      (void)kvc::detail::launch_compress_contract_check(problem.a, nullptr);
    });
    const float records = time_ms([&] {
      (void)kvc::detail::launch_contract_check(problem.b, nullptr);
    });
    const float compress = time_ms([&] {
      (void)kvc::launch_compress<kRatio, kHeadDim, float>(problem.a, nullptr);
    });
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::printf("synchronize: %s\n", cudaGetErrorName(err));
      return kExitCudaError;
    }
    std::printf("T = %lld, %d request(s): Op A checks %.3f ms, record checks %.3f ms, "
                "kvc::launch_compress with its checks %.3f ms\n",
                static_cast<long long>(batch.tokens()), requests, op_a, records, compress);
  }
  return kExitOk;
}

struct Case {
  const char* name;
  const char* expect;  // the check's [name] in the trap message; nullptr: must not trap
  int (*run)();
};

const Case kCases[] = {
    {"valid small batch (Op A, Op B, fused)", nullptr,
     [] {
       Batch b = small_batch();
       // Tokens that write no record (positions 34 and 44 close no group) may share a
       // cache slot with one that does (position 33).
       b.cache_slot[6] = b.cache_slot[5];
       b.cache_slot[16] = b.cache_slot[5];
       return run_batch(b, kAllOps);
     }},
    {"valid large calls (Op A, Op B, fused), timed", nullptr, valid_large},
    {"qsl[0] != 0", "qsl_start",
     [] {
       Batch b = small_batch();
       b.qsl[0] = 1;
       return run_batch(b, kCompress);
     }},
    {"qsl decreasing", "qsl_monotone",
     [] {
       Batch b = small_batch();
       b.qsl[2] = 3;  // 0, 5, 3, 17, 18
       return run_batch(b, kCompress);
     }},
    {"qsl[num_reqs] > num_tokens", "qsl_end",
     [] {
       Batch b = small_batch();
       b.qsl.back() = static_cast<int32_t>(b.tokens() + 1);
       return run_batch(b, kCompress);
     }},
    {"req past the last request (trailing padding)", "req_range",
     [] {
       Batch b = small_batch();
       b.req.back() = b.num_reqs();
       return run_batch(b, kCompress);
     }},
    {"req of another request", "req_qsl",
     [] {
       Batch b = small_batch();
       b.req[6] = 0;
       return run_batch(b, kCompress);
     }},
    {"positions jump inside a chunk (same ring row)", "positions_consecutive",
     [] {
       Batch b = small_batch();
       b.pos[7] += kCapacity;
       return run_batch(b, kCompress);
     }},
    {"ring slot in the wrong row", "ring_row",
     [] {
       Batch b = small_batch();
       b.slot[7] = 0 * kCapacity + (b.pos[7] + 1) % kCapacity;
       return run_batch(b, kCompress);
     }},
    {"two requests in one ring block", "ring_block_shared",
     [] {
       Batch b = small_batch();
       b.slot[17] = 3 * kCapacity + b.pos[17] % kCapacity;  // request 3 in request 0's block
       b.number_records();
       return run_batch(b, kCompress);
     }},
    {"one request in two ring blocks", "ring_block_split",
     [] {
       Batch b = small_batch();
       b.slot[10] = 2 * kCapacity + b.pos[10] % kCapacity;
       return run_batch(b, kCompress);
     }},
    {"ring slot past num_blocks", "ring_slot_bound",
     [] {
       Batch b = small_batch();
       b.num_blocks = b.ring_blocks;
       b.slot[7] = b.ring_blocks * kCapacity + b.pos[7] % kCapacity;
       return run_batch(b, kCompress);
     }},
    {"ring slot at a negative position (trailing token)", "position_negative",
     [] {
       Batch b = small_batch();
       b.pos[19] = -3;
       b.slot[19] = 2 * kCapacity + 5;
       return run_batch(b, kCompress);
     }},
    {"fused: Op A contract checked too", "ring_row",
     [] {
       Batch b = small_batch();
       b.slot[7] = 0 * kCapacity + (b.pos[7] + 1) % kCapacity;
       return run_batch(b, kFused);
     }},
    {"Op B: two records in one cache slot", "cache_slot_shared",
     [] {
       Batch b = small_batch();
       b.cache_slot[15] = b.cache_slot[5];  // positions 43 and 33: both write
       return run_batch(b, kInsert);
     }},
    {"fused: two records in one cache slot", "cache_slot_shared",
     [] {
       Batch b = small_batch();
       b.cache_slot[17] = b.cache_slot[1];  // positions 9 and 1
       return run_batch(b, kFused);
     }},
    {"Op B: cache slot at a negative position", "position_negative",
     [] {
       Batch b = small_batch();
       b.pos[18] = -1;
       b.cache_slot[18] = 100;
       return run_batch(b, kInsert);
     }},
};
constexpr int kNumCases = static_cast<int>(sizeof(kCases) / sizeof(kCases[0]));

int probe() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("kvc_debug_contract_tests: SKIPPED \xE2\x80\x94 no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("kvc_debug_contract_tests: device 0: %s, sm_%d%d\n", prop.name, prop.major, prop.minor);
  return 0;
}

/// Runs `self args` with stdout and stderr captured; returns its exit status (-1: no status).
int run_child(const std::string& self, const std::string& args, std::string& output) {
  const std::string command = "'" + self + "' " + args + " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[512];
  output.clear();
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  const int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string indent(const std::string& text) {
  std::string out = "    ";
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += "    ";
  }
  return out;
}

std::string self_path(const char* argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return argv0;
  buf[n] = '\0';
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--probe") == 0) return probe();
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < kNumCases; ++i)
      std::printf("%2d  %-22s %s\n", i, kCases[i].expect ? kCases[i].expect : "(valid)", kCases[i].name);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "--case") == 0) {
    const int n = std::atoi(argv[2]);
    if (n < 0 || n >= kNumCases) return kExitSetup;
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    return kCases[n].run();
  }
  if (argc != 1) {
    std::printf("usage: %s [--case N | --list]\n", argv[0]);
    return 2;
  }

  // The parent: no CUDA call here, only children.
  const std::string self = self_path(argv[0]);
  std::string output;
  const int probe_rc = run_child(self, "--probe", output);
  std::printf("%s", output.c_str());
  if (probe_rc == 77) return 77;
  if (probe_rc != 0) {
    std::printf("kvc_debug_contract_tests: the device probe failed (exit %d)\n", probe_rc);
    return 1;
  }

  int failed = 0;
  for (int i = 0; i < kNumCases; ++i) {
    const Case& c = kCases[i];
    const int rc = run_child(self, "--case " + std::to_string(i), output);
    const bool trapped_message = output.find("KVC_DEBUG: caller contract broken") != std::string::npos;
    bool ok;
    std::string why;
    if (c.expect == nullptr) {
      ok = rc == kExitOk && !trapped_message;
      why = ok ? "no trap" : "expected no trap, got exit " + std::to_string(rc);
    } else {
      const std::string tag = std::string("[") + c.expect + "]";
      ok = rc == kExitCudaError && output.find(tag) != std::string::npos;
      why = ok ? "trapped with " + tag
               : "expected a trap with " + tag + ", got exit " + std::to_string(rc);
    }
    std::printf("%s case %2d: %s: %s\n%s", ok ? "ok  " : "FAIL", i, c.name, why.c_str(),
                indent(output).c_str());
    if (!output.empty() && output.back() != '\n') std::printf("\n");
    failed += ok ? 0 : 1;
  }
  std::printf("kvc_debug_contract_tests: %d of %d cases passed\n", kNumCases - failed, kNumCases);
  return failed == 0 ? 0 : 1;
}
