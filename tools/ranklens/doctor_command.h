// SPDX-License-Identifier: Apache-2.0
// `ranklens doctor`: is this machine ready to record or replay? The library, the settings, the GPU, which
// libnccl.so.2 a Python program (PyTorch) would load and bind to and why, and whether a trace is readable.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ranklens {
namespace tools {

struct DoctorOptions {
  std::string lib, config, python = "python3", trace;
  bool skipPython = false;
};

CLI::App* addDoctorCommand(CLI::App& app, DoctorOptions* options);
int runDoctor(const DoctorOptions& options);

}  // namespace tools
}  // namespace ranklens
