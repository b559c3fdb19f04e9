// SPDX-License-Identifier: Apache-2.0
// rlpayload inject: change one call's payload (NaN, infinity, values, scaling, noise, or a whole .npy), either in a
// copy of the trace (-o) or in place. Both go through ranklens::trace::appendEditedPayload: the original blob stays
// where it was, a new blob and a superseding reference are appended, and an Edit record says who did what.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>

#include "commands.h"
#include "dtype.h"
#include "npy.h"

namespace rlpayload {

namespace fs = std::filesystem;

namespace {

std::string currentUser() {
  if (const char* user = getenv("USER"); user && *user) return user;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_name;
  return "uid " + std::to_string(getuid());
}

// Copies the trace `from` to the new directory `to`, for -o. Not fs::copy: that keeps a read-only source's modes
// (the copy could then not be edited by its owner) and reports a full disk as "Input/output error" without a file.
// Every file and directory of the copy is writable by its owner; an error names the file and errno's reason.
bool copyTrace(const fs::path& from, const fs::path& to, std::string* error) {
  struct stat st;
  if (lstat(from.c_str(), &st) != 0) {
    *error = from.string() + ": " + strerror(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    if (mkdir(to.c_str(), (st.st_mode & 07777) | S_IRWXU) != 0) {
      *error = to.string() + ": cannot create: " + strerror(errno);
      return false;
    }
    std::error_code ec;
    for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec))
      if (!copyTrace(it->path(), to / it->path().filename(), error)) return false;
    if (ec) {
      *error = from.string() + ": cannot list: " + ec.message();
      return false;
    }
    return true;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = from.string() + ": not a regular file or directory (a trace holds only those); not copied";
    return false;
  }
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    *error = from.string() + ": cannot open: " + strerror(errno);
    return false;
  }
  const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (st.st_mode & 07777) | S_IRUSR | S_IWUSR);
  if (out < 0) {
    *error = to.string() + ": cannot create: " + strerror(errno);
    close(in);
    return false;
  }
  std::vector<char> buffer(1 << 20);
  bool ok = true;
  for (;;) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = from.string() + ": cannot read: " + strerror(errno);
      ok = false;
      break;
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = write(out, buffer.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        *error = to.string() + ": cannot write: " + strerror(errno);
        ok = false;
        break;
      }
      done += w;
    }
    if (!ok) break;
  }
  close(in);
  if (close(out) != 0 && ok) {  // NFS and some full file systems report it only here
    *error = to.string() + ": cannot write: " + strerror(errno);
    ok = false;
  }
  return ok;
}

uint64_t parseIndex(const std::string& text, const std::string& option) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19)
    throw UsageError{option + " " + text + ": not an element index (a non-negative integer)"};
  return std::stoull(text);
}

// One element of a little-endian numpy integer or float type (`kind` 'f', 'i' or 'u'; `item` bytes) as a double.
double npyElement(char kind, size_t item, const uint8_t* p) {
  if (kind == 'f') return loadDouble(item == 2 ? kFloat16 : item == 4 ? kFloat32 : kFloat64, p);
  if (item == 2) {  // <i2 and <u2 have no NCCL type
    uint16_t u;
    memcpy(&u, p, 2);
    return kind == 'i' ? static_cast<double>(static_cast<int16_t>(u)) : static_cast<double>(u);
  }
  if (kind == 'i') return loadDouble(item == 1 ? kInt8 : item == 4 ? kInt32 : kInt64, p);
  return loadDouble(item == 1 ? kUint8 : item == 4 ? kUint32 : kUint64, p);
}

// "5,7" and repeated options both give a list.
std::vector<std::string> splitList(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
  }
  return out;
}

// Reads FILE.npy into `out` as `dtype` elements: the same dtype (or the raw-bit dtype for bfloat16/fp8) is taken
// as is; any other float or integer array is converted element by element (rounding, saturating integers).
bool loadNpyInto(const std::string& path, int dtype, uint64_t count, std::vector<uint8_t>* out, std::string* notes,
                 std::string* error) {
  std::vector<uint8_t> image;
  {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) {
      *error = path + ": " + ec.message();
      return false;
    }
    if (size > (16ull << 30)) {
      *error = path + ": larger than 16 GiB";
      return false;
    }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
      *error = path + ": cannot open";
      return false;
    }
    image.resize(size);
    const size_t got = fread(image.data(), 1, image.size(), f);
    fclose(f);
    if (got != image.size()) {
      *error = path + ": short read";
      return false;
    }
  }
  NpyArray a;
  std::string reason;
  if (!parseNpy(image, &a, &reason)) {
    *error = path + ": " + reason;
    return false;
  }
  if (a.fortranOrder && a.shape.size() > 1) {
    *error = path + ": Fortran-order arrays are not supported (save it with numpy.ascontiguousarray)";
    return false;
  }
  if (a.count != count) {
    *error = path + ": holds " + std::to_string(a.count) + " elements, the call has " + std::to_string(count) +
             " (a payload keeps its size)";
    return false;
  }
  const DtypeInfo* info = dtypeInfo(dtype);
  auto canon = [](std::string d) {
    if (!d.empty() && (d[0] == '=' || (d[0] == '|' && d.back() != '1'))) d[0] = '<';
    if (!d.empty() && d.back() == '1') d[0] = '|';
    return d;
  };
  const std::string descr = canon(a.descr);
  if ((info->npyDescr && descr == info->npyDescr) || (!info->npyDescr && descr == info->bitsDescr)) {
    *out = std::move(a.data);
    return true;
  }
  // Convert from the array's own type.
  const size_t item = npyItemSize(descr);
  const char kind = descr[1];
  out->assign(count * info->size, 0);
  uint64_t saturated = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const double v = npyElement(kind, item, a.data.data() + i * item);
    bool sat = false;
    if (!storeDouble(dtype, v, out->data() + i * info->size, &sat)) {
      *error = path + ": element " + std::to_string(i) + " is NaN, which " + info->name + " cannot hold";
      return false;
    }
    saturated += sat;
  }
  *notes = "converted from '" + a.descr + "' to " + info->name;
  if (saturated) *notes += ", " + std::to_string(saturated) + " values saturated";
  std::cerr << "note: " << path << ": " << *notes << "\n";
  return true;
}

}  // namespace

int runInject(const InjectOptions& o) {
  if (o.inPlace == !o.output.empty()) throw UsageError{"give exactly one of -o NEWTRACE and --in-place"};
  const int actions = (!o.nan.empty()) + (!o.inf.empty()) + (!o.set.empty()) + o.scale.has_value() +
                      o.noise.has_value() + (!o.from.empty());
  if (actions != 1) throw UsageError{"give exactly one of --nan, --inf, --set, --scale, --noise, --from"};
  if (o.seed && !o.noise) throw UsageError{"--seed goes with --noise"};
  if (o.noise && !(*o.noise >= 0 && std::isfinite(*o.noise)))
    throw UsageError{"--noise: the standard deviation must be a finite number >= 0"};
  if (o.scale && std::isnan(*o.scale)) throw UsageError{"--scale: NaN is not a factor (use --nan)"};

  std::string error;
  auto selected = selectPayload(o.selection, &error);
  if (!selected) {
    std::cerr << "error: " << error << "\n";
    return kExitFailure;
  }
  std::vector<uint8_t> data;
  if (!loadPayload(*selected, &data, &error)) {
    std::cerr << "error: " << error << "\n";
    return kExitFailure;
  }
  const auto ref = selected->ref;
  const DtypeInfo* info = dtypeInfo(ref.datatype);
  const std::string where = selected->rank->dir + ": " + describeCall(ref.commId, ref.op, ref.peer, ref.seq);
  if (info == nullptr) {
    std::cerr << "error: " << where << ": datatype " << ref.datatype << " is not an NCCL datatype\n";
    return kExitFailure;
  }
  const uint64_t count = data.size() / info->size;
  auto element = [&](uint64_t i) { return data.data() + i * info->size; };
  auto checkIndex = [&](uint64_t i, const std::string& option) {
    if (i >= count) {
      std::ostringstream msg;
      msg << option << " " << i << ": index out of range: the payload has " << count << " elements";
      if (count) msg << " (0.." << count - 1 << ")";
      throw UsageError{where + ": " + msg.str()};
    }
  };

  std::string action, note;
  std::vector<std::string> changed;
  if (!o.nan.empty() || !o.inf.empty()) {
    const bool nan = !o.nan.empty();
    const std::string option = nan ? "--nan" : "--inf";
    if (!info->isFloat)
      throw UsageError{where + ": " + option + ": " + info->name + " is an integer type and has no " +
                       (nan ? "NaN" : "infinity") + " (use --set IDX=VALUE)"};
    if (!nan && ref.datatype == kFloat8e4m3)
      throw UsageError{where + ": --inf: float8e4m3 has no infinity (its largest value is 448; --nan or --set)"};
    const double value = nan ? std::nan("") : INFINITY;
    for (const auto& text : splitList(nan ? o.nan : o.inf)) {
      const uint64_t i = parseIndex(text, option);
      checkIndex(i, option);
      storeDouble(ref.datatype, value, element(i), nullptr);
      changed.push_back(std::to_string(i));
    }
    action = nan ? "nan" : "inf";
  } else if (!o.set.empty()) {
    for (const auto& assignment : o.set) {
      const size_t eq = assignment.find('=');
      if (eq == std::string::npos) throw UsageError{"--set " + assignment + ": expected IDX=VALUE"};
      const uint64_t i = parseIndex(assignment.substr(0, eq), "--set");
      checkIndex(i, "--set");
      std::string reason;
      if (!parseElement(ref.datatype, assignment.substr(eq + 1), element(i), &reason))
        throw UsageError{where + ": --set " + assignment + ": " + reason};
      changed.push_back(std::to_string(i));
    }
    action = "set";
  } else if (o.scale || o.noise) {
    if (o.scale && !info->isFloat && !std::isfinite(*o.scale))
      throw UsageError{where + ": --scale: " + info->name + " elements need a finite factor"};
    std::mt19937_64 rng;
    std::normal_distribution<double> gauss(0.0, o.noise.value_or(0.0));
    uint64_t seed = 0;
    if (o.noise) {
      seed = o.seed ? *o.seed : std::random_device{}();
      rng.seed(seed);
      if (!o.seed) note = "seed " + std::to_string(seed);  // so the noise can be reproduced
    }
    uint64_t saturated = 0;
    for (uint64_t i = 0; i < count; ++i) {
      const double v = loadDouble(ref.datatype, element(i));
      const double nv = o.scale ? v * *o.scale : v + gauss(rng);
      bool sat = false;
      storeDouble(ref.datatype, nv, element(i), &sat);  // integers: v is never NaN here
      saturated += sat;
    }
    if (saturated) {
      std::cerr << "note: " << where << ": " << saturated << " values saturated at the limits of " << info->name
                << "\n";
      note += std::string(note.empty() ? "" : ", ") + std::to_string(saturated) + " values saturated";
    }
    action = o.scale ? "scale" : "noise";
  } else {
    std::vector<uint8_t> replacement;
    if (!loadNpyInto(o.from, ref.datatype, count, &replacement, &note, &error)) {
      std::cerr << "error: " << error << "\n";
      return kExitFailure;
    }
    data = std::move(replacement);
    action = "from";
  }

  ranklens::trace::Edit record;
  record.tool = "rlpayload";
  record.action = action;
  record.detail = shellJoin(o.commandLine) + (note.empty() ? "" : " (" + note + ")");
  record.user = currentUser();
  const int level = o.zstdLevel ? *o.zstdLevel : (ref.zstdLevel > 0 ? ref.zstdLevel : 3);

  std::string rankDir = selected->rank->dir;
  std::string target = o.selection.trace;
  fs::path staging;
  if (!o.inPlace) {
    // Copy the whole trace next to its destination, edit the copy, then move it into place.
    std::error_code ec;
    if (fs::exists(o.output, ec) || fs::is_symlink(o.output, ec)) {
      std::cerr << "error: " << o.output << ": already exists (-o needs a new directory; or use --in-place)\n";
      return kExitFailure;
    }
    const fs::path source = fs::weakly_canonical(o.selection.trace, ec);
    const fs::path dest = fs::weakly_canonical(fs::absolute(o.output), ec);
    const auto rel = dest.lexically_relative(source);
    if (!rel.empty() && *rel.begin() != "..") {
      std::cerr << "error: " << o.output << ": is inside the trace being copied\n";
      return kExitFailure;
    }
    staging = fs::path(o.output).lexically_normal();
    if (staging.filename().empty()) staging = staging.parent_path();
    staging += ".partial-" + std::to_string(getpid());
    if (std::string copyError; !copyTrace(o.selection.trace, staging, &copyError)) {
      std::cerr << "error: " << o.output << ": cannot copy " << o.selection.trace << ": " << copyError
                << " (nothing was changed: the partial copy is removed)\n";
      fs::remove_all(staging, ec);
      return kExitFailure;
    }
    const auto within = fs::path(rankDir).lexically_relative(o.selection.trace);
    rankDir = (within.empty() || within == ".") ? staging.string() : (staging / within).lexically_normal().string();
    target = o.output;
  }

  if (!(error = ranklens::trace::appendEditedPayload(rankDir, ref, data.data(), data.size(), record, level).message()).empty()) {
    std::cerr << "error: " << error << "\n";
    if (!staging.empty()) {
      std::error_code ec;
      fs::remove_all(staging, ec);
    }
    return kExitFailure;
  }
  if (!staging.empty()) {
    std::error_code ec;
    fs::rename(staging, o.output, ec);
    if (ec) {
      std::cerr << "error: " << o.output << ": cannot move the edited copy into place (" << ec.message()
                << "); it is in " << staging.string() << "\n";
      return kExitFailure;
    }
  }
  std::string indices;
  for (size_t i = 0; i < changed.size() && i < 8; ++i) indices += (i ? "," : "") + changed[i];
  if (changed.size() > 8) indices += ",...";
  std::cout << target << ": rank " << selected->rank->rank << " " << describeCall(ref.commId, ref.op, ref.peer, ref.seq)
            << ": " << action << (indices.empty() ? "" : " [" + indices + "]") << "; the original blob stays in "
            << ranklens::trace::payloadName(ref.file) << " at offset " << ref.offset << "\n";
  return kExitOk;
}

}  // namespace rlpayload
