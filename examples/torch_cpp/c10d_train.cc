// SPDX-License-Identifier: Apache-2.0
// c10d_train: a data-parallel libtorch training loop over c10d's ProcessGroupNCCL, the C++ client of PyTorch's
// NCCL backend. An ordinary program: it links libtorch (whose libtorch_cuda loads NCCL) and knows nothing about
// RankLens, except that --mark-steps calls ranklensMarkStage when some loaded library exports it.
//
// Each rank builds an fp32 MLP (Linear width->hidden, GELU, Linear hidden->width) from its own seed (seed + rank),
// then takes rank 0's parameters by one broadcast per parameter. Every step: a synthetic batch from a CUDA generator
// seeded by (seed, rank, step), MSE loss to sin(batch), backward, one all-reduce (sum) of all gradients flattened
// into a single bucket (as DDP does), divided by the world size, an SGD-with-momentum step, and an all-reduce of the
// scalar loss for the logged mean.
//
// Usage:  torchrun --standalone --nproc-per-node N --no-python c10d_train [options]   (see --help)
// Output: `step <i> loss <mean over ranks> time_ms <ms> local_loss <this rank's>` per step (rank 0, or every rank
// with --log-all-ranks, prefixed `[rank r/N]`), then one `RESULT {json}` line per rank, in the shape of
// examples/torch/train_gpt.py's. Exit status: 0 every loss finite; 1 error or non-finite loss; 64 bad usage.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // ProcessGroupNCCL.hpp is empty without it; torch's torch_cuda target defines it too
#endif

#include <dlfcn.h>

#include <c10/cuda/CUDAFunctions.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kExitUsage = 64;      // EX_USAGE
constexpr size_t kWarmupSteps = 3;  // left out of median_step_ms, as in train_gpt.py

const char* const kUsage =
    "usage: RANK=r WORLD_SIZE=n [LOCAL_RANK=l] c10d_train [options]\n"
    "  normally launched by: torchrun --standalone --nproc-per-node N --no-python c10d_train [options]\n"
    "options:\n"
    "  --steps N          training steps (default 10)\n"
    "  --width W          MLP input/output width (default 1024)\n"
    "  --hidden H         MLP hidden width (default 4096)\n"
    "  --batch B          rows per rank and step (default 32)\n"
    "  --seed S           base seed: rank r initialises from S + r, its batches from (S, r, step) (default 1234)\n"
    "  --lr X             SGD learning rate, momentum 0.9 (default 0.1)\n"
    "  --store PATH       c10d FileStore file (default /tmp/c10d_train.<id>.store, <id> = TORCHELASTIC_RUN_ID,\n"
    "                     else MASTER_PORT, else 'default'); all ranks of a job must name the same file\n"
    "  --deterministic    deterministic algorithms (CUBLAS_WORKSPACE_CONFIG=:4096:8 unless already set)\n"
    "  --mark-steps       call ranklensMarkStage(\"step\", i) before step i (and with N after the last) when loaded\n"
    "  --save-params PATH write the final parameters (raw float32, parameter order) to PATH, {rank} = the rank\n"
    "  --log-all-ranks    log every rank's steps, prefixed [rank r/N]\n"
    "  --help             this text\n"
    "exit status: 0 all losses finite, 1 error or non-finite loss, 64 bad usage\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  int64_t steps = 10, width = 1024, hidden = 4096, batch = 32, seed = 1234;
  double lr = 0.1;
  std::string store, saveParams;
  bool deterministic = false, markSteps = false, logAllRanks = false, help = false;
};

int64_t parseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || value < lo || value > hi)
    throw UsageError(what + ": expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return value;
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + ": missing value");
      return argv[++i];
    };
    auto integer = [&](int64_t lo, int64_t hi) { return parseInt(value(), lo, hi, arg); };
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--steps") {
      o.steps = integer(1, 1000000);
    } else if (arg == "--width") {
      o.width = integer(1, 1 << 16);
    } else if (arg == "--hidden") {
      o.hidden = integer(1, 1 << 16);
    } else if (arg == "--batch") {
      o.batch = integer(1, 1 << 20);
    } else if (arg == "--seed") {
      o.seed = integer(0, INT32_MAX);
    } else if (arg == "--lr") {
      const std::string text = value();
      char* end = nullptr;
      o.lr = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(o.lr > 0) || !std::isfinite(o.lr))
        throw UsageError("--lr: expected a number > 0");
    } else if (arg == "--store") {
      o.store = value();
    } else if (arg == "--save-params") {
      o.saveParams = value();
    } else if (arg == "--deterministic") {
      o.deterministic = true;
    } else if (arg == "--mark-steps") {
      o.markSteps = true;
    } else if (arg == "--log-all-ranks") {
      o.logAllRanks = true;
    } else {
      throw UsageError("unknown argument: " + arg);
    }
  }
  return o;
}

int64_t envInt(const char* name, int64_t fallback, int64_t lo, int64_t hi, bool required) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (required)
      throw UsageError(std::string(name) +
                       " is not set: launch with torchrun (e.g. torchrun --standalone "
                       "--nproc-per-node 2 --no-python c10d_train) or set RANK and WORLD_SIZE");
    return fallback;
  }
  return parseInt(text, lo, hi, std::string(name) + "=" + text);
}

// A FileStore, not a TCPStore: under `ranklens replay` the lone rank has no peers to wait for and no TCPStore server
// to connect to, while a file on this host needs no server. torchrun --standalone gives all local ranks the same
// TORCHELASTIC_RUN_ID (a fresh one per launch; plain torchrun's default id is "none"), ranklens replay a free
// MASTER_PORT, so the default file is new for each job: a stale one could hand a rank an old ncclUniqueId.
std::string defaultStorePath() {
  const char* id = std::getenv("TORCHELASTIC_RUN_ID");
  if (id == nullptr || *id == '\0' || std::string(id) == "none") id = std::getenv("MASTER_PORT");
  if (id == nullptr || *id == '\0') id = "default";
  return std::string("/tmp/c10d_train.") + id + ".store";
}

std::string replaceRank(std::string path, int64_t rank) {
  for (size_t at; (at = path.find("{rank}")) != std::string::npos;) path.replace(at, 6, std::to_string(rank));
  return path;
}

// The step marker RankLens's libnccl.so.2 exports (it returns an ncclResult_t, an int); absent under real NCCL.
using MarkStageFn = int (*)(const char*, int64_t);

// 64-bit FNV-1a, so that two runs' parameters can be compared from their RESULT lines alone.
uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string jsonNumber(double v, const char* format) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Infinity (train_gpt.py writes null too)
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string jsonList(const std::vector<double>& values, const char* format) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + jsonNumber(values[i], format);
  return out + "]";
}

int run(const Options& o) {
  const int64_t rank = envInt("RANK", 0, 0, INT32_MAX, true);
  const int64_t world = envInt("WORLD_SIZE", 1, 1, INT32_MAX, true);
  const int64_t localRank = envInt("LOCAL_RANK", 0, 0, INT32_MAX, false);
  if (rank >= world)
    throw UsageError("RANK=" + std::to_string(rank) + " must be below WORLD_SIZE=" + std::to_string(world));
  const std::string prefix = o.logAllRanks ? "[rank " + std::to_string(rank) + "/" + std::to_string(world) + "] " : "";
  const bool logHere = o.logAllRanks || rank == 0;

  // cuBLAS reads its workspace setting when its first handle is made, so set it before any CUDA work.
  if (o.deterministic) {
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, false);
  }
  const auto deviceCount = static_cast<int64_t>(torch::cuda::device_count());
  if (deviceCount < 1) throw std::runtime_error("no CUDA device visible: ProcessGroupNCCL needs one");
  const auto deviceIndex = static_cast<c10::DeviceIndex>(localRank % deviceCount);
  c10::cuda::set_device(deviceIndex);
  const torch::Device device(torch::kCUDA, deviceIndex);

  const std::string storePath = o.store.empty() ? defaultStorePath() : o.store;
  auto store = c10::make_intrusive<c10d::FileStore>(storePath, static_cast<int>(world));
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(world),
                                                        c10d::ProcessGroupNCCL::Options::create());

  MarkStageFn markStage = nullptr;
  if (o.markSteps) {
    markStage = reinterpret_cast<MarkStageFn>(dlsym(RTLD_DEFAULT, "ranklensMarkStage"));
    std::fprintf(stderr, "%s--mark-steps: %s\n", prefix.c_str(),
                 markStage ? "ranklensMarkStage found; marking every step"
                           : "ranklensMarkStage is not loaded (RankLens's library not in use); no step marks");
  }
  auto mark = [&](int64_t step) {
    if (markStage != nullptr) markStage("step", step);
  };

  // A different initialisation on every rank, so the broadcast below visibly matters (and value replay must restore
  // rank 0's parameters from the recording).
  torch::manual_seed(static_cast<uint64_t>(o.seed + rank));
  torch::nn::Sequential model(torch::nn::Linear(o.width, o.hidden), torch::nn::GELU(),
                              torch::nn::Linear(o.hidden, o.width));
  model->to(device);
  std::vector<torch::Tensor> params = model->parameters();
  {
    torch::NoGradGuard noGrad;
    for (auto& p : params) {
      std::vector<at::Tensor> one{p};
      c10d::BroadcastOptions opts;
      opts.rootRank = 0;
      pg->broadcast(one, opts)->wait();
    }
  }

  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(o.lr).momentum(0.9));
  at::Generator gen = at::cuda::detail::createCUDAGenerator(deviceIndex);
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  std::vector<double> losses, stepMs;

  for (int64_t step = 0; step < o.steps; ++step) {
    mark(step);
    const auto t0 = std::chrono::steady_clock::now();
    {
      // Released before randn, which takes the generator's lock itself.
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_current_seed(static_cast<uint64_t>(o.seed) * 1000003ull + static_cast<uint64_t>(rank) * 65537ull +
                           static_cast<uint64_t>(step));
    }
    const torch::Tensor x = torch::randn({o.batch, o.width}, gen, fp32);
    optimizer.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(x), torch::sin(x));
    loss.backward();

    // One flat gradient bucket, all-reduced in place and averaged, then copied back (what DDP's reducer does).
    {
      torch::NoGradGuard noGrad;
      std::vector<torch::Tensor> flat;
      for (auto& p : params) flat.push_back(p.grad().reshape(-1));
      std::vector<at::Tensor> bucket{torch::cat(flat)};
      pg->allreduce(bucket)->wait();  // AllreduceOptions() is a sum
      bucket[0].div_(static_cast<double>(world));
      int64_t offset = 0;
      for (auto& p : params) {
        const int64_t n = p.numel();
        p.grad().copy_(bucket[0].narrow(0, offset, n).view_as(p.grad()));
        offset += n;
      }
    }
    optimizer.step();

    std::vector<at::Tensor> lossSum{loss.detach().clone()};
    pg->allreduce(lossSum)->wait();
    const double local = loss.item<float>();
    const double mean = lossSum[0].item<float>() / static_cast<double>(world);
    torch::cuda::synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(local);
    stepMs.push_back(ms);
    if (logHere)
      std::printf("%sstep %lld loss %.6f time_ms %.3f local_loss %.6f\n", prefix.c_str(), static_cast<long long>(step),
                  mean, ms, local);
    std::fflush(stdout);
  }
  mark(o.steps);

  // Parameter bytes in parameter order: the digest always, the file on request (raw, so `cmp` compares two runs).
  uint64_t digest = 0xcbf29ce484222325ull;
  std::vector<torch::Tensor> cpuParams;
  int64_t nParams = 0;
  for (auto& p : params) {
    cpuParams.push_back(p.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    digest = fnv1a64(cpuParams.back().data_ptr(), cpuParams.back().nbytes(), digest);
    nParams += p.numel();
  }
  char digestHex[17];
  std::snprintf(digestHex, sizeof digestHex, "%016llx", static_cast<unsigned long long>(digest));
  if (!o.saveParams.empty()) {
    const std::string path = replaceRank(o.saveParams, rank);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (auto& t : cpuParams)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!out.flush()) throw std::runtime_error("--save-params: cannot write " + path);
    std::fprintf(stderr, "%ssaved parameters to %s (%lld float32, fnv1a64 %s)\n", prefix.c_str(), path.c_str(),
                 static_cast<long long>(nParams), digestHex);
  }

  std::vector<int64_t> nonfinite;
  for (size_t i = 0; i < losses.size(); ++i)
    if (!std::isfinite(losses[i])) nonfinite.push_back(static_cast<int64_t>(i));
  std::vector<double> timed(stepMs.size() > kWarmupSteps ? stepMs.begin() + kWarmupSteps : stepMs.begin(),
                            stepMs.end());
  std::sort(timed.begin(), timed.end());
  const size_t m = timed.size();
  const double median = m == 0 ? NAN : (m % 2 ? timed[m / 2] : (timed[m / 2 - 1] + timed[m / 2]) / 2);
  std::string nonfiniteJson = "[";
  for (size_t i = 0; i < nonfinite.size(); ++i) nonfiniteJson += (i ? ", " : "") + std::to_string(nonfinite[i]);
  nonfiniteJson += "]";

  std::printf(
      "RESULT {\"rank\": %lld, \"world_size\": %lld, \"parallel\": \"c10d-cpp\", \"steps\": %zu, "
      "\"steps_requested\": %lld, \"final_loss\": %s, \"all_finite\": %s, \"median_step_ms\": %s, "
      "\"nonfinite_steps\": %s, \"losses\": %s, \"step_ms\": %s, \"params\": %lld, \"param_digest\": \"%s\", "
      "\"torch\": %s, \"device\": %s}\n",
      static_cast<long long>(rank), static_cast<long long>(world), losses.size(), static_cast<long long>(o.steps),
      jsonNumber(losses.empty() ? NAN : losses.back(), "%.9g").c_str(), nonfinite.empty() ? "true" : "false",
      jsonNumber(median, "%.3f").c_str(), nonfiniteJson.c_str(), jsonList(losses, "%.9g").c_str(),
      jsonList(stepMs, "%.3f").c_str(), static_cast<long long>(nParams), digestHex, jsonString(TORCH_VERSION).c_str(),
      jsonString(at::cuda::getDeviceProperties(deviceIndex)->name).c_str());
  std::fflush(stdout);

  // Destroys the communicators now (normal exit) rather than from the destructor, which warns and may abort them.
  pg->shutdown();
  if (!nonfinite.empty()) {
    std::fprintf(stderr, "%serror: non-finite loss at step(s) %s\n", prefix.c_str(), nonfiniteJson.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parseArgs(argc, argv);
    if (o.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "c10d_train: %s\n(c10d_train --help lists the options)\n", e.what());
    return kExitUsage;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "c10d_train: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d_train: error: %s\n", e.what());
    return 1;
  }
}
