/* The generated cuGetProcAddress table (gen_driver_tables.py). C and C++. */
#ifndef SIMDEV_PROC_TABLE_H
#define SIMDEV_PROC_TABLE_H

#ifdef __cplusplus
#include <string>
extern "C" {
#endif

struct simdev_proc_entry {
  const char* symbol;    /* the name cuGetProcAddress is asked for */
  int version;           /* CUDA version that introduced this ABI form */
  int per_thread;        /* the _ptsz / _ptds form */
  const char* exported;  /* the exported name of this form */
  void* fn;              /* its address in simdev */
  void* stub;            /* the NOT_SUPPORTED stub; == fn when not implemented */
};

extern const struct simdev_proc_entry driver_proc_table[];
extern const unsigned driver_proc_table_size;

#ifdef __cplusplus
}
namespace simdev {
// True when `exported` names a function simdev implements.
bool is_implemented_name(const std::string& exported);
// The version cuDriverGetVersion reports (SIMDEV_DRIVER_VERSION).
int driver_version();
// True when `symbol` (a cuGetProcAddress name such as "cuFuncGetParamInfo")
// came after driver_version(): the oldest PFN_<symbol>_v<N> typedef of
// cudaTypedefs.h, as recorded in the table, is newer than the driver.
bool newer_than_driver(const char* symbol);
}  // namespace simdev
#endif

#endif
