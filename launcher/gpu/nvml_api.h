// The few parts of NVML (the NVIDIA Management Library, libnvidia-ml.so.1) that cohort uses,
// declared here from NVML's public API reference (https://docs.nvidia.com/deploy/nvml-api/, and
// the nvml.h the CUDA toolkit ships under targets/<arch>/include) so that cohort builds without
// the toolkit and runs without the driver: the library is opened with dlopen at first use
// (nvml_library.h) and these symbols are looked up by name.
//
// Only the ABI matters: the layouts of the structs passed in, the values of the constants, and
// the versioned symbol names (nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2, ...), which NVML keeps
// stable once published. Where NVML has grown a struct (nvmlEventData_t gained two fields), the
// larger layout is declared: an older library writes less of it.
#pragma once

#include <cstdint>

namespace cohort::launch::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
constexpr Return kErrorUninitialized = 1;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNoPermission = 4;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorDriverNotLoaded = 9;
constexpr Return kErrorTimeout = 10;
constexpr Return kErrorLibraryNotFound = 12;
constexpr Return kErrorFunctionNotFound = 13;
constexpr Return kErrorGpuIsLost = 15;
constexpr Return kErrorResetRequired = 16;
constexpr Return kErrorLibRmVersionMismatch = 18;
constexpr Return kErrorUnknown = 999;

struct DeviceStruct;  // nvmlDevice_st: opaque
using Device = DeviceStruct*;
struct EventSetStruct;  // nvmlEventSet_st: opaque
using EventSet = EventSetStruct*;

// nvmlUtilization_t: percent of the last sample period.
struct Utilization {
  unsigned int gpu;     // a kernel was running
  unsigned int memory;  // device memory was being read or written
};

// nvmlMemory_t (the v1 call, nvmlDeviceGetMemoryInfo): bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it (the v2 layout; NVML's
// Python binding, nvidia-ml-py, uses the same one for _v3).
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // NVML_VALUE_NOT_AVAILABLE (~0ull) when unknown
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr unsigned long long kValueNotAvailable = ~0ull;

// nvmlEventData_t with its MIG fields (newer drivers; older ones leave them untouched).
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid, for kEventTypeXidCriticalError (999: unknown Xid)
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// The sizes nvml.h gives these structs on 64-bit Linux.
static_assert(sizeof(Utilization) == 8 && sizeof(Memory) == 24);
static_assert(sizeof(ProcessInfo) == 24 && sizeof(EventData) == 32);

// nvmlEventType flags.
constexpr unsigned long long kEventTypeXidCriticalError = 0x8ull;

// nvmlTemperatureSensors_t
constexpr int kTemperatureGpu = 0;
// nvmlClockType_t
constexpr int kClockSm = 1;
constexpr int kClockMem = 2;
// nvmlMemoryErrorType_t
constexpr int kMemoryErrorCorrected = 0;
constexpr int kMemoryErrorUncorrected = 1;
// nvmlEccCounterType_t
constexpr int kVolatileEcc = 0;
// nvmlEnableState_t
constexpr int kFeatureEnabled = 1;

// nvmlClocksEventReasons (called nvmlClocksThrottleReasons before CUDA 12.2; the bits are the
// same): why the clocks are below their maximum.
constexpr unsigned long long kReasonGpuIdle = 0x1ull;
constexpr unsigned long long kReasonApplicationsClocksSetting = 0x2ull;
constexpr unsigned long long kReasonSwPowerCap = 0x4ull;
constexpr unsigned long long kReasonHwSlowdown = 0x8ull;
constexpr unsigned long long kReasonSyncBoost = 0x10ull;
constexpr unsigned long long kReasonSwThermalSlowdown = 0x20ull;
constexpr unsigned long long kReasonHwThermalSlowdown = 0x40ull;
constexpr unsigned long long kReasonHwPowerBrakeSlowdown = 0x80ull;
constexpr unsigned long long kReasonDisplayClockSetting = 0x100ull;

// Buffer sizes of the string queries (NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_...,
// NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE).
constexpr unsigned int kUuidBufferSize = 96;
constexpr unsigned int kNameBufferSize = 96;
constexpr unsigned int kDriverVersionBufferSize = 80;

// The functions, as pointer types (resolved with dlsym under the names in nvml_library.cc).
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SystemGetDriverVersionFn = Return (*)(char*, unsigned int);
using DeviceGetCountFn = Return (*)(unsigned int*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);  // UUID, name
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetTemperatureFn = Return (*)(Device, int sensor, unsigned int*);
using DeviceGetUintFn = Return (*)(Device, unsigned int*);  // power usage, power limit (mW)
using DeviceGetClockInfoFn = Return (*)(Device, int clock, unsigned int*);
using DeviceGetReasonsFn = Return (*)(Device, unsigned long long*);
using DeviceGetTotalEccErrorsFn = Return (*)(Device, int error_type, int counter_type,
                                             unsigned long long*);
using DeviceGetProcessesFn = Return (*)(Device, unsigned int* count, ProcessInfo*);
using DeviceGetRemappedRowsFn = Return (*)(Device, unsigned int* corrected,
                                           unsigned int* uncorrected, unsigned int* pending,
                                           unsigned int* failure);
using DeviceGetRetiredPagesPendingFn = Return (*)(Device, int* pending);  // nvmlEnableState_t
using EventSetCreateFn = Return (*)(EventSet*);
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long types, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned int timeout_ms);
using EventSetFreeFn = Return (*)(EventSet);

}  // namespace cohort::launch::nvml
