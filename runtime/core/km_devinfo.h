/* km_devinfo.h — a device's facts in plain C: the one reading of name, compute capability,
 * memory, caches, clocks, limits, UUID and driver version behind km.cuda.device() (the Lua
 * binding, runtime/bind/km_cuda.c) and km_device() (the public C API, runtime/glue/kmrun_api.c). No
 * lua_State here; each front end picks the fields it shows.
 *
 * Not a *_core.c file: it calls the driver (km_driver.h), which the C unit tests do not link.
 *
 * Ownership: *out is the caller's; nothing is allocated. The driver must be loaded
 * (km_cuda_get). */
#ifndef KM_DEVINFO_H
#define KM_DEVINFO_H
#include <stddef.h>
#include <cuda.h>

#include "kmrun.h"

/* The facts beyond km_device_info, each one attribute: X(field, CU_DEVICE_ATTRIBUTE_ name,
 * divisor). km.cuda.device() shows each under its field name. */
#define KM_DEVINFO_ATTRS(X)                                                                         \
  X(l2_size, L2_CACHE_SIZE, 1) X(clock_mhz, CLOCK_RATE, 1000)                                       \
  X(mem_clock_mhz, MEMORY_CLOCK_RATE, 1000) X(mem_bus_width, GLOBAL_MEMORY_BUS_WIDTH, 1)            \
  X(warp_size, WARP_SIZE, 1) X(max_threads_per_block, MAX_THREADS_PER_BLOCK, 1)                     \
  X(max_threads_per_sm, MAX_THREADS_PER_MULTIPROCESSOR, 1)                                          \
  X(max_shared_per_block, MAX_SHARED_MEMORY_PER_BLOCK, 1)                                           \
  X(max_shared_per_block_optin, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 1)                               \
  X(max_shared_per_sm, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 1)                                     \
  X(regs_per_sm, MAX_REGISTERS_PER_MULTIPROCESSOR, 1) X(regs_per_block, MAX_REGISTERS_PER_BLOCK, 1) \
  X(pci_bus_id, PCI_BUS_ID, 1)                                                                      \
  X(pageable_memory_access, PAGEABLE_MEMORY_ACCESS, 1)

typedef struct km_devinfo {
  km_device_info pub; /* name, arch, cc_major/minor, sm_count, total_mem, uuid, driver_version:
                         what km_device() gives (kmrun.h) */
#define KM_DEVINFO_FIELD(field, attr, div) int field;
  KM_DEVINFO_ATTRS(KM_DEVINFO_FIELD)
#undef KM_DEVINFO_FIELD
} km_devinfo;

/* One attribute of device d; 0 when the driver does not answer. */
int km_devinfo_attr(CUdevice d, CUdevice_attribute a);
/* Fills *out with device d's facts. A fact the driver does not answer reads as 0 (or ""). */
void km_devinfo_read(CUdevice d, km_devinfo *out);
#endif
