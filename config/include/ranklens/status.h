// SPDX-License-Identifier: Apache-2.0
// The one error convention inside RankLens (leveldb's shape): a function that can fail returns a Status and gives
// its results through out-parameters; RL_CHECK passes a failure up. Nothing throws across a module boundary, and
// nothing converts between conventions at call sites: the C boundary (nccl_fake) turns a Status into an
// ncclResult_t and NCCL's last-error text, the tools turn it into an "error: ..." line and an exit status.
//
// A Status carries a code whose values equal NCCL's ncclResult_t where NCCL has one, so that the library returns
// exactly the code the real NCCL would, and a message written for the user: what failed, where (file and offset,
// key, call) and, where there is one, the fix.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace ranklens {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kUnhandledCudaError = 1,  // a CUDA call failed
    kSystemError = 2,         // the OS or a file said no: open, read, write, mmap, a full disk
    kInternalError = 3,       // a broken invariant inside RankLens: a bug to report
    kInvalidArgument = 4,     // a value the caller gave is wrong: a call argument, a setting, a command-line value
    kInvalidUsage = 5,        // right values at the wrong time or place: a call the recording does not have
    kRemoteError = 6,         // a peer failed (NCCL's code; RankLens's virtual peers do not)
    // RankLens's own codes, above NCCL's range; the C boundary maps each to the NCCL code named here.
    kCorrupt = 100,      // a trace, dump or settings file is damaged (NCCL: ncclInvalidUsage); say file, offset, why
    kUnsupported = 101,  // valid, but RankLens cannot do it (NCCL: ncclInvalidArgument); README's limits list it
  };

  // Success is one null pointer: no allocation and nothing to destroy, so the per-call path may return Status freely
  // (a failure, which is rare, allocates its code and message).
  Status() = default;
  Status(const Status& other) : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  static Status ok() { return Status(); }
  static Status error(Code code, std::string message) { return Status(code, std::move(message)); }
  static Status cudaError(std::string message) { return error(Code::kUnhandledCudaError, std::move(message)); }
  static Status systemError(std::string message) { return error(Code::kSystemError, std::move(message)); }
  static Status internalError(std::string message) { return error(Code::kInternalError, std::move(message)); }
  static Status invalidArgument(std::string message) { return error(Code::kInvalidArgument, std::move(message)); }
  static Status invalidUsage(std::string message) { return error(Code::kInvalidUsage, std::move(message)); }
  static Status corrupt(std::string message) { return error(Code::kCorrupt, std::move(message)); }
  static Status unsupported(std::string message) { return error(Code::kUnsupported, std::move(message)); }

  bool isOk() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  // The user's text; empty for success.
  const std::string& message() const {
    static const std::string kNone;
    return rep_ ? rep_->message : kNone;
  }

  // The same failure with `where` in front ("rank3/manifest: " + message); success stays success. For a caller that
  // knows the file, rank or key that the callee did not.
  Status withContext(const std::string& where) const {
    if (isOk() || where.empty()) return *this;
    return Status(rep_->code, where + ": " + rep_->message);
  }

  // Short name of the code, for logs and tests ("invalid argument").
  static const char* codeName(Code code) {
    switch (code) {
      case Code::kOk:
        return "ok";
      case Code::kUnhandledCudaError:
        return "CUDA error";
      case Code::kSystemError:
        return "system error";
      case Code::kInternalError:
        return "internal error";
      case Code::kInvalidArgument:
        return "invalid argument";
      case Code::kInvalidUsage:
        return "invalid usage";
      case Code::kRemoteError:
        return "remote error";
      case Code::kCorrupt:
        return "damaged input";
      case Code::kUnsupported:
        return "unsupported";
    }
    return "unknown error";
  }
  std::string toString() const { return isOk() ? "ok" : std::string(codeName(code())) + ": " + message(); }

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  // An error code of kOk would make a failure that reads as success: it is stored as an internal error instead.
  Status(Code code, std::string message)
      : rep_(std::make_unique<Rep>(Rep{code == Code::kOk ? Code::kInternalError : code, std::move(message)})) {}
  std::unique_ptr<Rep> rep_;  // null: success
};

}  // namespace ranklens

// Returns the failure of `expr` (a Status) from the enclosing function, which returns Status too.
#define RL_CHECK(expr)                                 \
  do {                                                 \
    ::ranklens::Status rlCheckStatus_ = (expr);        \
    if (!rlCheckStatus_.isOk()) return rlCheckStatus_; \
  } while (0)
