// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CUDA implementations of the stream device (replay) and the record device.
#pragma once

#include <string>

namespace ranklens {
namespace device {

// Name and UUID (nvidia-smi's "GPU-xxxxxxxx-..." form) of the current CUDA device; unchanged on failure.
void describeCurrentCudaDevice(std::string* name, std::string* uuid);

}  // namespace device
}  // namespace ranklens
