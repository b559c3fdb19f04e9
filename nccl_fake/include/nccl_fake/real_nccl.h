// SPDX-License-Identifier: Apache-2.0
// Record mode's view of the real NCCL: found (configured path, else discovery), opened so that its internal calls
// bind to itself (RTLD_DEEPBIND and its pncclX entry points; a reentry guard catches the rest), and its whole API
// table resolved once, thread-safely.
#pragma once

#include <string>
#include <vector>

#include "nccl_fake/core.h"

namespace nccl_fake {
namespace real {

// One id per function of the API list, in list order.
enum class ApiId : int {
#define NCCL_FAKE_API(ret, name, params, args, prof) name,
#include "nccl_api.def"
#undef NCCL_FAKE_API
  kCount
};

struct Library {
  bool ok = false;
  std::string path;   // the file opened
  int version = 0;    // its ncclGetVersion
  std::string error;  // why nothing usable was found (ok == false): every candidate and why it was refused
  std::vector<std::string> missing;  // functions of the API list it does not export
  void* functions[static_cast<int>(ApiId::kCount)] = {};
};

// The real library, loaded on first use with `configuredPath` (empty: discover). Thread-safe; never unloaded.
const Library& library(const std::string& configuredPath);
const Library& loaded();  // after library() was called once

// Where discovery looks, in order, with the reason for each candidate ("already loaded by this process", ...).
struct Candidate {
  std::string path, why;
};
std::vector<Candidate> discoveryCandidates(const std::string& configuredPath);
// Path of the RankLens library itself (skipped by discovery, compared by device and inode).
std::string selfPath();

// True while this thread is inside a call forwarded to the real NCCL: a call that reaches RankLens then comes from
// the real library itself (its exported API called through the global scope) and is forwarded uncaptured.
bool insideRealCall();
class RealCallScope {
 public:
  RealCallScope();
  ~RealCallScope();
  RealCallScope(const RealCallScope&) = delete;
  RealCallScope& operator=(const RealCallScope&) = delete;
};

// The real function, typed; nullptr when the library lacks it.
template <ApiId id, typename Fn>
Fn function() {
  return reinterpret_cast<Fn>(loaded().functions[static_cast<int>(id)]);
}

}  // namespace real
}  // namespace nccl_fake
