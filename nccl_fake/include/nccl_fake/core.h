// SPDX-License-Identifier: Apache-2.0
// Shared definitions of the NCCL implementation: the public NCCL API (from the installed toolkit), error macros in
// NCCL's style, and the internal implementation declarations generated from the API list.
#pragma once

#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include "nccl_fake/debug.h"

// Propagate a failure, logging the hop as NCCL does ("-> code").
#define NCCLCHECK(call)                                                                      \
  do {                                                                                       \
    ncclResult_t RES_ = (call);                                                              \
    if (RES_ != ncclSuccess && RES_ != ncclInProgress) {                                     \
      INFO(::nccl_fake::kSubAll, "%s:%d -> %d", __FILE__, __LINE__, static_cast<int>(RES_)); \
      return RES_;                                                                           \
    }                                                                                        \
  } while (0)

#include <algorithm>
#include <cstring>

namespace nccl_fake {

// Reads a caller's versioned struct the way NCCL does (ncclConfig_t, ncclSimInfo_t): `size` first, then at most the
// bytes both sides know; the rest of `out` keeps its defaults, and its magic is cleared first so that a struct too
// short to hold one fails the caller's magic check. Callers built against another nccl.h pass other sizes.
template <typename T>
size_t readVersionedStruct(const T* user, T* out) {
  size_t size = 0;
  memcpy(&size, user, sizeof(size));
  size = std::min(size, sizeof(T));
  out->magic = 0;
  memcpy(out, user, size);
  return size;
}

namespace impl {
// One implementation function per exported symbol; the exported C wrappers (exports.cc) call these.
#define NCCL_FAKE_API(ret, name, params, args, prof) ret name params;
#include "nccl_api.def"
#undef NCCL_FAKE_API
}  // namespace impl

// The version RankLens reports, from NCCL's own header (the ABI we implement).
constexpr int kNcclHeaderVersion = NCCL_VERSION_CODE;
}  // namespace nccl_fake
