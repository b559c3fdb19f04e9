// SPDX-License-Identifier: Apache-2.0
// What `ranklens replay` and `ranklens record` share: finding the library, pointing a program at it, checking the
// settings the program will see, and running it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ranklens/config.h"
#include "ranklens/status.h"

namespace ranklens {
namespace tools {

// The library next to this tool (build tree: ../nccl_fake; install tree: ../lib), or `given`; "" when not found.
std::string findLibrary(const std::string& given);
// The message for a library that was not found.
std::string libraryNotFound();
// Whether every shared library `lib` needs is found (ldd); else a failure naming the missing ones and the fix.
// A preloaded library whose dependencies are missing is skipped by the loader with a warning, and the job would run
// on the real NCCL: this is checked before a job starts. Ok when ldd itself cannot run.
Status libraryLoads(const std::string& lib);
// `lib` = findLibrary(given) when it exists and loads (libraryLoads); else a failure saying why and what to do.
Status usableLibrary(const std::string& given, std::string* lib);
// The output of a shell command (stdout; add 2>&1 for stderr), and its status as pclose gives it (-1: not run).
std::string capture(const std::string& command, int* status);
// `s` single-quoted for the shell.
std::string quote(const std::string& s);
// "value:$VAR" (or "value" when VAR is unset or empty).
std::string prepend(const char* var, const std::string& value, char sep);
// LD_PRELOAD and/or LD_LIBRARY_PATH for `override` = preload | library-path | both.
void pointAtLibrary(const std::string& lib, const std::string& override, std::map<std::string, std::string>* env);
// Loads the settings the child will see (this environment overlaid with `env`) into `*settings`, printing the
// warnings, and on failure the message (also returned).
Status checkSettings(const std::map<std::string, std::string>& env, config::Settings* settings);
// Sets `env` in this process and runs `command` (PATH lookup) with it; returns its exit code, 128 + N when killed by
// signal N, 127 when it cannot be started. Ctrl-C goes to the child; this process only waits.
int runCommand(const std::map<std::string, std::string>& env, const std::vector<std::string>& command);
// The Python adapter (tools/python: site/sitecustomize.py + the ranklens package) beside the tool (install tree:
// ../share/ranklens/python) or in the source tree this tool was built from; "" when not found.
std::string findPythonAdapter();
// Puts the adapter on PYTHONPATH and turns it on (RANKLENS_ADAPTER=1); `store`: it also hosts the lone rank's
// TCPStore (replay): MASTER_ADDR/MASTER_PORT (a free port unless MASTER_PORT is set), TORCHELASTIC_USE_AGENT_STORE,
// and the torch settings that would wait for absent peers are turned off, each with a warning.
void enablePythonAdapter(const std::string& dir, bool store, std::map<std::string, std::string>* env);
// --share-gpu: lets several real NCCL ranks share this machine's GPUs (ranklens/share_gpu.h): preloads the placement
// library found beside `lib` (RankLens's libnccl.so.2), tells it how many GPUs there are and what
// CUDA_VISIBLE_DEVICES is, and points NCCL's sockets at the loopback interface unless NCCL_SOCKET_IFNAME is set.
// A failure saying why and what to do when the job's environment already sets NCCL_HOSTID or the library is missing.
// `summary` says what was set up, for the launcher's first line.
Status shareGpus(const std::string& lib, std::map<std::string, std::string>* env, std::string* summary);
// The GPUs this process sees (the CUDA driver's count under CUDA_VISIBLE_DEVICES); 0 without a driver or GPU.
int visibleGpus();
// The memory of the first visible GPU in bytes; 0 without a driver or GPU.
uint64_t gpuMemoryBytes();

// A new, unused directory name: <base>/<prefix>-<seconds>-<pid>.
std::string freshDirectoryName(const std::string& base, const std::string& prefix);

}  // namespace tools
}  // namespace ranklens
