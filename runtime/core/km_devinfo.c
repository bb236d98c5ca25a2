/* km_devinfo.c — a device's facts in plain C (km_devinfo.h), read once for km.cuda.device()
 * and km_device(). */
#include <stdio.h>
#include <string.h>

#include "km_driver.h"
#include "km_devinfo.h"

int km_devinfo_attr(CUdevice d, CUdevice_attribute a) {
  int v = 0;
  km_cu->cuDeviceGetAttribute(&v, a, d);
  return v;
}

void km_devinfo_read(CUdevice d, km_devinfo *out) {
  const km_cuda_api *cu = km_cu;
  memset(out, 0, sizeof *out);
  km_device_info *p = &out->pub;
  cu->cuDeviceGetName(p->name, sizeof p->name - 1, d);
  cu->cuDeviceTotalMem(&p->total_mem, d);
  cu->cuDriverGetVersion(&p->driver_version);
  p->cc_major = km_devinfo_attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p->cc_minor = km_devinfo_attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  snprintf(p->arch, sizeof p->arch, "sm_%d%d", p->cc_major, p->cc_minor);
  p->sm_count = km_devinfo_attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
#define READ(field, attr, div) out->field = km_devinfo_attr(d, CU_DEVICE_ATTRIBUTE_##attr) / div;
  KM_DEVINFO_ATTRS(READ)
#undef READ
  CUuuid uuid;
  memset(&uuid, 0, sizeof uuid);
  cu->cuDeviceGetUuid(&uuid, d);
  const unsigned char *u = (const unsigned char *)uuid.bytes;
  /* GPU-<8>-<4>-<4>-<4>-<12>, as nvidia-smi prints it */
  snprintf(p->uuid, sizeof p->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}
