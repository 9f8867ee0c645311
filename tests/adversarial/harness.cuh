// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: guarded device buffers, the run of one case, and the byte accounting.
//
// Every buffer an op gets (outputs and inputs) is its own cudaMalloc of
//   [64 KiB guard | data | 64 KiB guard],
// the guards and the outputs filled with a poison pattern (a function of the buffer's name
// and the byte's offset, so two runs of a case start from identical bytes), the inputs'
// data regions with the case's data, the ErrorCounters with zeros. After the op and a
// cudaStreamSynchronize every allocation is copied back whole and each changed byte is
// classified:
//   guard    a guard byte of any buffer (the op wrote past a buffer's ends);
//   own      a row the op may write: latent rows 0..T-1 (columns 0..D-1), every row of the
//            ring blocks and cache pages the call's requests own;
//   foreign  a row of a ring block or cache page that no request of the call owns;
//   pad      bytes inside an output that are no row: latent columns D..stride-1, the
//            padding between ring rows / pages and after a page's records;
//   in       an input's data (kv_score, positions, slots, qsl, req, weight, cos_sin, Op B's
//            latent).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "adversarial/ops.hpp"
#include "adversarial/scenario.hpp"

namespace adv {

constexpr size_t kGuard = 64 * 1024;

enum class Role { kOutput, kInput, kCounters };
enum Cat { kOwn = 0, kForeign = 1, kPad = 2 };

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The poison of byte `offset` of the allocation named by `salt`: each 4-byte word is a
/// finite fp32 value of magnitude [0.5, 1) (a ring that starts as poison is a valid ring
/// to read), its bits varying from word to word (a write of a constant shows up).
inline uint8_t poison_byte(uint64_t salt, size_t offset) {
  const uint32_t w = 0x3f000000u | (static_cast<uint32_t>(mix64(salt ^ (offset / 4))) & 0x807fffffu);
  return static_cast<uint8_t>(w >> (8 * (offset % 4)));
}

inline uint64_t name_salt(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

/// One guarded allocation.
struct Region {
  std::string name;
  Role role = Role::kOutput;
  size_t bytes = 0;                     // data bytes
  uint8_t* base = nullptr;              // device: kGuard + bytes + kGuard
  std::vector<uint8_t> before, after;   // host images of the whole allocation
  bool downloaded = false;
  std::function<Cat(size_t)> classify;  // outputs: category of a data byte

  uint8_t* data() const { return base + kGuard; }
  size_t total() const { return bytes + 2 * kGuard; }
};

/// What changed, in bytes.
struct Damage {
  uint64_t guard = 0, own = 0, foreign = 0, pad = 0, input = 0, counters = 0;
  bool known = true;  // false: the buffers could not be copied back (a sticky CUDA error)
  uint64_t outside() const { return guard + pad + input; }
  uint64_t total() const { return guard + own + foreign + pad + input + counters; }
};

class Buffers {
 public:
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (auto& kv : regions_)
      if (kv.second.base != nullptr) cudaFree(kv.second.base);
  }

  /// Allocates and uploads a region; `init` (data bytes) may be empty: poison (outputs) or
  /// zeros (counters). Returns false when CUDA fails.
  bool add(const std::string& name, Role role, size_t bytes, const void* init,
           std::function<Cat(size_t)> classify = {}) {
    Region& r = regions_[name];
    r.name = name;
    r.role = role;
    r.bytes = bytes;
    r.classify = std::move(classify);
    r.before.resize(r.total());
    const uint64_t salt = name_salt(name);
    for (size_t i = 0; i < r.total(); ++i) r.before[i] = poison_byte(salt, i);
    if (init != nullptr) std::memcpy(r.before.data() + kGuard, init, bytes);
    if (role == Role::kCounters) std::memset(r.before.data() + kGuard, 0, bytes);
    void* p = nullptr;
    if (cudaMalloc(&p, r.total()) != cudaSuccess) return false;
    r.base = static_cast<uint8_t*>(p);
    return cudaMemcpy(r.base, r.before.data(), r.total(), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  Region& operator[](const std::string& name) { return regions_.at(name); }
  bool has(const std::string& name) const { return regions_.count(name) != 0; }
  std::map<std::string, Region>& regions() { return regions_; }

  /// Copies every allocation back; false when any copy fails.
  bool download() {
    bool ok = true;
    for (auto& kv : regions_) {
      Region& r = kv.second;
      r.after.resize(r.total());
      r.downloaded = cudaMemcpy(r.after.data(), r.base, r.total(), cudaMemcpyDeviceToHost) == cudaSuccess;
      ok = ok && r.downloaded;
    }
    return ok;
  }

  Damage damage() const {
    Damage d;
    for (const auto& kv : regions_) {
      const Region& r = kv.second;
      if (!r.downloaded) {
        d.known = false;
        continue;
      }
      for (size_t i = 0; i < r.total(); ++i) {
        if (r.after[i] == r.before[i]) continue;
        if (i < kGuard || i >= kGuard + r.bytes) {
          ++d.guard;
          continue;
        }
        switch (r.role) {
          case Role::kInput: ++d.input; break;
          case Role::kCounters: ++d.counters; break;
          case Role::kOutput: {
            const Cat c = r.classify(i - kGuard);
            if (c == kOwn) ++d.own;
            else if (c == kForeign) ++d.foreign;
            else ++d.pad;
            break;
          }
        }
      }
    }
    return d;
  }

  /// Bytes (over every allocation) where this run's result differs from `other`'s.
  uint64_t differs_from(const Buffers& other) const {
    uint64_t n = 0;
    for (const auto& kv : regions_) {
      const auto it = other.regions_.find(kv.first);
      if (it == other.regions_.end() || !kv.second.downloaded || !it->second.downloaded) return ~0ull;
      const auto& a = kv.second.after;
      const auto& b = it->second.after;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
    }
    return n;
  }

 private:
  std::map<std::string, Region> regions_;
};

template <class At>
Launch make_launch(const Scenario& s, At&& at);

/// Allocates what op `s.op` reads and writes and returns the Params pointing at it (both
/// bounds given). Returns false when CUDA fails.
inline bool build(const Scenario& s, Buffers& b, Launch& l) {
  const int D = kHeadDim;
  const bool compress = s.op != Op::kInsert, record = s.op != Op::kCompress;
  const auto bytes_of = [](const auto& v) { return v.size() * sizeof(v[0]); };
  bool ok = true;
  ok = ok && b.add("positions", Role::kInput, bytes_of(s.positions), s.positions.data());
  static_assert(sizeof(kvc::ErrorCounters) <= 48, "the counters region holds a misaligned copy");
  ok = ok && b.add("errors", Role::kCounters, 64, nullptr);
  if (compress) {
    ok = ok && b.add("kv_score", Role::kInput, bytes_of(s.kv_score), s.kv_score.data());
    ok = ok && b.add("ring_slot", Role::kInput, bytes_of(s.ring_slot), s.ring_slot.data());
    ok = ok && b.add("qsl", Role::kInput, bytes_of(s.qsl), s.qsl.data());
    ok = ok && b.add("req", Role::kInput, bytes_of(s.req), s.req.data());
    ok = ok && b.add("weight", Role::kInput, bytes_of(s.weight), s.weight.data());
    // The ring: own blocks are the requests' (R > 1); at R = 1 there is no ring, so every
    // block is foreign and the op must not touch it.
    const int64_t page = s.ring_page_stride, row = s.ring_row_stride, C = s.capacity;
    std::vector<int64_t> own = s.ratio > 1 ? s.own_blocks : std::vector<int64_t>{};
    const size_t ring_bytes = static_cast<size_t>(s.ring_elems()) * 4;
    ok = ok && b.add("ring", Role::kOutput, ring_bytes, nullptr, [=](size_t off) {
      const int64_t e = static_cast<int64_t>(off / 4);
      const int64_t blk = e / page, in = e % page;
      if (in >= C * row || in % row >= 2 * D) return kPad;
      return std::find(own.begin(), own.end(), blk) != own.end() ? kOwn : kForeign;
    });
    if (ok && s.ring_nan_own) {  // own rows start as NaN (a ring whose history is NaN)
      Region& r = b["ring"];
      const uint32_t nan = 0x7fc00000u;
      for (int64_t blk : own)
        for (int64_t rr = 0; rr < C; ++rr)
          for (int64_t d = 0; d < 2 * D; ++d)
            std::memcpy(r.before.data() + kGuard + 4 * (blk * page + rr * row + d), &nan, 4);
      ok = cudaMemcpy(r.base, r.before.data(), r.total(), cudaMemcpyHostToDevice) == cudaSuccess;
    }
    const int64_t ls = s.latent_stride_elems;
    ok = ok && b.add("latent", Role::kOutput, static_cast<size_t>(s.num_tokens * ls * 2), nullptr,
                     [=](size_t off) { return (static_cast<int64_t>(off) % (2 * ls)) / 2 < D ? kOwn : kPad; });
  }
  if (record) {
    ok = ok && b.add("cache_slot", Role::kInput, bytes_of(s.cache_slot), s.cache_slot.data());
    ok = ok && b.add("cos_sin", Role::kInput, bytes_of(s.cos_sin), s.cos_sin.data());
    if (s.op == Op::kInsert)
      ok = ok && b.add("latent_in", Role::kInput, bytes_of(s.latent_in), s.latent_in.data());
    const int64_t ps = s.cache_page_stride, B = s.block_size;
    const std::vector<int64_t> own = s.own_pages;
    ok = ok && b.add("cache", Role::kOutput, static_cast<size_t>(s.cache_bytes()), nullptr, [=](size_t off) {
      const int64_t page = static_cast<int64_t>(off) / ps, in = static_cast<int64_t>(off) % ps;
      if (in >= B * kvc::Fp8DsMlaLayout::kRecordBytes) return kPad;
      return std::find(own.begin(), own.end(), page) != own.end() ? kOwn : kForeign;
    });
  }
  if (!ok) return false;
  l = make_launch(s, [&b](const char* name) -> void* { return b[name].data(); });
  return true;
}

/// The Params of op `s.op` over the buffers `at(name)` returns (both bounds given).
template <class At>
Launch make_launch(const Scenario& s, At&& at) {
  const int D = kHeadDim;
  const bool compress = s.op != Op::kInsert, record = s.op != Op::kCompress;
  Launch l;
  l.op = s.op;
  const kvc::IndexPtr positions{at("positions"), kvc::IndexType::kInt64};
  if (compress) {
    kvc::CompressParams& a = l.a;
    a.ratio = s.ratio;
    a.head_dim = D;
    a.dtype = kvc::DType::kFloat32;
    a.num_tokens = s.num_tokens;
    a.kv_score = at("kv_score");
    a.kv_score_stride_elems = s.kv_stride;
    a.positions = positions;
    a.slot = {at("ring_slot"), kvc::IndexType::kInt64};
    a.qsl = reinterpret_cast<const int32_t*>(at("qsl"));
    a.qsl_size = static_cast<int64_t>(s.qsl.size());
    a.req = reinterpret_cast<const int32_t*>(at("req"));
    a.ring = at("ring");
    a.ring_layout = kvc::RingLayout{s.capacity, s.ring_page_stride, s.ring_row_stride, s.ring_blocks};
    a.weight = reinterpret_cast<const kvc::bf16_t*>(at("weight"));
    a.eps = 1e-6f;
    a.latent = reinterpret_cast<kvc::bf16_t*>(at("latent"));
    a.latent_stride_elems = s.latent_stride_elems;
  }
  if (record) {
    kvc::InsertParams& p = l.b;
    p.ratio = s.ratio;
    p.head_dim = D;
    p.num_tokens = s.num_tokens;
    if (s.op == Op::kInsert) {
      p.latent = reinterpret_cast<const kvc::bf16_t*>(at("latent_in"));
      p.latent_stride_elems = s.latent_stride_elems;
      p.positions = positions;
    }
    kvc::RecordArgs& r = p.record;
    r.layout = kvc::CacheLayout::kFp8DsMla;
    r.cos_sin = at("cos_sin");
    r.cos_sin_dtype = kvc::DType::kFloat32;
    r.cos_sin_stride_elems = 64;
    r.cos_sin_rows = s.cos_sin_rows;
    r.cache_slot = {at("cache_slot"), kvc::IndexType::kInt64};
    r.cache.data = at("cache");
    r.cache.block_size = s.block_size;
    r.cache.page_stride_bytes = s.cache_page_stride;
    r.cache.num_pages = s.pages;
  }
  l.set_errors(reinterpret_cast<kvc::ErrorCounters*>(at("errors")));
  return l;
}

inline kvc::Status call(const Launch& l, cudaStream_t stream) {
  switch (l.op) {
    case Op::kCompress: return call_compress(l.a, stream);
    case Op::kInsert: return call_insert(l.b, stream);
    case Op::kFused: return call_fused(l.fused(), stream);
  }
  return kvc::Status::invalid("unknown op");
}

/// The counters the call was given, read back from the device (zeros when none was given
/// or the copy fails).
inline Counts read_counts(const Launch& l, bool* ok) {
  Counts c;
  *ok = true;
  if (l.errors() == nullptr) return c;
  kvc::ErrorCounters e{};
  if (cudaMemcpy(&e, l.errors(), sizeof e, cudaMemcpyDeviceToHost) != cudaSuccess) {
    *ok = false;
    return c;
  }
  c.ring = e.ring_slot_out_of_range;
  c.cache = e.cache_slot_out_of_range;
  c.position = e.position_out_of_range;
  c.non_finite = e.non_finite_rows;
  return c;
}

}  // namespace adv
