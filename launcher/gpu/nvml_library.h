// NvmlLibrary: NVML opened with dlopen, initialised, and read. The one owner of the library's
// handle, of NVML's initialisation and of the Xid event set: the destructor frees the set, shuts
// NVML down and closes the library, in that order.
//
// cohort never links NVML: a machine without the NVIDIA driver runs cohortrun unchanged (see
// GpuMonitor, gpu_monitor.h, for how the features say that they are off). Only the symbols in
// nvml_api.h are used, by their versioned names; a missing optional one leaves its reading empty.
//
// Thread safety: none; GpuMonitor serialises its calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "gpu/gpu_state.h"

namespace cohort::launch {

// NVML could not be used: the library is missing, lacks a symbol cohort needs, or a call failed.
// code() is NVML's return code (nvmlReturn_t), or -1 when the library itself could not be opened.
class NvmlError : public virtual Error {
 public:
  NvmlError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class NvmlLibrary {
 public:
  // Opens `library` (a file name, searched as dlopen searches: LD_LIBRARY_PATH, the loader's
  // cache, the system folders; or a path) and calls nvmlInit_v2. Throws NvmlError naming the
  // library and what failed (dlopen's message, the missing symbol, nvmlInit's error string).
  static std::unique_ptr<NvmlLibrary> open(const std::string& library);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // "550.54.15", or "" when NVML does not say.
  std::string driver_version() const;
  // The GPUs NVML sees. Throws NvmlError when NVML cannot count them.
  int device_count() const;
  // Everything GpuState holds about GPU `index` except Xid events (see poll_xids). Never throws:
  // a GPU that cannot be read has GpuState::error set.
  GpuState read_device(int index) const;

  // Registers for Xid events on every GPU (once; later calls do nothing). Returns the indices of
  // the GPUs covered (NVML supports the events on most data-centre GPUs).
  std::vector<int> watch_xids();
  // The Xid events that arrived since the last call, without waiting.
  std::vector<XidEvent> poll_xids();

  struct Api;  // the resolved functions (nvml_library.cc)

 private:
  NvmlLibrary(void* handle, std::unique_ptr<Api> api);

  void* handle_;  // from dlopen
  std::unique_ptr<Api> api_;
  void* events_ = nullptr;      // nvmlEventSet_t, once watch_xids() made one
  std::vector<void*> devices_;  // nvmlDevice_t by index, as watch_xids() found them
  std::vector<int> watched_;
  bool watch_tried_ = false;
};

}  // namespace cohort::launch
