// SPDX-License-Identifier: Apache-2.0
#include "launch.h"

#include "ranklens/share_gpu.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

extern char** environ;

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;

namespace {
fs::path selfDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return fs::current_path();
  buf[n] = '\0';
  return fs::path(buf).parent_path();
}
}  // namespace

std::string findLibrary(const std::string& given) {
  if (!given.empty()) return fs::exists(given) ? fs::absolute(given).string() : "";
  for (const char* rel : {"../nccl_fake/libnccl.so.2", "../lib/libnccl.so.2"}) {
    fs::path candidate = selfDir() / rel;
    if (fs::exists(candidate)) return candidate.lexically_normal().string();
  }
  return "";
}

std::string libraryNotFound() {
  return "cannot find RankLens's libnccl.so.2 next to " + selfDir().string() +
         " (looked in ../nccl_fake and ../lib); build it or pass --lib PATH";
}

std::string capture(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  *status = pclose(pipe);
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Status libraryLoads(const std::string& lib) {
  int status = 0;
  const std::string out = capture("ldd " + quote(lib) + " 2>/dev/null", &status);
  std::string missing;
  size_t at = 0;
  while ((at = out.find("=> not found", at)) != std::string::npos) {
    const size_t newline = out.rfind('\n', at);
    const size_t lineStart = newline == std::string::npos ? 0 : newline + 1;
    std::string name = out.substr(lineStart, at - lineStart);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    missing += (missing.empty() ? "" : ", ") + name;
    at += 12;
  }
  if (missing.empty()) return Status::ok();
  return Status::systemError(lib + " needs " + missing + ", which the loader cannot find (a preloaded library that " +
                             "does not load is skipped, and the job would run on the real NCCL): install the package " +
                             "that has it (Debian/Ubuntu: libisal2 for libisal.so.2, libyaml-cpp0.7 or 0.8 for " +
                             "libyaml-cpp), or copy it beside " + fs::path(lib).filename().string() +
                             " (it looks in its own folder first)");
}

Status usableLibrary(const std::string& given, std::string* lib) {
  *lib = findLibrary(given);
  if (lib->empty()) return Status::invalidArgument(libraryNotFound());
  if (Status loads = libraryLoads(*lib); !loads.isOk()) {
    lib->clear();
    return loads;
  }
  return Status::ok();
}

std::string prepend(const char* var, const std::string& value, char sep) {
  const char* old = getenv(var);
  return (old && *old) ? value + sep + old : value;
}

void pointAtLibrary(const std::string& lib, const std::string& override, std::map<std::string, std::string>* env) {
  if (override != "library-path") (*env)["LD_PRELOAD"] = prepend("LD_PRELOAD", lib, ':');
  if (override != "preload") (*env)["LD_LIBRARY_PATH"] = prepend("LD_LIBRARY_PATH", fs::path(lib).parent_path(), ':');
}

Status checkSettings(const std::map<std::string, std::string>& env, config::Settings* settings) {
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it != env.end() ? it->second.c_str() : getenv(name);
  };
  std::vector<std::string> names;
  for (char** e = environ; *e; ++e) names.emplace_back(std::string(*e).substr(0, std::string(*e).find('=')));
  for (const auto& [k, v] : env) names.push_back(k);
  std::vector<std::string> warnings;
  const Status loaded = config::loadFromEnvironment(lookup, settings, &warnings, &names);
  if (!loaded.isOk()) {
    std::cerr << "error: " << loaded.message() << "\n";
    return loaded;
  }
  for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
  return loaded;
}

int runCommand(const std::map<std::string, std::string>& env, const std::vector<std::string>& command) {
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t child = 0;
  int rc = posix_spawnp(&child, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    std::cerr << "error: cannot start " << command[0] << ": " << strerror(rc) << "\n";
    return 127;
  }
  // Ctrl-C reaches the child (same process group); we only wait for it.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string findPythonAdapter() {
  for (const fs::path& dir : {selfDir() / "../share/ranklens/python", fs::path(RANKLENS_SOURCE_PYTHON_DIR)})
    if (fs::exists(dir / "site" / "sitecustomize.py") && fs::exists(dir / "ranklens" / "adapter.py"))
      return dir.lexically_normal().string();
  return "";
}

namespace {
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}
}  // namespace

void enablePythonAdapter(const std::string& dir, bool store, std::map<std::string, std::string>* env) {
  (*env)["PYTHONPATH"] = prepend("PYTHONPATH", dir + "/site:" + dir, ':');
  (*env)["RANKLENS_ADAPTER"] = "1";
  if (!store) return;
  (*env)["RANKLENS_ADAPTER_STORE"] = "1";
  (*env)["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  (*env)["TORCHELASTIC_RESTART_COUNT"] = "0";
  (*env)["MASTER_ADDR"] = "127.0.0.1";
  const char* port = getenv("MASTER_PORT");
  (*env)["MASTER_PORT"] = port && *port ? port : std::to_string(freePort());
  // Settings under which a lone rank waits for peers that never come: each would block it in init or the first
  // collective, so the launcher overrides it (and says so).
  struct Hanging {
    const char* name;
    const char* value;
    const char* why;
  };
  for (const Hanging& h : {Hanging{"TORCH_DIST_INIT_BARRIER", "0", "the barrier after init waits for all ranks"},
                           Hanging{"TORCH_NCCL_DESYNC_DEBUG", "0", "desync debugging reads every peer's keys"}}) {
    const char* v = getenv(h.name);
    if (v && *v && std::string(v) != "0") {
      std::cerr << "warning: " << h.name << "=" << v << " set to " << h.value << ": " << h.why << "\n";
      (*env)[h.name] = h.value;
    }
  }
  const char* detail = getenv("TORCH_DISTRIBUTED_DEBUG");
  if (detail && std::string(detail) == "DETAIL") {
    std::cerr << "warning: TORCH_DISTRIBUTED_DEBUG=DETAIL set to INFO: DETAIL wraps every group in a Gloo helper "
                 "that connects to all peers\n";
    (*env)["TORCH_DISTRIBUTED_DEBUG"] = "INFO";
  }
}

namespace {
// The CUDA driver API through dlopen: the tool links no CUDA library, and runs on machines without one. Null when
// there is no driver or it does not initialise.
void* cudaDriver() {
  static void* driver = [] {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    using Init = int (*)(unsigned);
    auto init = cuda ? reinterpret_cast<Init>(dlsym(cuda, "cuInit")) : nullptr;
    return init != nullptr && init(0) == 0 ? cuda : nullptr;
  }();
  return driver;
}
}  // namespace

int visibleGpus() {
  using Count = int (*)(int*);
  void* cuda = cudaDriver();
  auto count = cuda ? reinterpret_cast<Count>(dlsym(cuda, "cuDeviceGetCount")) : nullptr;
  int n = 0;
  return count != nullptr && count(&n) == 0 ? n : 0;
}

uint64_t gpuMemoryBytes() {
  using Get = int (*)(int*, int);
  using TotalMem = int (*)(size_t*, int);
  void* cuda = cudaDriver();
  auto get = cuda ? reinterpret_cast<Get>(dlsym(cuda, "cuDeviceGet")) : nullptr;
  auto total = cuda ? reinterpret_cast<TotalMem>(dlsym(cuda, "cuDeviceTotalMem_v2")) : nullptr;
  int device = 0;
  size_t bytes = 0;
  if (visibleGpus() < 1 || get == nullptr || total == nullptr || get(&device, 0) != 0 || total(&bytes, device) != 0)
    return 0;
  return bytes;
}

Status shareGpus(const std::string& lib, std::map<std::string, std::string>* env, std::string* summary) {
  namespace sg = ranklens::share_gpu;
  if (const char* hostId = getenv("NCCL_HOSTID"); hostId != nullptr)
    return Status::invalidUsage(std::string("--share-gpu: NCCL_HOSTID is set (") + hostId +
                                "); RankLens gives every process of the job its own NCCL_HOSTID so that NCCL accepts "
                                "several ranks on one GPU: unset it");
  const fs::path placement = fs::path(lib).parent_path() / "libranklens_share_gpu.so";
  if (!fs::exists(placement))
    return Status::systemError("--share-gpu: " + placement.string() +
                               " is missing (it is built and installed beside libnccl.so.2): rebuild RankLens, or "
                               "pass --lib with a complete build");
  const int gpus = visibleGpus();
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  (*env)[sg::kGpusVar] = std::to_string(std::max(gpus, 1));
  (*env)[sg::kVisibleVar] = visible ? visible : sg::kVisibleUnset;
  auto preload = env->find("LD_PRELOAD");
  (*env)["LD_PRELOAD"] = preload == env->end() ? prepend("LD_PRELOAD", placement.string(), ':')
                                               : placement.string() + ":" + preload->second;
  const char* ifname = getenv("NCCL_SOCKET_IFNAME");
  if (ifname == nullptr || *ifname == '\0') (*env)["NCCL_SOCKET_IFNAME"] = "lo";
  *summary =
      "ranks share " +
      (gpus > 0 ? std::to_string(gpus) + " GPU" + (gpus > 1 ? "s (local rank % " + std::to_string(gpus) + ")" : "")
                : std::string("the GPU (none visible to the launcher: ranks are placed as on one)")) +
      ", each process with its own NCCL_HOSTID; NCCL connects them over sockets on " +
      (ifname && *ifname ? std::string("NCCL_SOCKET_IFNAME=") + ifname : std::string("lo")) +
      " (values and calls are a real run's, step times are not a lone rank's)";
  return Status::ok();
}

std::string freshDirectoryName(const std::string& base, const std::string& prefix) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return (fs::path(base) /
          (prefix + "-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "-" +
           std::to_string(getpid())))
      .string();
}

}  // namespace tools
}  // namespace ranklens
