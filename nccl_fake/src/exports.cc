// SPDX-License-Identifier: Apache-2.0
// The exported C ABI, generated from the API lists: every NCCL function as a weak `ncclX` plus a strong `pncclX`
// alias (exactly as libnccl exports them, so PMPI-style profilers keep working), and RankLens's adapter API.
// No C++ exception crosses this boundary.
#include <cstdint>
#include <exception>
#include <string>

#include "nccl_fake/comm.h"
#include "nccl_fake/profiler_plugin.h"
#include "nccl_fake/record.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "ranklens_api.h"

namespace nccl_fake {
namespace {

template <typename T>
T failedValue() {
  if constexpr (std::is_same_v<T, ncclResult_t>)
    return ncclInternalError;
  else if constexpr (std::is_same_v<T, const char*>)
    return "internal error";
  else if constexpr (std::is_same_v<T, int>)
    return -1;
  else
    return T{};
}

template <typename T>
T onException(const char* name) {
  try {
    throw;
  } catch (const std::exception& e) {
    WARN("%s : internal error: %s", name, e.what());
  } catch (...) {
    WARN("%s : internal error (unknown exception)", name);
  }
  if constexpr (!std::is_void_v<T>) return failedValue<T>();
}

}  // namespace

namespace ranklens_api {
int ranklensApiVersion() { return RANKLENS_API_VERSION; }

ncclResult_t ranklensMarkStage(const char* name, int64_t step) {
  NCCLCHECK(ptrCheck(name, "ranklensMarkStage", "name"));
  NCCLCHECK(Runtime::get().ready("ranklensMarkStage"));
  ranklens::events::Stage stage;
  stage.name = name;
  stage.step = step;
  stage.timeNs = monotonicNs();
  if (record::active()) record::noteStage(step);
  if (replay::active()) replay::noteStage(name, stage.timeNs);
  Runtime::get().emit(ranklens::trace::RecordType::kStage, stage);
  return ncclSuccess;
}

ncclResult_t ranklensFlush() {
  NCCLCHECK(Runtime::get().ready("ranklensFlush"));
  if (record::active())
    record::flush();
  else
    Runtime::get().flushEvents();
  return ncclSuccess;
}

const char* ranklensEventLogPath() {
  static std::string path;  // stable storage for the returned pointer
  if (Runtime::get().ready("ranklensEventLogPath") != ncclSuccess) return "";
  path = Runtime::get().eventLogPath();
  return path.c_str();
}
}  // namespace ranklens_api

}  // namespace nccl_fake

// Collectives and P2P calls go to their one wrapper in both modes (it submits to record's or replay's backend);
// every other function to record:: in record mode.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit is deprecated but exported

#define NCCL_FAKE_ALIAS_1(ret, name, params) \
  extern "C" __attribute__((visibility("default"), alias(#name))) ret p##name params;
#define NCCL_FAKE_ALIAS_0(ret, name, params)
#define NCCL_FAKE_API(ret, name, params, args, prof)                               \
  extern "C" __attribute__((visibility("default"), weak)) ret name params {        \
    try {                                                                          \
      if constexpr (!nccl_fake::record::pipelined(nccl_fake::real::ApiId::name)) { \
        if (nccl_fake::record::active()) return nccl_fake::record::name args;      \
      }                                                                            \
      return nccl_fake::impl::name args;                                           \
    } catch (...) {                                                                \
      return nccl_fake::onException<ret>(#name);                                   \
    }                                                                              \
  }                                                                                \
  NCCL_FAKE_ALIAS_##prof(ret, name, params)
#include "nccl_api.def"
#undef NCCL_FAKE_API

#define RANKLENS_API(ret, name, params, args)                         \
  extern "C" __attribute__((visibility("default"))) ret name params { \
    try {                                                             \
      return nccl_fake::ranklens_api::name args;                      \
    } catch (...) {                                                   \
      return nccl_fake::onException<ret>(#name);                      \
    }                                                                 \
  }
#include "ranklens_api.def"
#undef RANKLENS_API

// The profiler plugin table (record mode's kernel clock, nccl_fake/profiler_plugin.h): the real NCCL looks it up
// by this name in the library NCCL_PROFILER_PLUGIN names, which record mode points at this one.
#define RANKLENS_PLUGIN_TABLE(name, value) \
  extern "C" __attribute__((visibility("default"))) const nccl_fake::profiler::Table name = value;
#include "ranklens_api.def"
#undef RANKLENS_PLUGIN_TABLE

#pragma GCC diagnostic pop
