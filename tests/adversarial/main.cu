// SPDX-License-Identifier: Apache-2.0
// kvc_adversarial_tests — issue 13, "nothing written outside what the caller owns".
//
// Every case (cases.hpp) runs in a fresh child process (this program re-executed with
// --case N), so a case that faults the CUDA context cannot hide the others; the parent
// makes no CUDA call at all (a --probe child looks for the GPU) and aggregates.
//
//   kvc_adversarial_tests                 every case, one child at a time
//   kvc_adversarial_tests --filter A.r2.  cases whose name contains any of the (comma
//                                         separated) strings
//   kvc_adversarial_tests --jobs 4        up to 4 children at once (separate contexts)
//   kvc_adversarial_tests --timeout 300   seconds per child before it is killed (default 120)
//   kvc_adversarial_tests --list          the case table, no GPU needed
//   kvc_adversarial_tests --plan          host validation's verdict and the expected skip
//                                         counts per case (can_implement), no GPU needed
//   kvc_adversarial_tests --case 17       one case in this process (for a debugger)
//
// One line per case, then `N cases, K wrote outside, F wrote foreign rows`. Exit 0 only
// when every case met its rule; 77 (ctest: Skipped) without a usable GPU.
#include "adversarial/lists.hpp"  // first: the compiled lists

#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <kvcompress/launch/insert.hpp>  // the can_implement functions (host validation)
#include <kvcompress/launch/fused.hpp>

#include "adversarial/cases.hpp"
#include "adversarial/harness.cuh"

extern char** environ;

namespace adv {
namespace {

const char* kProgram = "kvc_adversarial_tests";

std::string status_str(const kvc::Status& s) {
  switch (s.code()) {
    case kvc::StatusCode::kSuccess: return "ok";
    case kvc::StatusCode::kInvalidArgument: return std::string("invalid_argument \"") + s.message() + "\"";
    case kvc::StatusCode::kNotSupported: return std::string("not_supported \"") + s.message() + "\"";
    case kvc::StatusCode::kCudaError:
      return std::string("cuda_error(") + std::to_string(s.cuda_error()) + ") \"" + s.message() + "\"";
  }
  return "unknown";
}

struct Outcome {
  bool pass = false;
  bool outside = false;  // guard / padding / input bytes changed, a rejected call wrote, or unknown
  bool foreign = false;  // foreign rows changed
  std::string line;
};

/// Runs case `index` in this process.
Outcome run_case(const Case& c, int index) {
  Outcome o;
  const std::string head = "case " + std::to_string(index) + " " + c.name + ": ";
  const auto fail_setup = [&](const char* what, cudaError_t e) {
    o.outside = true;
    o.line = head + "setup failed (" + what + ": " + cudaGetErrorName(e) + ") FAIL";
    return o;
  };
  Scenario s = make_scenario(c.op, c.ratio, 0x5eedull + static_cast<uint64_t>(index));
  if (c.setup) c.setup(s);
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return fail_setup("cudaStreamCreate", e);

  // kStale: first the same call without the stale error, as the reference bytes.
  Buffers control;
  if (c.kind == Kind::kStale) {
    Launch lc;
    if (!build(s, control, lc)) return fail_setup("control buffers", cudaGetLastError());
    if (c.tweak) c.tweak(lc);
    const kvc::Status sc = call(lc, stream);
    e = cudaStreamSynchronize(stream);
    if (!sc.ok() || e != cudaSuccess || !control.download()) {
      o.outside = true;
      o.line = head + "control run failed: status=" + status_str(sc) + ", cuda=" + cudaGetErrorName(e) + " FAIL";
      return o;
    }
  }

  Buffers bufs;
  Launch l;
  if (!build(s, bufs, l)) return fail_setup("buffers", cudaGetLastError());
  if (c.tweak) c.tweak(l);
  const Counts want = expected_counts(s, l);

  std::string stale;
  if (c.kind == Kind::kStale) {
    void* huge = nullptr;
    const cudaError_t m = cudaMalloc(&huge, size_t{1} << 50);  // fails, not sticky
    if (m == cudaSuccess) cudaFree(huge);
    stale = std::string(" stale=") + cudaGetErrorName(m);
    if (m == cudaSuccess) stale += " (no error provoked: the case proves nothing)";
  }
  const kvc::Status st = call(l, stream);
  const cudaError_t pending = cudaGetLastError();
  const cudaError_t sync = cudaStreamSynchronize(stream);
  bool counts_ok = true;
  const Counts got = read_counts(l, &counts_ok);
  bufs.download();
  const Damage d = bufs.damage();

  const bool rejected = !st.ok();
  std::vector<std::string> why;
  if (sync != cudaSuccess) why.push_back(std::string("CUDA error after the call: ") + cudaGetErrorString(sync));
  if (!d.known) why.push_back("buffers unreadable: what was written is unknown");
  if (rejected && d.total() > 0) why.push_back("rejected, yet " + std::to_string(d.total()) + " bytes changed");
  if (!rejected) {
    if (d.guard) why.push_back("wrote guard bytes");
    if (d.pad) why.push_back("wrote padding bytes");
    if (d.input) why.push_back("wrote an input");
    if (d.foreign) why.push_back("wrote foreign rows");
  }
  switch (c.kind) {
    case Kind::kNoop:
      if (rejected) why.push_back("T = 0 must be a no-op success");
      if (!rejected && d.total() > 0) why.push_back("the no-op changed " + std::to_string(d.total()) + " bytes");
      break;
    case Kind::kStale: {
      if (rejected) why.push_back("reported an error it did not cause");
      const uint64_t diff = bufs.differs_from(control);
      if (diff != 0)
        why.push_back("differs from the run without the stale error in " +
                      (diff == ~0ull ? std::string("unknown") : std::to_string(diff)) + " bytes");
      if (d.own == 0) why.push_back("wrote nothing");
      break;
    }
    case Kind::kBaseline:
      if (rejected) why.push_back("a valid call was rejected");
      if (d.known && d.own == 0) why.push_back("wrote nothing");
      if (!rejected && counts_ok && !(got == Counts{})) why.push_back("a valid batch counted skips");
      break;
    case Kind::kCounted:
      if (!rejected && counts_ok && d.known && !(got == want)) why.push_back("counters differ from the skip rules");
      break;
    case Kind::kGeneric: break;
  }

  o.pass = why.empty();
  o.outside = !d.known || (!rejected && d.outside() > 0) || (rejected && d.total() > 0);
  o.foreign = d.known && d.foreign > 0;
  const auto n = [&](uint64_t x) { return d.known ? std::to_string(x) : std::string("?"); };
  std::string line = head + "status=" + status_str(st) + ", cuda=" + cudaGetErrorName(sync);
  if (pending != cudaSuccess) line += std::string(" (pending after the call: ") + cudaGetErrorName(pending) + ")";
  line += stale + ", guard=" + n(d.guard) + " own=" + n(d.own) + " foreign=" + n(d.foreign) +
          " pad=" + n(d.pad) + " in=" + n(d.input) + " errors=" + (counts_ok ? got.str() : std::string("?"));
  if (c.kind == Kind::kCounted) line += " want=" + want.str();
  line += o.pass ? " PASS" : " FAIL";
  for (size_t i = 0; i < why.size(); ++i) line += (i == 0 ? " -- " : "; ") + why[i];
  if (!c.note.empty()) line += "  [" + c.note + "]";
  o.line = line;
  cudaStreamDestroy(stream);
  return o;
}

/// --plan: what host validation says about each case (the can_implement functions, no
/// GPU), and the counts the skip rules predict. Pointers are fake, 256-byte aligned.
void plan(const std::vector<Case>& cases, const std::vector<int>& selected) {
  const char* kinds[] = {"baseline", "counted", "generic", "noop", "stale"};
  for (int i : selected) {
    const Case& c = cases[static_cast<size_t>(i)];
    Scenario s = make_scenario(c.op, c.ratio, 0x5eedull + static_cast<uint64_t>(i));
    if (c.setup) c.setup(s);
    std::map<std::string, uintptr_t> fake;
    Launch l = make_launch(s, [&fake](const char* name) -> void* {
      auto it = fake.find(name);
      if (it == fake.end()) it = fake.emplace(name, uintptr_t{0x7f0000000000ull} + (fake.size() + 1) * (uintptr_t{1} << 24)).first;
      return reinterpret_cast<void*>(it->second);
    });
    if (c.tweak) c.tweak(l);
    const kvc::Status st = l.op == Op::kCompress ? kvc::compress_can_implement(l.a)
                           : l.op == Op::kInsert ? kvc::insert_can_implement(l.b)
                                                 : kvc::fused_can_implement(l.fused());
    std::printf("case %d %s: kind=%s host=%s want=%s%s%s\n", i, c.name.c_str(), kinds[static_cast<int>(c.kind)],
                status_str(st).c_str(), expected_counts(s, l).str().c_str(), c.note.empty() ? "" : "  [",
                c.note.empty() ? "" : (c.note + "]").c_str());
  }
}

int probe() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    std::printf("%s: SKIPPED \xE2\x80\x94 no CUDA device (%s)\n", kProgram,
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0 devices");
    std::fflush(stdout);
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s: device 0: %s, sm_%d%d, %d device(s) visible\n", kProgram, prop.name, prop.major,
              prop.minor, n);
  std::fflush(stdout);
  return 0;
}

// ---------------------------------------------------------------------------------------
// Parent: children, no CUDA.

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string self_path(const char* argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

struct Child {
  int index = -1;
  pid_t pid = -1;
  int fd = -1;  // read end of the result pipe
  double start = 0;
  std::string out;
};

/// Starts `self args...`; with `pipe_out` the child gets the write end of a pipe as
/// --result-fd. Returns false when posix_spawn fails.
bool spawn(const std::string& self, std::vector<std::string> args, bool pipe_out, Child& c) {
  int fds[2] = {-1, -1};
  if (pipe_out) {
    if (pipe(fds) != 0) return false;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);  // later children must not hold it
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    args.push_back("--result-fd");
    args.push_back(std::to_string(fds[1]));
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(self.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const int rc = posix_spawn(&c.pid, self.c_str(), nullptr, nullptr, argv.data(), environ);
  if (pipe_out) close(fds[1]);
  if (rc != 0) {
    if (pipe_out) close(fds[0]);
    return false;
  }
  c.fd = pipe_out ? fds[0] : -1;
  c.start = now_s();
  return true;
}

void drain(Child& c) {
  if (c.fd < 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(c.fd, buf, sizeof buf);
    if (n > 0) {
      c.out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF or EAGAIN
  }
}

std::string exit_str(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

int parent(const std::string& self, const std::vector<Case>& cases, const std::vector<int>& selected, int jobs,
           double timeout, const std::vector<std::string>& pass_through) {
  Child pc;
  if (!spawn(self, {"--probe"}, false, pc)) {
    std::printf("%s: cannot start a child process (%s)\n", kProgram, std::strerror(errno));
    return 1;
  }
  int status = 0;
  while (waitpid(pc.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return 77;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("%s: the GPU probe %s\n", kProgram, exit_str(status).c_str());
    return 1;
  }

  struct Result {
    bool done = false, pass = false, outside = false, foreign = false;
    std::string line;
  };
  std::printf("%s: %zu cases, each in a child process of its own (%d at a time)\n", kProgram, selected.size(), jobs);
  std::vector<Result> results(selected.size());
  std::deque<size_t> todo;
  for (size_t i = 0; i < selected.size(); ++i) todo.push_back(i);
  std::vector<std::pair<size_t, Child>> running;
  size_t printed = 0;
  while (printed < selected.size()) {
    while (!todo.empty() && static_cast<int>(running.size()) < jobs) {
      const size_t k = todo.front();
      todo.pop_front();
      Child c;
      c.index = selected[k];
      std::vector<std::string> args = {"--case", std::to_string(c.index)};
      args.insert(args.end(), pass_through.begin(), pass_through.end());
      if (!spawn(self, args, true, c)) {
        results[k] = {true, false, true, false,
                      "case " + std::to_string(c.index) + " " + cases[static_cast<size_t>(c.index)].name +
                          ": could not start a child FAIL"};
        continue;
      }
      running.emplace_back(k, c);
    }
    bool progressed = false;
    for (size_t r = 0; r < running.size();) {
      auto& [k, c] = running[r];
      drain(c);
      int st = 0;
      pid_t w = waitpid(c.pid, &st, WNOHANG);
      const bool late = w == 0 && now_s() - c.start > timeout;
      if (late) {
        kill(c.pid, SIGKILL);  // only the child this parent started
        while (waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
        }
        w = c.pid;
      }
      if (w != c.pid) {
        ++r;
        continue;
      }
      drain(c);
      close(c.fd);
      Result& res = results[k];
      res.done = true;
      const std::string& name = cases[static_cast<size_t>(c.index)].name;
      const size_t nl = c.out.find('\n');
      const bool reported = c.out.size() > 2 && c.out[0] == '@' && nl != std::string::npos;
      if (reported) {
        int p = 0, out = 1, fr = 0;
        std::sscanf(c.out.c_str(), "@ %d %d %d", &p, &out, &fr);
        res.pass = p != 0;
        res.outside = out != 0;
        res.foreign = fr != 0;
        res.line = c.out.substr(nl + 1);
        while (!res.line.empty() && res.line.back() == '\n') res.line.pop_back();
        // The child exits 0 (pass) or 1 (fail); anything else came after its report, e.g.
        // compute-sanitizer's --error-exitcode for an access the byte counts cannot see.
        const bool normal = !late && WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 1);
        if (!normal) {
          res.pass = false;
          const size_t at = res.line.find(" PASS");
          if (at != std::string::npos) res.line.replace(at, 5, " FAIL");
          res.line += late ? std::string(" -- after its report the child hung and was killed")
                           : " -- after its report the child " + exit_str(st);
        }
      } else {
        res.pass = false;
        res.outside = true;  // unknown: it may have written anywhere
        res.line = "case " + std::to_string(c.index) + " " + name + ": child " +
                   (late ? "timed out after " + std::to_string(static_cast<int>(timeout)) + " s" : exit_str(st)) +
                   " before reporting, guard=? own=? foreign=? FAIL";
      }
      running.erase(running.begin() + static_cast<long>(r));
      progressed = true;
    }
    while (printed < selected.size() && results[printed].done) {
      std::printf("%s\n", results[printed].line.c_str());
      std::fflush(stdout);
      ++printed;
    }
    if (!progressed && !running.empty()) usleep(5000);
  }

  int outside = 0, foreign = 0, failed = 0;
  std::string failed_list;
  for (size_t k = 0; k < results.size(); ++k) {
    outside += results[k].outside;
    foreign += results[k].foreign;
    if (!results[k].pass) {
      ++failed;
      failed_list += (failed_list.empty() ? "" : ", ") + std::to_string(selected[k]);
    }
  }
  if (failed) std::printf("failed (%d): %s\n", failed, failed_list.c_str());
  std::printf("%zu cases, %d wrote outside, %d wrote foreign rows\n", results.size(), outside, foreign);
  std::fflush(stdout);
  return failed == 0 && outside == 0 && foreign == 0 ? 0 : 1;
}

void usage() {
  std::printf("usage: %s [--filter S[,S...]] [--jobs N] [--timeout SECONDS] [--list] [--plan] [--case N]\n",
              kProgram);
}

}  // namespace
}  // namespace adv

int main(int argc, char** argv) {
  using namespace adv;
  const std::vector<Case> cases = make_cases();
  int case_index = -1, result_fd = -1, jobs = 1;
  double timeout = 120;
  bool list = false, probe_only = false, plan_only = false;
  std::vector<std::string> filters;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--case") case_index = std::atoi(value().c_str());
    else if (a == "--result-fd") result_fd = std::atoi(value().c_str());
    else if (a == "--jobs") jobs = std::max(1, std::atoi(value().c_str()));
    else if (a == "--timeout") timeout = std::atof(value().c_str());
    else if (a == "--filter") {
      const std::string f = value();
      size_t b = 0;
      while (b <= f.size()) {
        const size_t e = f.find(',', b);
        const std::string part = f.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if (!part.empty()) filters.push_back(part);
        if (e == std::string::npos) break;
        b = e + 1;
      }
    } else if (a == "--list") list = true;
    else if (a == "--probe") probe_only = true;
    else if (a == "--plan") plan_only = true;
    else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  if (probe_only) return probe();
  if (case_index >= 0) {
    if (case_index >= static_cast<int>(cases.size())) {
      std::printf("%s: no case %d (%zu cases)\n", kProgram, case_index, cases.size());
      return 2;
    }
    if (result_fd < 0) {  // by hand: make sure there is a device first
      const int pr = probe();
      if (pr != 0) return pr;
    }
    const Outcome o = run_case(cases[static_cast<size_t>(case_index)], case_index);
    if (result_fd >= 0) {
      const std::string msg = "@ " + std::to_string(o.pass) + " " + std::to_string(o.outside) + " " +
                              std::to_string(o.foreign) + "\n" + o.line + "\n";
      size_t done = 0;
      while (done < msg.size()) {
        const ssize_t n = write(result_fd, msg.data() + done, msg.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      close(result_fd);
    } else {
      std::printf("%s\n", o.line.c_str());
    }
    return o.pass ? 0 : 1;
  }

  std::vector<int> selected;
  for (size_t i = 0; i < cases.size(); ++i) {
    bool take = filters.empty();
    for (const auto& f : filters) take = take || cases[i].name.find(f) != std::string::npos;
    if (take) selected.push_back(static_cast<int>(i));
  }
  if (plan_only) {
    plan(cases, selected);
    return 0;
  }
  if (list) {
    for (int i : selected) {
      const Case& c = cases[static_cast<size_t>(i)];
      std::printf("case %d %s%s%s\n", i, c.name.c_str(), c.note.empty() ? "" : "  [", c.note.empty() ? "" : (c.note + "]").c_str());
    }
    return 0;
  }
  return parent(self_path(argv[0]), cases, selected, jobs, timeout, {});
}
