// SPDX-License-Identifier: Apache-2.0
// Logging in NCCL's shape, under NCCL's switches (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE), so RankLens's
// lines interleave with the framework's NCCL expectations. Every WARN also becomes ncclGetLastError's text.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "ranklens/status.h"

namespace nccl_fake {

enum LogLevel { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };

// Subsystem bits: NCCL's names, plus RANKLENS for our own lines.
enum LogSubsys : uint64_t {
  kSubInit = 1 << 0,
  kSubColl = 1 << 1,
  kSubP2p = 1 << 2,
  kSubEnv = 1 << 5,
  kSubAlloc = 1 << 6,
  kSubCall = 1 << 7,
  kSubReg = 1 << 11,
  kSubRanklens = 1ull << 40,
  kSubAll = ~0ull,
};

void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// A message the user must see whatever NCCL_DEBUG says (a replay about to give a wrong or no answer): a WARN in
// NCCL's shape when NCCL_DEBUG shows warnings, else "ranklens: <severity>: <message>" on stderr; once either way,
// and always ncclGetLastError's text. Severity "" prints "ranklens: <message>".
void sayAlways(const char* severity, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
// The level, parsed once from NCCL_DEBUG (cheap check before formatting).
LogLevel logLevel();
// Re-reads NCCL_DEBUG* (ncclResetDebugInit).
void resetLogging();
// Text of the last WARN, for ncclGetLastError.
const char* lastErrorText();
void setLastErrorText(const char* text);

// The C boundary for the one error convention inside (ranklens::Status): NCCL's code for the status (equal where
// NCCL has one; kCorrupt -> ncclInvalidUsage, kUnsupported -> ncclInvalidArgument) and, on failure, its message
// as a WARN ("<opName> : <message>", or the message alone when opName is null), which ncclGetLastError returns.
ncclResult_t ncclCode(ranklens::Status::Code code);
ncclResult_t toNcclResult(const ranklens::Status& status, const char* opName = nullptr);

}  // namespace nccl_fake

// WARN always stores the message for ncclGetLastError, even when NCCL_DEBUG hides it (as NCCL does).
#define WARN(...) ::nccl_fake::logMessage(::nccl_fake::kLogWarn, ::nccl_fake::kSubAll, __FILE__, __LINE__, __VA_ARGS__)
#define SAY_ERROR(...) ::nccl_fake::sayAlways("error", __FILE__, __LINE__, __VA_ARGS__)
#define SAY_WARNING(...) ::nccl_fake::sayAlways("warning", __FILE__, __LINE__, __VA_ARGS__)
#define SAY(...) ::nccl_fake::sayAlways("", __FILE__, __LINE__, __VA_ARGS__)
#define INFO(SUBSYS, ...)                                                                        \
  do {                                                                                           \
    if (::nccl_fake::logLevel() >= ::nccl_fake::kLogInfo)                                        \
      ::nccl_fake::logMessage(::nccl_fake::kLogInfo, (SUBSYS), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TRACE(SUBSYS, ...)                                                                        \
  do {                                                                                            \
    if (::nccl_fake::logLevel() >= ::nccl_fake::kLogTrace)                                        \
      ::nccl_fake::logMessage(::nccl_fake::kLogTrace, (SUBSYS), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
