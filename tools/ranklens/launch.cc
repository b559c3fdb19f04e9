// SPDX-License-Identifier: Apache-2.0
#include "launch.h"

#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

std::string prepend(const char* var, const std::string& value, char sep) {
  const char* old = getenv(var);
  return (old && *old) ? value + sep + old : value;
}

void pointAtLibrary(const std::string& lib, const std::string& override, std::map<std::string, std::string>* env) {
  if (override != "library-path") (*env)["LD_PRELOAD"] = prepend("LD_PRELOAD", lib, ':');
  if (override != "preload") (*env)["LD_LIBRARY_PATH"] = prepend("LD_LIBRARY_PATH", fs::path(lib).parent_path(), ':');
}

bool checkSettings(const std::map<std::string, std::string>& env, config::LoadResult* loaded) {
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it != env.end() ? it->second.c_str() : getenv(name);
  };
  std::vector<std::string> names;
  for (char** e = environ; *e; ++e) names.emplace_back(std::string(*e).substr(0, std::string(*e).find('=')));
  for (const auto& [k, v] : env) names.push_back(k);
  *loaded = config::loadFromEnvironment(lookup, &names);
  if (!loaded->ok) {
    std::cerr << "error: " << loaded->error << "\n";
    return false;
  }
  for (const auto& w : loaded->warnings) std::cerr << "warning: " << w << "\n";
  return true;
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

std::string freshDirectoryName(const std::string& base, const std::string& prefix) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return (fs::path(base) / (prefix + "-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) +
                            "-" + std::to_string(getpid())))
      .string();
}

}  // namespace tools
}  // namespace ranklens
