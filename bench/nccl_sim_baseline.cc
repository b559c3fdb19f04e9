// SPDX-License-Identifier: Apache-2.0
// The real NCCL's own duration estimate as a baseline for RankLens's estimator (issue #7): for every timed call of a
// duration history (`ranklens history build`), the estimate ncclGroupSimulateEnd gives for that call on this
// machine, and its relative error against the recorded duration, in the table of `ranklens estimate eval`
// (median and p90 per op and size class, and over all calls).
//
// The real libnccl.so.2 is loaded with dlopen (never RankLens's); one communicator per visible GPU is created in
// this process with ncclCommInitAll for each communicator size the history holds (at most the visible GPUs: larger
// ones are counted as not estimated). Grouped samples (a group's time on one stream) and Send/Recv are not
// estimated: NCCL's simulation estimates one collective at a time.
//
//   nccl_sim_baseline --history cluster.hist --nccl /path/libnccl.so.2 [--target observed|transfer] [--json FILE]
//
// Exit status: 0 done, 1 a failure (message on stderr), 2 bad usage, 77 no GPU (nothing to simulate on).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ranklens/events.h"
#include "ranklens/estimator.h"

namespace {

namespace rt = ranklens::timing;
using ranklens::events::Op;

struct Nccl {
  void* handle = nullptr;
  ncclResult_t (*getVersion)(int*) = nullptr;
  ncclResult_t (*commInitAll)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupSimulateEnd)(ncclSimInfo_t*) = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  const char* (*errorString)(ncclResult_t) = nullptr;
};

template <typename Fn>
bool bind(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *fn != nullptr;
}

bool loadNccl(const std::string& path, Nccl* n, std::string* error) {
  n->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n->handle == nullptr) {
    *error = "cannot load " + path + ": " + dlerror();
    return false;
  }
  std::string missing;
  bind(n->handle, "ncclGetVersion", &n->getVersion, &missing);
  bind(n->handle, "ncclCommInitAll", &n->commInitAll, &missing);
  bind(n->handle, "ncclCommDestroy", &n->commDestroy, &missing);
  bind(n->handle, "ncclGroupStart", &n->groupStart, &missing);
  bind(n->handle, "ncclGroupSimulateEnd", &n->groupSimulateEnd, &missing);
  bind(n->handle, "ncclAllReduce", &n->allReduce, &missing);
  bind(n->handle, "ncclAllGather", &n->allGather, &missing);
  bind(n->handle, "ncclReduceScatter", &n->reduceScatter, &missing);
  bind(n->handle, "ncclBroadcast", &n->broadcast, &missing);
  bind(n->handle, "ncclReduce", &n->reduce, &missing);
  bind(n->handle, "ncclGetErrorString", &n->errorString, &missing);
  if (!missing.empty()) {
    *error = path + " lacks " + missing + " (ncclGroupSimulateEnd needs NCCL 2.22 or later)";
    return false;
  }
  return true;
}

// The NCCL count of a call whose rank receives `bytes` (Call.bytes, events::receivedBytes), 0 when it cannot be
// simulated here.
size_t countOf(int op, uint64_t bytes, int datatype, int nranks) {
  const size_t size = ranklens::events::datatypeBytes(datatype);
  if (size == 0) return 0;
  switch (static_cast<Op>(op)) {
    case Op::kAllGather:
      return bytes / size / static_cast<size_t>(nranks);
    case Op::kAllReduce:
    case Op::kReduceScatter:
    case Op::kBroadcast:
    case Op::kReduce:
      return bytes / size;
    default:
      return 0;
  }
}

// One communicator per GPU for a communicator size, with a device buffer large enough for every call simulated.
struct Clique {
  std::vector<ncclComm_t> comms;
  std::vector<void*> buffers;
};

class Simulator {
 public:
  Simulator(const Nccl& nccl, uint64_t maxBytes) : nccl_(nccl), bufferBytes_(std::max<uint64_t>(maxBytes, 256)) {}
  ~Simulator() {
    for (auto& [n, c] : cliques_) {
      for (auto* comm : c.comms) nccl_.commDestroy(comm);
      for (size_t i = 0; i < c.buffers.size(); ++i) {
        cudaSetDevice(static_cast<int>(i));
        cudaFree(c.buffers[i]);
      }
    }
  }

  // NCCL's estimate in microseconds for rank 0 of an `nranks` communicator, or a negative value with `why`.
  double estimateUs(const rt::HistorySample& s, std::string* why) {
    const size_t count = countOf(s.op, s.bytes, s.datatype, s.nranks);
    if (count == 0) {
      *why = "op or size not simulated";
      return -1;
    }
    Clique* clique = cliqueOf(s.nranks, why);
    if (clique == nullptr) return -1;
    const auto dtype = static_cast<ncclDataType_t>(s.datatype);
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    if (nccl_.groupStart() != ncclSuccess) {
      *why = "ncclGroupStart failed";
      return -1;
    }
    // Every rank of the communicator takes part, as in a real call: with one rank alone NCCL (2.28, connections made
    // at the first call) waits for the others to connect and never returns (measured on 2x H200).
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < clique->comms.size() && r == ncclSuccess; ++i) {
      void* buf = clique->buffers[i];
      ncclComm_t comm = clique->comms[i];
      switch (static_cast<Op>(s.op)) {
        case Op::kAllReduce:
          r = nccl_.allReduce(buf, buf, count, dtype, ncclSum, comm, nullptr);
          break;
        case Op::kAllGather:
          r = nccl_.allGather(buf, buf, count, dtype, comm, nullptr);
          break;
        case Op::kReduceScatter:
          r = nccl_.reduceScatter(buf, buf, count, dtype, ncclSum, comm, nullptr);
          break;
        case Op::kBroadcast:
          r = nccl_.broadcast(buf, buf, count, dtype, 0, comm, nullptr);
          break;
        case Op::kReduce:
          r = nccl_.reduce(buf, buf, count, dtype, ncclSum, 0, comm, nullptr);
          break;
        default:
          break;
      }
    }
    const ncclResult_t end = nccl_.groupSimulateEnd(&info);
    if (r != ncclSuccess || end != ncclSuccess) {
      *why = std::string("simulation failed: ") + nccl_.errorString(r != ncclSuccess ? r : end);
      return -1;
    }
    return info.estimatedTime;
  }

 private:
  Clique* cliqueOf(int nranks, std::string* why) {
    auto it = cliques_.find(nranks);
    if (it != cliques_.end()) return it->second.comms.empty() ? nullptr : &it->second;
    Clique& c = cliques_[nranks];
    int gpus = 0;
    cudaGetDeviceCount(&gpus);
    if (nranks < 1 || nranks > gpus) {
      *why = std::to_string(nranks) + "-rank communicator on " + std::to_string(gpus) + " visible GPU(s)";
      return nullptr;
    }
    c.comms.resize(static_cast<size_t>(nranks));
    std::vector<int> devices(static_cast<size_t>(nranks));
    for (int i = 0; i < nranks; ++i) devices[static_cast<size_t>(i)] = i;
    if (nccl_.commInitAll(c.comms.data(), nranks, devices.data()) != ncclSuccess) {
      c.comms.clear();
      *why = "ncclCommInitAll failed for " + std::to_string(nranks) + " GPUs";
      return nullptr;
    }
    for (int i = 0; i < nranks; ++i) {
      void* p = nullptr;
      cudaSetDevice(i);
      if (cudaMalloc(&p, bufferBytes_) != cudaSuccess) {
        *why = "cudaMalloc of " + std::to_string(bufferBytes_) + " bytes failed";
        return nullptr;
      }
      c.buffers.push_back(p);
    }
    return &c;
  }

  const Nccl& nccl_;
  const uint64_t bufferBytes_;
  std::map<int, Clique> cliques_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The real NCCL's ncclGroupSimulateEnd estimate for every timed call of a RankLens duration history, "
      "and its error against the recorded durations (a baseline for `ranklens estimate eval`)"};
  std::string historyPath, ncclPath, target = "observed", jsonPath;
  app.add_option("--history", historyPath, "Duration history (ranklens history build)")->required();
  app.add_option("--nccl", ncclPath, "The real libnccl.so.2 (e.g. the pip wheel's nvidia/nccl/lib/libnccl.so.2)")
      ->required();
  app.add_option("--target", target,
                 "Compare with what each rank measured (observed) or with the collective's "
                 "own time, the shortest over the job's ranks (transfer)")
      ->check(CLI::IsMember({"observed", "transfer"}))
      ->capture_default_str();
  app.add_option("--json", jsonPath, "Also write the table as JSON to FILE");
  app.footer(
      "Run on a GPU machine with at least as many GPUs as the history's communicators have ranks.\n"
      "Exit status: 0 done, 1 failure, 2 bad usage, 77 no GPU.");
  CLI11_PARSE(app, argc, argv);

  rt::History history;
  std::string error;
  if (!(error = rt::loadHistory(historyPath, &history).message()).empty()) {
    fprintf(stderr, "nccl_sim_baseline: %s\n", error.c_str());
    return 1;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    fprintf(stderr, "nccl_sim_baseline: no GPU visible: NCCL's simulation needs one (run it on the GPU machine)\n");
    return 77;
  }
  Nccl nccl;
  if (!loadNccl(ncclPath, &nccl, &error)) {
    fprintf(stderr, "nccl_sim_baseline: %s\n", error.c_str());
    return 1;
  }
  int version = 0;
  nccl.getVersion(&version);

  uint64_t maxBytes = 0;
  for (const auto& s : history.samples) maxBytes = std::max(maxBytes, s.bytes);
  Simulator sim(nccl, maxBytes);
  // Estimates are per (op, datatype, bytes, nranks): simulate each once.
  std::map<std::tuple<int, int, uint64_t, int>, double> cache;
  std::map<std::string, std::vector<double>> errors;  // errorClass (and "all") -> relative errors
  std::map<std::string, size_t> skipped;              // why -> samples
  for (const auto& s : history.samples) {
    const int64_t value = target == "transfer" ? s.transferNs : s.durationNs;
    if (s.grouped || value <= 0) {
      skipped[s.grouped ? "grouped" : "no " + target + " duration"]++;
      continue;
    }
    const auto key = std::make_tuple(s.op, s.datatype, s.bytes, s.nranks);
    auto it = cache.find(key);
    std::string why;
    if (it == cache.end()) {
      it = cache.emplace(key, sim.estimateUs(s, &why)).first;
      if (cache.size() % 20 == 1) {  // progress: each new shape is one simulated group
        fprintf(stderr, "nccl_sim_baseline: %zu shapes simulated\n", cache.size());
        fflush(stderr);
      }
    }
    if (it->second < 0) {
      skipped[why.empty() ? "not simulated" : why]++;
      continue;
    }
    const double e = std::fabs(it->second * 1e3 - static_cast<double>(value)) / static_cast<double>(value);
    errors[rt::errorClass(s)].push_back(e);
    errors["all"].push_back(e);
  }

  nlohmann::json doc = {{"history", historyPath},
                        {"nccl", ncclPath},
                        {"nccl_version", version},
                        {"target", target},
                        {"samples", history.samples.size()},
                        {"gpus", gpus}};
  printf("%s: NCCL %d's ncclGroupSimulateEnd vs the recorded durations (%s), %zu samples\n\n", historyPath.c_str(),
         version, target.c_str(), history.samples.size());
  printf("%-28s %9s %10s %10s\n", "op / size class", "calls", "median", "p90");
  for (auto& [k, e] : errors) {
    const rt::ErrorStats stats = rt::errorStats(std::move(e));  // as `ranklens estimate eval` computes them
    printf("%-28s %9zu %9.2f%% %9.2f%%\n", k.c_str(), stats.count, stats.median * 100, stats.p90 * 100);
    doc["classes"][k] = {{"count", stats.count}, {"median", stats.median}, {"p90", stats.p90}};
  }
  for (const auto& [why, n] : skipped) {
    printf("not estimated: %zu samples (%s)\n", n, why.c_str());
    doc["not_estimated"][why] = n;
  }
  if (!jsonPath.empty()) {
    std::ofstream out(jsonPath);
    out << doc.dump(2) << "\n";
    if (!out) {
      fprintf(stderr, "nccl_sim_baseline: cannot write %s\n", jsonPath.c_str());
      return 1;
    }
  }
  return 0;
}
