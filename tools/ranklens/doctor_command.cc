// SPDX-License-Identifier: Apache-2.0
#include "doctor_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "launch.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;

CLI::App* addDoctorCommand(CLI::App& app, DoctorOptions* o) {
  auto* cmd = app.add_subcommand("doctor",
                                 "Check this machine: library, settings, GPU, which NCCL Python loads, "
                                 "a trace");
  cmd->add_option("--lib", o->lib, "RankLens libnccl.so.2 to check (default: the one installed beside ranklens)");
  cmd->add_option("-c,--config", o->config, "YAML settings file to validate (else RANKLENS_CONFIG)");
  cmd->add_option("--python", o->python, "Interpreter of the training job (default: python3 on PATH)");
  cmd->add_flag("--no-python", o->skipPython, "Skip the Python / PyTorch check");
  cmd->add_option("--trace", o->trace, "A recorded trace (or one rank directory) to check");
  cmd->footer(
      "Exit code: 0 when nothing blocks recording or replay, 1 otherwise (each problem says what to change).\n"
      "Examples:\n"
      "  ranklens doctor\n"
      "  ranklens doctor --python /opt/venv/bin/python --trace /scratch/run42");
  return cmd;
}

namespace {

struct Report {
  int problems = 0;
  void ok(const std::string& what, const std::string& detail) { line("ok  ", what, detail); }
  void note(const std::string& what, const std::string& detail) { line("note", what, detail); }
  void fail(const std::string& what, const std::string& detail) {
    ++problems;
    line("FAIL", what, detail);
  }
  void line(const char* tag, const std::string& what, const std::string& detail) {
    std::cout << "[" << tag << "] " << what << ": " << detail << "\n";
  }
};

// Run in the job's interpreter with RankLens preloaded; prints KEY=VALUE lines.
constexpr const char* kProbe = R"PY(
import ctypes, os, sys
def say(k, v): print(f"{k}={v}", flush=True)
say("python", sys.executable + " " + sys.version.split()[0])
try:
    import torch
    say("torch", torch.__version__ + " cuda " + str(torch.version.cuda))
    say("torch_nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "n/a (no GPU)")
except Exception as e:
    say("torch_error", f"{type(e).__name__}: {e}".replace("\n", " "))
maps = []
for line in open("/proc/self/maps"):
    path = line.split()[-1] if len(line.split()) >= 6 else ""
    if "libnccl" in path and path not in maps:
        maps.append(path)
say("mapped", ";".join(maps))
glob = ctypes.CDLL(None)
say("binds_ranklens", int(hasattr(glob, "ranklensApiVersion")))
try:
    v = ctypes.c_int(0)
    glob.ncclGetVersion(ctypes.byref(v))
    say("nccl_version", v.value)
except Exception as e:
    say("nccl_version", f"unavailable ({e})")
)PY";

void checkPython(const DoctorOptions& o, const std::string& lib, Report* r) {
  int status = 0;
  const std::string cmd =
      "LD_PRELOAD=" + quote(lib) + " RANKLENS_MODE=replay " + quote(o.python) + " -c " + quote(kProbe) + " 2>&1";
  const std::string out = capture(cmd, &status);
  std::map<std::string, std::string> kv;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos && eq < 20) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (kv.count("python") == 0) {
    r->fail("python", o.python + " did not run with RankLens preloaded: " + out.substr(0, 400));
    return;
  }
  r->ok("python", kv["python"]);
  if (kv.count("torch_error")) {
    const std::string& e = kv["torch_error"];
    if (e.find("undefined symbol: nccl") != std::string::npos)
      r->fail("torch", e + " -- this PyTorch needs an NCCL function that RankLens (NCCL 2.28.9's ABI) does not "
                           "export: use a PyTorch built against NCCL <= 2.28 (torch 2.11 with the cu130 wheels)");
    else if (e.find("No module named") != std::string::npos)
      r->note("torch", "not installed in " + o.python + " (not needed for plain NCCL programs)");
    else
      r->fail("torch", e);
  } else if (kv.count("torch")) {
    r->ok("torch", kv["torch"] + ", NCCL as torch reports it: " + kv["torch_nccl"]);
  }
  const std::string mapped = kv["mapped"];
  const bool binds = kv["binds_ranklens"] == "1";
  if (binds)
    r->ok("NCCL binding", "ncclGetVersion and the other nccl* symbols resolve to RankLens (" + lib +
                              "); files mapped: " + (mapped.empty() ? "(none)" : mapped) +
                              (mapped.find(';') != std::string::npos
                                   ? " (torch preloads its wheel's libnccl.so.2 by path; RankLens, preloaded first, "
                                     "wins the symbols; record mode forwards to that wheel's library)"
                                   : ""));
  else
    r->fail("NCCL binding", "RankLens is not the library Python binds to (mapped: " + mapped +
                                "); run the job with LD_PRELOAD=" + lib + " (ranklens record/replay set it)");
}

void checkTrace(const std::string& path, Report* r) {
  if (!fs::is_directory(path)) {
    r->fail("trace", path + ": not a directory");
    return;
  }
  const std::vector<std::string> dirs = trace::rankDirectories(path);
  if (dirs.empty()) r->fail("trace", path + ": no rank directory with a manifest.msgpack");
  for (const auto& dir : dirs) {
    const fs::path d(dir);
    std::string error;
    std::unique_ptr<trace::TraceReader> reader;
    error = trace::TraceReader::open(dir, trace::Limits{}, &reader).message();
    if (!reader) {
      r->fail("trace " + d.filename().string(), error);
      continue;
    }
    reader->scan([](trace::RecordType, const msgpack::object&, const trace::Location&) { return true; });
    const auto& m = reader->manifest();
    std::ostringstream s;
    s << m.mode << " trace, rank " << m.rank << " of " << m.world_size << ", " << m.records_written << " records, "
      << m.payloads_written << " payloads, GPU " << (m.gpu_name.empty() ? "-" : m.gpu_name) << ", format "
      << m.version_major << "." << m.version_minor;
    if (!m.closed) s << ", not closed (the writer died; complete records are usable)";
    if (m.shared_gpu)
      s << "; recorded with its ranks sharing a GPU (--share-gpu): values and calls are a real run's, step times are "
           "not a lone rank's, so replay it at value or structure fidelity (a timing replay warns)";
    if (!reader->problems().empty()) {
      s << "; " << reader->problems().size() << " damaged place(s), first: " << reader->problems().front().describe();
      r->fail("trace " + d.filename().string(), s.str());
    } else {
      r->ok("trace " + d.filename().string(), s.str());
    }
    if (m.cpu_model.empty() && m.cpus <= 0) continue;  // written before format 1.7
    trace::Manifest here;
    trace::describeHost(&here);
    const std::string differs = trace::machineDifference(m, here);  // (no GPU name here: the GPU check says it)
    r->note("machine " + d.filename().string(),
            "recorded on " + (m.cpu_model.empty() ? std::string("an unnamed processor") : m.cpu_model) + " (" +
                (m.cpus > 0 ? std::to_string(m.cpus) : std::string("?")) + " CPUs)" +
                (differs.empty() ? ", as this machine"
                                 : "; this machine differs (" + differs +
                                       "): a host-bound step runs at its machine's "
                                       "speed, so replayed step times differ from the recording's for that alone "
                                       "(docs/fidelity.md section 4)"));
  }
}

// Whether `ranklens record|run --share-gpu` can put several ranks of a real job on this machine's GPU(s).
void checkShareGpu(const std::string& lib, Report* r) {
  const fs::path placement = fs::path(lib).parent_path() / "libranklens_share_gpu.so";
  const int gpus = visibleGpus();
  if (!fs::exists(placement)) {
    r->fail("share GPU", placement.string() + " is missing: --share-gpu cannot place ranks (rebuild RankLens)");
  } else if (const char* hostId = getenv("NCCL_HOSTID"); hostId != nullptr) {
    r->fail("share GPU", std::string("NCCL_HOSTID=") + hostId +
                             " is set: --share-gpu gives each process its own "
                             "and refuses to start while it is set; unset it");
  } else {
    r->ok("share GPU", "--share-gpu runs a real multi-rank job here (" +
                           (gpus > 0 ? std::to_string(gpus) + " GPU(s) visible" : std::string("no GPU visible now")) +
                           "): each process gets its own NCCL_HOSTID, so NCCL accepts several ranks per GPU and "
                           "connects them over sockets on the loopback interface; LOCAL_RANK becomes local rank % "
                           "GPUs. Values and calls are real, step times are not a lone rank's");
  }
}

}  // namespace

int runDoctor(const DoctorOptions& o) {
  Report r;
  std::string lib;
  if (Status usable = usableLibrary(o.lib, &lib); !usable.isOk())
    r.fail("library", usable.message());
  else
    r.ok("library", lib + " (" + std::to_string(fs::file_size(lib) / 1024) + " KiB; its shared libraries resolve)");

  std::map<std::string, std::string> env;
  if (!o.config.empty()) env["RANKLENS_CONFIG"] = fs::absolute(o.config).string();
  config::Settings settings;
  const Status loaded = checkSettings(env, &settings);
  if (loaded.isOk()) {
    int changed = 0;
    std::string list;
    for (const auto& row : config::describe(settings))
      if (row.set_by != "default")
        list += (changed++ ? ", " : "") + row.key + "=" + row.value + " (" + row.set_by + ")";
    r.ok("settings", changed ? list : std::string("all defaults (mode replay, fidelity structure)"));
    // NCCL loads one profiler plugin: another one takes the kernel clock's place (record then keeps events).
    const char* plugin = getenv("NCCL_PROFILER_PLUGIN");
    if (settings.timing_clock == config::TimingClock::kKernel && plugin != nullptr && *plugin != '\0' &&
        std::string(plugin).find("libnccl.so") == std::string::npos)
      r.note("timing clock", std::string("timing_clock kernel, but NCCL_PROFILER_PLUGIN=") + plugin +
                                 ": NCCL loads one profiler plugin, so recording keeps CUDA events; unset it to use "
                                 "the kernel clock");
  } else {
    r.fail("settings", loaded.message());
  }

  int status = 0;
  const std::string gpus = capture("nvidia-smi -L 2>&1", &status);
  if (status == 0 && gpus.find("GPU 0") != std::string::npos)
    r.ok("GPU",
         gpus.substr(0, gpus.find('\n')) + (std::count(gpus.begin(), gpus.end(), '\n') > 1 ? " (and more)" : ""));
  else
    r.note("GPU", "none visible (nvidia-smi: " + gpus.substr(0, gpus.find('\n')) +
                      "); replay runs on the host device (RANKLENS_DEVICE=host), recording needs the job's GPUs");

  if (!lib.empty()) checkShareGpu(lib, &r);
  if (!o.skipPython && !lib.empty()) checkPython(o, lib, &r);
  if (!o.trace.empty()) checkTrace(o.trace, &r);
  std::cout << (r.problems ? std::to_string(r.problems) + " problem(s) found\n"
                           : "nothing blocks recording or replay\n");
  return r.problems ? 1 : 0;
}

}  // namespace tools
}  // namespace ranklens
