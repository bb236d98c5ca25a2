/* km_status_core.c — names for the pure C status codes (km.h). */
#include "km.h"

const char *km_strerror(int status) {
  switch (status) {
  case KM_OK: return "ok";
  case KM_ENOMEM: return "out of memory";
  case KM_EINVAL: return "invalid argument";
  case KM_EIO: return "input/output error";
  case KM_ECORRUPT: return "data failed its integrity check";
  case KM_ERANGE: return "value out of range";
  case KM_ENOTFOUND: return "not found";
  case KM_EREFUSED: return "refused";
  }
  return "unknown error";
}
