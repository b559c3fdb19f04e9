// SPDX-License-Identifier: Apache-2.0
// rlpayload export: one call's payload as a .npy file (numpy dtype of the NCCL type, or raw bits for bfloat16 and
// fp8, or converted with --as) or as raw little-endian bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "commands.h"
#include "dtype.h"
#include "npy.h"

namespace rlpayload {
namespace {

// Writes through <path>.tmp + rename, so a failed export never leaves half a file under the name asked for.
bool writeFile(const std::string& path, const std::string& head, const std::vector<uint8_t>& data, std::string* error) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto writeAll = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  if (fd < 0 || !writeAll(head.data(), head.size()) || !writeAll(data.data(), data.size()) || ::close(fd) != 0 ||
      ::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = std::string("cannot write: ") + strerror(errno);
    if (fd >= 0) ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

int runExport(const ExportOptions& o) {
  LoadedTensor loaded;
  if (Status st = loadTensor(o.selection, &loaded); !st.isOk()) return reportFailure(st);
  auto& selected = loaded.selected;
  std::vector<uint8_t>& bytes = loaded.bytes;
  const DtypeInfo* info = loaded.info;
  const auto& ref = selected->ref;
  const uint64_t count = bytes.size() / info->size;
  std::string descr;
  std::vector<uint8_t> out;
  if (o.as == "native") {
    out = std::move(bytes);
    if (info->npyDescr) {
      descr = info->npyDescr;
    } else {
      descr = info->bitsDescr;
      if (o.format == "npy")
        std::cerr << "note: numpy has no " << info->name << " dtype: writing the raw bits as '" << descr
                  << "' (view them with ml_dtypes, or export with --as float32 to convert)\n";
    }
  } else {
    const bool to32 = o.as == "float32";
    descr = to32 ? "<f4" : "<f8";
    out.resize(count * (to32 ? 4 : 8));
    for (uint64_t i = 0; i < count; ++i) {
      const double v = loadDouble(ref.datatype, bytes.data() + i * info->size);
      if (to32) {
        const float f = static_cast<float>(v);  // exact for every type but float64, int32/64 and uint32/64
        memcpy(out.data() + i * 4, &f, 4);
      } else {
        memcpy(out.data() + i * 8, &v, 8);
      }
    }
    if (to32 && (ref.datatype == kFloat64 || ref.datatype == kInt32 || ref.datatype == kUint32 ||
                 ref.datatype == kInt64 || ref.datatype == kUint64))
      std::cerr << "note: " << info->name << " -> float32 rounds values float32 cannot hold exactly\n";
  }
  const std::string head = o.format == "npy" ? npyHeader(descr, count) : std::string();
  std::string error;
  if (!writeFile(o.output, head, out, &error)) {
    std::cerr << "error: " << o.output << ": " << error << "\n";
    return kExitFailure;
  }
  std::cout << o.output << ": " << describeCall(ref.commId, ref.op, ref.peer, ref.seq) << " of rank "
            << selected->rank->rank << ", " << count << " x " << (o.as == "native" ? info->name : o.as) << " ("
            << (o.format == "npy" ? "npy '" + descr + "'" : std::string("raw little-endian")) << ", "
            << head.size() + out.size() << " bytes)\n";
  return loaded.incomplete ? kExitFailure : kExitOk;
}

}  // namespace rlpayload
