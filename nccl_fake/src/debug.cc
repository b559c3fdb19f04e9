// SPDX-License-Identifier: Apache-2.0
#include "nccl_fake/debug.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace nccl_fake {
namespace {

struct LogState {
  std::atomic<int> level{-1};  // -1: not parsed yet
  uint64_t mask = kSubInit | kSubEnv | kSubRanklens;
  FILE* file = stdout;  // NCCL logs to stdout unless NCCL_DEBUG_FILE is set
  char host[64] = "";
  std::mutex mu;
  char lastError[1024] = "";
};

LogState& state() {
  static LogState* s = new LogState();  // never destroyed: logging must work from atexit handlers
  return *s;
}

struct SubsysName {
  const char* name;
  uint64_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kSubInit}, {"COLL", kSubColl}, {"P2P", kSubP2p},           {"ENV", kSubEnv}, {"ALLOC", kSubAlloc},
    {"CALL", kSubCall}, {"REG", kSubReg},   {"RANKLENS", kSubRanklens}, {"ALL", kSubAll},
};

// NCCL_DEBUG_SUBSYS: comma list, a leading ^ inverts the whole list.
uint64_t parseSubsys(const char* text) {
  if (text == nullptr) return kSubInit | kSubEnv | kSubRanklens;  // NCCL's default (INIT,BOOTSTRAP,ENV) + ours
  bool invert = text[0] == '^';
  if (invert) ++text;
  uint64_t mask = 0;
  std::string all(text);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    std::string token = all.substr(start, end - start);
    for (const auto& s : kSubsysNames)
      if (strcasecmp(token.c_str(), s.name) == 0) mask |= s.bit;
    start = end + 1;
  }
  return invert ? ~mask : mask;
}

// NCCL_DEBUG_FILE: %h -> host, %p -> pid, %% -> %.
std::string expandDebugFile(const char* pattern, const char* host) {
  std::string out;
  for (const char* p = pattern; *p; ++p) {
    if (*p == '%' && p[1]) {
      ++p;
      if (*p == 'h')
        out += host;
      else if (*p == 'p')
        out += std::to_string(getpid());
      else
        out += *p;
    } else {
      out += *p;
    }
  }
  return out;
}

void initLocked(LogState& s) {
  if (s.level.load(std::memory_order_relaxed) >= 0) return;
  gethostname(s.host, sizeof(s.host) - 1);
  if (char* dot = strchr(s.host, '.')) *dot = '\0';
  int level = kLogNone;
  if (const char* env = getenv("NCCL_DEBUG")) {
    if (strcasecmp(env, "VERSION") == 0)
      level = kLogVersion;
    else if (strcasecmp(env, "WARN") == 0)
      level = kLogWarn;
    else if (strcasecmp(env, "INFO") == 0)
      level = kLogInfo;
    else if (strcasecmp(env, "ABORT") == 0)
      level = kLogAbort;
    else if (strcasecmp(env, "TRACE") == 0)
      level = kLogTrace;
  }
  s.mask = parseSubsys(getenv("NCCL_DEBUG_SUBSYS"));
  s.file = stdout;
  if (const char* pattern = getenv("NCCL_DEBUG_FILE"); pattern != nullptr && level > kLogVersion) {
    std::string path = expandDebugFile(pattern, s.host);
    if (FILE* f = fopen(path.c_str(), "w")) {
      setvbuf(f, nullptr, _IOLBF, 0);
      s.file = f;
    }
  }
  s.level.store(level, std::memory_order_release);
}

}  // namespace

LogLevel logLevel() {
  LogState& s = state();
  int level = s.level.load(std::memory_order_acquire);
  if (level < 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    initLocked(s);
    level = s.level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void resetLogging() {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file != stdout && s.file != nullptr) fclose(s.file);
  s.file = stdout;
  s.level.store(-1, std::memory_order_release);
  initLocked(s);
}

namespace {

std::string formatV(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  const int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(text.data(), text.size() + 1, fmt, ap);
  return text;
}

// One line in NCCL's shape on the log file; the caller holds s.mu.
void printLocked(LogState& s, LogLevel level, const char* file, int line, const std::string& message) {
  int tid = static_cast<int>(syscall(SYS_gettid));
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  // Device index is -1 until a CUDA device is known; NCCL prints the caller's device, we print the comm's when set.
  if (level == kLogWarn) {
    // NCCL's shape: a blank line, a timestamp (NCCL prints one for WARN only by default), then the location.
    char stamp[32];
    time_t now = time(nullptr);
    struct tm tmNow;
    localtime_r(&now, &tmNow);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tmNow);
    fprintf(s.file, "\n[%s] %s:%d:%d [0] %s:%d NCCL WARN RANKLENS: %s\n", stamp, s.host, getpid(), tid, base, line,
            message.c_str());
  } else {
    fprintf(s.file, "%s:%d:%d [0] NCCL %s RANKLENS: %s\n", s.host, getpid(), tid, level == kLogTrace ? "TRACE" : "INFO",
            message.c_str());
  }
  fflush(s.file);
}

}  // namespace

void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  LogState& s = state();
  LogLevel current = logLevel();
  va_list ap;
  va_start(ap, fmt);
  const std::string message = formatV(fmt, ap);
  va_end(ap);

  std::lock_guard<std::mutex> lock(s.mu);
  if (level == kLogWarn) snprintf(s.lastError, sizeof(s.lastError), "%s", message.c_str());
  if (current < level || (level != kLogWarn && (s.mask & subsys) == 0)) return;
  printLocked(s, level, file, line, message);
}

void sayAlways(const char* severity, const char* file, int line, const char* fmt, ...) {
  LogState& s = state();
  LogLevel current = logLevel();
  va_list ap;
  va_start(ap, fmt);
  const std::string message = formatV(fmt, ap);
  va_end(ap);

  std::lock_guard<std::mutex> lock(s.mu);
  snprintf(s.lastError, sizeof(s.lastError), "%s", message.c_str());
  if (current >= kLogWarn) {
    printLocked(s, kLogWarn, file, line, message);
  } else {
    fprintf(stderr, "ranklens: %s%s%s\n", severity, *severity ? ": " : "", message.c_str());
    fflush(stderr);
  }
}

const char* lastErrorText() { return state().lastError; }

ncclResult_t ncclCode(ranklens::Status::Code code) {
  using Code = ranklens::Status::Code;
  switch (code) {
    case Code::kOk:
      return ncclSuccess;
    case Code::kUnhandledCudaError:
      return ncclUnhandledCudaError;
    case Code::kSystemError:
      return ncclSystemError;
    case Code::kInternalError:
      return ncclInternalError;
    case Code::kInvalidArgument:
      return ncclInvalidArgument;
    case Code::kInvalidUsage:
      return ncclInvalidUsage;
    case Code::kRemoteError:
      return ncclRemoteError;
    case Code::kCorrupt:
      return ncclInvalidUsage;  // a damaged trace or settings file: the job's setup is wrong
    case Code::kUnsupported:
      return ncclInvalidArgument;  // what NCCL answers for a request it cannot serve
  }
  return ncclInternalError;
}

ncclResult_t toNcclResult(const ranklens::Status& status, const char* opName) {
  if (status.isOk()) return ncclSuccess;
  if (opName != nullptr)
    WARN("%s : %s", opName, status.message().c_str());
  else
    WARN("%s", status.message().c_str());
  return ncclCode(status.code());
}

void setLastErrorText(const char* text) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  snprintf(s.lastError, sizeof(s.lastError), "%s", text);
}

}  // namespace nccl_fake
