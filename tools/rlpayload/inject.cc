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
Status copyTrace(const fs::path& from, const fs::path& to) {
  struct stat st;
  if (lstat(from.c_str(), &st) != 0) {
    return Status::systemError(from.string() + ": " + strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    if (mkdir(to.c_str(), (st.st_mode & 07777) | S_IRWXU) != 0) {
      return Status::systemError(to.string() + ": cannot create: " + strerror(errno));
    }
    std::error_code ec;
    for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec))
      RL_CHECK(copyTrace(it->path(), to / it->path().filename()));
    if (ec) {
      return Status::systemError(from.string() + ": cannot list: " + ec.message());
    }
    return Status::ok();
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::systemError(from.string() +
                               ": not a regular file or directory (a trace holds only those); not copied");
  }
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    return Status::systemError(from.string() + ": cannot open: " + strerror(errno));
  }
  const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (st.st_mode & 07777) | S_IRUSR | S_IWUSR);
  if (out < 0) {
    const Status failed = Status::systemError(to.string() + ": cannot create: " + strerror(errno));
    close(in);
    return failed;
  }
  std::vector<char> buffer(1 << 20);
  Status status;
  for (;;) {
    const ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Status::systemError(from.string() + ": cannot read: " + strerror(errno));
      break;
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = write(out, buffer.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        status = Status::systemError(to.string() + ": cannot write: " + strerror(errno));
        break;
      }
      done += w;
    }
    if (!status.isOk()) break;
  }
  close(in);
  if (close(out) != 0 && status.isOk())  // NFS and some full file systems report it only here
    status = Status::systemError(to.string() + ": cannot write: " + strerror(errno));
  return status;
}

Status parseIndex(const std::string& text, const std::string& option, uint64_t* index) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19)
    return Status::invalidArgument(option + " " + text + ": not an element index (a non-negative integer)");
  *index = std::stoull(text);
  return Status::ok();
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
Status loadNpyInto(const std::string& path, int dtype, uint64_t count, std::vector<uint8_t>* out, std::string* notes) {
  std::vector<uint8_t> image;
  {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) {
      return Status::systemError(path + ": " + ec.message());
    }
    if (size > (16ull << 30)) {
      return Status::invalidUsage(path + ": larger than 16 GiB");
    }
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
      return Status::systemError(path + ": cannot open");
    }
    image.resize(size);
    const size_t got = fread(image.data(), 1, image.size(), f);
    fclose(f);
    if (got != image.size()) {
      return Status::systemError(path + ": short read");
    }
  }
  NpyArray a;
  std::string reason;
  if (!parseNpy(image, &a, &reason)) {
    return Status::invalidUsage(path + ": " + reason);
  }
  if (a.fortranOrder && a.shape.size() > 1) {
    return Status::invalidUsage(path +
                                ": Fortran-order arrays are not supported (save it with numpy.ascontiguousarray)");
  }
  if (a.count != count) {
    return Status::invalidUsage(path + ": holds " + std::to_string(a.count) + " elements, the call has " +
                                std::to_string(count) + " (a payload keeps its size)");
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
    return Status::ok();
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
      return Status::invalidUsage(path + ": element " + std::to_string(i) + " is NaN, which " + info->name +
                                  " cannot hold");
    }
    saturated += sat;
  }
  *notes = "converted from '" + a.descr + "' to " + info->name;
  if (saturated) *notes += ", " + std::to_string(saturated) + " values saturated";
  std::cerr << "note: " << path << ": " << *notes << "\n";
  return Status::ok();
}

// One of -o and --in-place, exactly one action, and the action's own values.
Status checkInjectOptions(const InjectOptions& o) {
  if (o.inPlace == !o.output.empty()) return Status::invalidArgument("give exactly one of -o NEWTRACE and --in-place");
  const int actions = (!o.nan.empty()) + (!o.inf.empty()) + (!o.set.empty()) + o.scale.has_value() +
                      o.noise.has_value() + (!o.from.empty());
  if (actions != 1) return Status::invalidArgument("give exactly one of --nan, --inf, --set, --scale, --noise, --from");
  if (o.seed && !o.noise) return Status::invalidArgument("--seed goes with --noise");
  if (o.noise && !(*o.noise >= 0 && std::isfinite(*o.noise)))
    return Status::invalidArgument("--noise: the standard deviation must be a finite number >= 0");
  if (o.scale && std::isnan(*o.scale)) return Status::invalidArgument("--scale: NaN is not a factor (use --nan)");
  return Status::ok();
}

// The selected payload being edited: its bytes, their datatype, and how messages name the call.
struct Target {
  ranklens::trace::PayloadRef ref;
  const DtypeInfo* info = nullptr;
  std::string where;  // "<rank dir>: <call>"
  std::vector<uint8_t> data;
  uint64_t count() const { return data.size() / info->size; }
  uint8_t* element(uint64_t i) { return data.data() + i * info->size; }
  // `text` as an element index of this payload, for `option`.
  Status index(const std::string& text, const std::string& option, uint64_t* i) const {
    RL_CHECK(parseIndex(text, option, i));
    if (*i < count()) return Status::ok();
    std::ostringstream msg;
    msg << option << " " << *i << ": index out of range: the payload has " << count() << " elements";
    if (count()) msg << " (0.." << count() - 1 << ")";
    return Status::invalidArgument(where + ": " + msg.str());
  }
};

// What an edit did, for the Edit record and the line printed after it.
struct EditDone {
  std::string action, note;
  std::vector<std::string> changed;  // element indices set
};

Status putSpecial(const InjectOptions& o, Target& t, EditDone* done) {
  const bool nan = !o.nan.empty();
  const std::string option = nan ? "--nan" : "--inf";
  if (!t.info->isFloat)
    return Status::invalidArgument(t.where + ": " + option + ": " + t.info->name + " is an integer type and has no " +
                                   (nan ? "NaN" : "infinity") + " (use --set IDX=VALUE)");
  if (!nan && t.ref.datatype == kFloat8e4m3)
    return Status::invalidArgument(t.where +
                                   ": --inf: float8e4m3 has no infinity (its largest value is 448; --nan or --set)");
  const double value = nan ? std::nan("") : INFINITY;
  for (const auto& text : splitList(nan ? o.nan : o.inf)) {
    uint64_t i = 0;
    RL_CHECK(t.index(text, option, &i));
    storeDouble(t.ref.datatype, value, t.element(i), nullptr);
    done->changed.push_back(std::to_string(i));
  }
  done->action = nan ? "nan" : "inf";
  return Status::ok();
}

Status setValues(const InjectOptions& o, Target& t, EditDone* done) {
  for (const auto& assignment : o.set) {
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos) return Status::invalidArgument("--set " + assignment + ": expected IDX=VALUE");
    uint64_t i = 0;
    RL_CHECK(t.index(assignment.substr(0, eq), "--set", &i));
    std::string reason;
    if (!parseElement(t.ref.datatype, assignment.substr(eq + 1), t.element(i), &reason))
      return Status::invalidArgument(t.where + ": --set " + assignment + ": " + reason);
    done->changed.push_back(std::to_string(i));
  }
  done->action = "set";
  return Status::ok();
}

Status scaleOrNoise(const InjectOptions& o, Target& t, EditDone* done) {
  if (o.scale && !t.info->isFloat && !std::isfinite(*o.scale))
    return Status::invalidArgument(t.where + ": --scale: " + t.info->name + " elements need a finite factor");
  std::mt19937_64 rng;
  std::normal_distribution<double> gauss(0.0, o.noise.value_or(0.0));
  if (o.noise) {
    const uint64_t seed = o.seed ? *o.seed : std::random_device{}();
    rng.seed(seed);
    if (!o.seed) done->note = "seed " + std::to_string(seed);  // so the noise can be reproduced
  }
  uint64_t saturated = 0;
  for (uint64_t i = 0; i < t.count(); ++i) {
    const double v = loadDouble(t.ref.datatype, t.element(i));
    const double nv = o.scale ? v * *o.scale : v + gauss(rng);
    bool sat = false;
    storeDouble(t.ref.datatype, nv, t.element(i), &sat);  // integers: v is never NaN here
    saturated += sat;
  }
  if (saturated) {
    std::cerr << "note: " << t.where << ": " << saturated << " values saturated at the limits of " << t.info->name
              << "\n";
    done->note += std::string(done->note.empty() ? "" : ", ") + std::to_string(saturated) + " values saturated";
  }
  done->action = o.scale ? "scale" : "noise";
  return Status::ok();
}

Status editPayload(const InjectOptions& o, Target& t, EditDone* done) {
  if (!o.nan.empty() || !o.inf.empty()) return putSpecial(o, t, done);
  if (!o.set.empty()) return setValues(o, t, done);
  if (o.scale || o.noise) return scaleOrNoise(o, t, done);
  std::vector<uint8_t> replacement;
  RL_CHECK(loadNpyInto(o.from, t.ref.datatype, t.count(), &replacement, &done->note));
  t.data = std::move(replacement);
  done->action = "from";
  return Status::ok();
}

// For -o: the whole trace copied next to its destination (`staging`), where the edit goes before the copy is moved
// into place; `rankDir` becomes the selected rank's directory inside the copy.
Status stageCopy(const InjectOptions& o, std::string* rankDir, fs::path* staging) {
  std::error_code ec;
  if (fs::exists(o.output, ec) || fs::is_symlink(o.output, ec))
    return Status::invalidUsage(o.output + ": already exists (-o needs a new directory; or use --in-place)");
  const fs::path source = fs::weakly_canonical(o.selection.trace, ec);
  const fs::path dest = fs::weakly_canonical(fs::absolute(o.output), ec);
  const auto rel = dest.lexically_relative(source);
  if (!rel.empty() && *rel.begin() != "..")
    return Status::invalidUsage(o.output + ": is inside the trace being copied");
  *staging = fs::path(o.output).lexically_normal();
  if (staging->filename().empty()) *staging = staging->parent_path();
  *staging += ".partial-" + std::to_string(getpid());
  if (Status copied = copyTrace(o.selection.trace, *staging); !copied.isOk()) {
    fs::remove_all(*staging, ec);
    return Status::systemError(o.output + ": cannot copy " + o.selection.trace + ": " + copied.message() +
                               " (nothing was changed: the partial copy is removed)");
  }
  const auto within = fs::path(*rankDir).lexically_relative(o.selection.trace);
  *rankDir = (within.empty() || within == ".") ? staging->string() : (*staging / within).lexically_normal().string();
  return Status::ok();
}

// Appends the edited payload (in place, or to the staged copy, which then takes -o's name).
Status writeEdit(const InjectOptions& o, const Selected& selected, const Target& t, const EditDone& done) {
  ranklens::trace::Edit record;
  record.tool = "rlpayload";
  record.action = done.action;
  record.detail = shellJoin(o.commandLine) + (done.note.empty() ? "" : " (" + done.note + ")");
  record.user = currentUser();
  const int level = o.zstdLevel ? *o.zstdLevel : (t.ref.zstdLevel > 0 ? t.ref.zstdLevel : 3);
  std::string rankDir = selected.rank->dir;
  fs::path staging;
  if (!o.inPlace) RL_CHECK(stageCopy(o, &rankDir, &staging));
  const Status edited =
      ranklens::trace::appendEditedPayload(rankDir, t.ref, t.data.data(), t.data.size(), record, level);
  if (!edited.isOk()) {
    std::error_code ec;
    if (!staging.empty()) fs::remove_all(staging, ec);
    return edited;
  }
  if (staging.empty()) return Status::ok();
  std::error_code ec;
  fs::rename(staging, o.output, ec);
  if (ec)
    return Status::systemError(o.output + ": cannot move the edited copy into place (" + ec.message() + "); it is in " +
                               staging.string());
  return Status::ok();
}

Status inject(const InjectOptions& o) {
  RL_CHECK(checkInjectOptions(o));
  Selected selected;
  RL_CHECK(selectPayload(o.selection, &selected));
  Target t;
  RL_CHECK(loadPayload(selected, &t.data));
  t.ref = selected.ref;
  t.info = dtypeInfo(t.ref.datatype);
  t.where = selected.rank->dir + ": " + describeCall(t.ref.commId, t.ref.op, t.ref.peer, t.ref.seq);
  if (t.info == nullptr)
    return Status::corrupt(t.where + ": datatype " + std::to_string(t.ref.datatype) + " is not an NCCL datatype");
  EditDone done;
  RL_CHECK(editPayload(o, t, &done));
  RL_CHECK(writeEdit(o, selected, t, done));
  std::string indices;
  for (size_t i = 0; i < done.changed.size() && i < 8; ++i) indices += (i ? "," : "") + done.changed[i];
  if (done.changed.size() > 8) indices += ",...";
  std::cout << (o.inPlace ? o.selection.trace : o.output) << ": rank " << selected.rank->rank << " "
            << describeCall(t.ref.commId, t.ref.op, t.ref.peer, t.ref.seq) << ": " << done.action
            << (indices.empty() ? "" : " [" + indices + "]") << "; the original blob stays in "
            << ranklens::trace::payloadName(t.ref.file) << " at offset " << t.ref.offset << "\n";
  return Status::ok();
}

}  // namespace

int runInject(const InjectOptions& o) {
  const Status status = inject(o);
  return status.isOk() ? kExitOk : reportFailure(status);
}

}  // namespace rlpayload
