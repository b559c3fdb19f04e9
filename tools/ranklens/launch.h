// SPDX-License-Identifier: Apache-2.0
// What `ranklens replay` and `ranklens record` share: finding the library, pointing a program at it, checking the
// settings the program will see, and running it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ranklens/config.h"

namespace ranklens {
namespace tools {

// The library next to this tool (build tree: ../nccl_fake; install tree: ../lib), or `given`; "" when not found.
std::string findLibrary(const std::string& given);
// The message for a library that was not found.
std::string libraryNotFound();
// "value:$VAR" (or "value" when VAR is unset or empty).
std::string prepend(const char* var, const std::string& value, char sep);
// LD_PRELOAD and/or LD_LIBRARY_PATH for `override` = preload | library-path | both.
void pointAtLibrary(const std::string& lib, const std::string& override, std::map<std::string, std::string>* env);
// Loads the settings the child will see (this environment overlaid with `env`); false with the message printed.
bool checkSettings(const std::map<std::string, std::string>& env, config::LoadResult* loaded);
// Sets `env` in this process and runs `command` (PATH lookup) with it; returns its exit code, 128 + N when killed by
// signal N, 127 when it cannot be started. Ctrl-C goes to the child; this process only waits.
int runCommand(const std::map<std::string, std::string>& env, const std::vector<std::string>& command);
// A new, unused directory name: <base>/<prefix>-<seconds>-<pid>.
std::string freshDirectoryName(const std::string& base, const std::string& prefix);

}  // namespace tools
}  // namespace ranklens
