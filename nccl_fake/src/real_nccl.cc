// SPDX-License-Identifier: Apache-2.0
#include "nccl_fake/real_nccl.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RANKLENS_NO_DEEPBIND 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RANKLENS_NO_DEEPBIND 1
#endif
#endif

namespace nccl_fake {
namespace real {
namespace {

struct FunctionName {
  const char* name;
  bool profiled;  // also exported as pnccl*
};
constexpr FunctionName kFunctions[] = {
#define NCCL_FAKE_API(ret, name, params, args, prof) {#name, prof == 1},
#include "nccl_api.def"
#undef NCCL_FAKE_API
};

thread_local int realCallDepth = 0;

bool sameFile(const std::string& a, const struct stat& b) {
  struct stat sa;
  return stat(a.c_str(), &sa) == 0 && sa.st_dev == b.st_dev && sa.st_ino == b.st_ino;
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void addGlob(const std::string& pattern, const std::string& why, std::vector<Candidate>* out) {
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out->push_back({g.gl_pathv[i], why});
  }
  globfree(&g);
}

// Every directory of a colon-separated list.
std::vector<std::string> splitPath(const char* value) {
  std::vector<std::string> dirs;
  if (value == nullptr) return dirs;
  std::string text = value;
  size_t start = 0;
  while (start <= text.size()) {
    size_t colon = text.find(':', start);
    std::string dir = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) dirs.push_back(dir);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return dirs;
}

std::vector<std::string> loadedObjects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && *info->dlpi_name)
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &names);
  return names;
}

Library& state() {
  static Library* library = new Library();  // never destroyed: NCCL is called from atexit handlers
  return *library;
}

// Opens `path` and resolves the table; "" on success, else why the file is refused.
std::string tryOpen(const std::string& path, Library* out) {
  // DEEPBIND: the real library's references to its own exported names resolve inside it, not to RankLens (which
  // precedes it in the global scope when preloaded). Sanitizer runtimes refuse DEEPBIND; the reentry guard covers.
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef RANKLENS_NO_DEEPBIND
  flags |= RTLD_DEEPBIND;
#endif
  void* handle = dlopen(path.c_str(), flags);
  if (handle == nullptr) {
    const char* why = dlerror();
    return std::string("cannot be opened: ") + (why ? why : "unknown dlopen error");
  }
  if (dlsym(handle, "ranklensApiVersion") != nullptr) {
    dlclose(handle);
    return "is a RankLens library, not the real NCCL";
  }
  Library lib;
  lib.path = path;
  for (size_t i = 0; i < sizeof(kFunctions) / sizeof(kFunctions[0]); ++i) {
    void* fn = nullptr;
    // The pncclX entry points first: NCCL's own profiling interface, never interposed by anyone else.
    if (kFunctions[i].profiled) fn = dlsym(handle, (std::string("p") + kFunctions[i].name).c_str());
    if (fn == nullptr) fn = dlsym(handle, kFunctions[i].name);
    if (fn == nullptr) lib.missing.push_back(kFunctions[i].name);
    lib.functions[i] = fn;
  }
  auto getVersion = reinterpret_cast<ncclResult_t (*)(int*)>(lib.functions[static_cast<int>(ApiId::ncclGetVersion)]);
  if (getVersion == nullptr) {
    dlclose(handle);
    return "does not export ncclGetVersion: not an NCCL library";
  }
  {
    RealCallScope scope;
    if (getVersion(&lib.version) != ncclSuccess) lib.version = 0;
  }
  lib.ok = true;
  *out = std::move(lib);
  return "";
}

}  // namespace

bool insideRealCall() { return realCallDepth > 0; }
RealCallScope::RealCallScope() { ++realCallDepth; }
RealCallScope::~RealCallScope() { --realCallDepth; }

std::string selfPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&selfPath), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::vector<Candidate> discoveryCandidates(const std::string& configuredPath) {
  std::vector<Candidate> out;
  if (!configuredPath.empty()) {
    out.push_back({configuredPath, "configured (real_nccl / RANKLENS_REAL_NCCL)"});
    return out;
  }
  // 1. A libnccl already in the process: torch preloads its wheel's copy by absolute path.
  const std::vector<std::string> objects = loadedObjects();
  for (const std::string& name : objects)
    if (name.find("/libnccl.so") != std::string::npos) out.push_back({name, "already loaded by this process"});
  // 2. Python environments: the nvidia-nccl wheel next to a loaded torch, in active venv/conda prefixes, PYTHONPATH.
  for (const std::string& name : objects) {
    const size_t at = name.find("/site-packages/");
    if (at != std::string::npos)
      addGlob(name.substr(0, at) + "/site-packages/nvidia/nccl/lib/libnccl.so.2",
              "nvidia-nccl wheel beside a loaded Python package", &out);
  }
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* prefix = getenv(var);
    if (prefix == nullptr || *prefix == '\0') continue;
    addGlob(std::string(prefix) + "/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
            std::string("nvidia-nccl wheel in $") + var, &out);
    addGlob(std::string(prefix) + "/lib/libnccl.so.2", std::string("$") + var + "/lib", &out);
  }
  for (const std::string& dir : splitPath(getenv("PYTHONPATH")))
    addGlob(dir + "/nvidia/nccl/lib/libnccl.so.2", "nvidia-nccl wheel on PYTHONPATH", &out);
  // 3. The dynamic loader's places.
  for (const std::string& dir : splitPath(getenv("LD_LIBRARY_PATH")))
    addGlob(dir + "/libnccl.so.2", "LD_LIBRARY_PATH", &out);
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu",
                          "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib", "/usr/lib"})
    addGlob(std::string(dir) + "/libnccl.so.2", "system library directory", &out);
  return out;
}

const Library& loaded() { return state(); }

const Library& library(const std::string& configuredPath) {
  static std::once_flag once;
  std::call_once(once, [&] {
    Library& lib = state();
    struct stat self;
    const std::string me = selfPath();
    const bool haveSelf = !me.empty() && stat(me.c_str(), &self) == 0;
    std::string refused, lastWhy;
    std::vector<std::string> tried;
    for (const Candidate& candidate : discoveryCandidates(configuredPath)) {
      if (std::find(tried.begin(), tried.end(), candidate.path) != tried.end()) continue;
      tried.push_back(candidate.path);
      std::string why;
      if (!exists(candidate.path))
        why = "does not exist";
      else if (haveSelf && sameFile(candidate.path, self))
        why = "is this RankLens library itself";
      else
        why = tryOpen(candidate.path, &lib);
      if (why.empty()) {
        INFO(kSubInit | kSubRanklens, "record: real NCCL %s (%s), version %d%s", candidate.path.c_str(),
             candidate.why.c_str(), lib.version,
             lib.missing.empty() ? "" : ", some functions missing (calling them fails with ncclInvalidUsage)");
        return;
      }
      INFO(kSubInit | kSubRanklens, "record: skipping %s (%s): %s", candidate.path.c_str(), candidate.why.c_str(),
           why.c_str());
      refused += "; " + candidate.path + " " + why;
      lastWhy = why;
    }
    lib.ok = false;
    if (!configuredPath.empty()) {
      lib.error = "record mode: the real NCCL configured as " + configuredPath + " " + lastWhy +
                  "; set RANKLENS_REAL_NCCL (or real_nccl:) to the path of NVIDIA's libnccl.so.2";
    } else {
      lib.error = "record mode: no real NCCL found (" +
                  (tried.empty() ? std::string("no candidates") : refused.substr(2)) +
                  "); set RANKLENS_REAL_NCCL to the path of NVIDIA's libnccl.so.2 (pip: <site-packages>/nvidia/nccl/"
                  "lib/libnccl.so.2)";
    }
  });
  return state();
}

}  // namespace real
}  // namespace nccl_fake
