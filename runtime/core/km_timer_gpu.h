/* km_timer_gpu.h — the timing core's device on CUDA (km_timer_core.h's ops): event pairs on
 * the launch stream, the L2 flush, graph capture and replay, the SM clock probe, NVML's SM
 * clock and energy window; and the measured ceilings (peaks). Plain C over km_driver.h and
 * km_nvml_lib.h: no lua_State. km.timing (km_timing.c) and km_time (kmrun_api.c) time through it.
 *
 * Ownership: a km_timer_gpu belongs to its caller (on the stack, or in a Lua userdata that
 * releases it when closed); km_timer_gpu_release frees what a run made in it (events, the
 * captured graph, a capture left open) and may be called again. The L2 flush scratch belongs
 * to the process: made on first use, grown when a larger flush is asked for, kept; so does
 * the gate's page (host memory the device reads, km_gate's counter and its timeouts) and
 * its shadow, which every run's ops compare it with (km_timer_core.h). */
#ifndef KM_TIMER_GPU_H
#define KM_TIMER_GPU_H

#include "km_driver.h"
#include "km_nvml_lib.h"
#include "km_timer_core.h"

typedef struct km_timer_gpu {
  CUstream s;                       /* the stream timed: km_cuda_stream() at init */
  CUevent ev[KM_TIMER_EVENTS];
  int made;                         /* events made so far, in order */
  CUfunction flush_fn;
  uint64_t flush_n;                 /* 16-byte words flushed */
  CUstream cap, saved;              /* graph mode: the capturing stream, the one it replaced */
  CUgraph graph;
  CUgraphExec exec;
  km_nvml_dev nvml;                 /* NULL: no NVML */
  km_energy_window ew;
  unsigned long long gate_ticket;   /* the last gate this run enqueued (0: none) */
  unsigned long long gate_base;     /* the process's gate timeouts when this run's first gate went */
  int gate_base_set;
  int gate_busy;                    /* this run has gates not known to have run */
  int probe_pair;                   /* the process's probe slots this timer holds, + 1 (0: none) */
  CUevent probe_ev[2];              /* reached once probe slot 0 / 1 was copied back */
  int probe_pending;                /* bit k: slot k's probe enqueued, not yet waited for */
} km_timer_gpu;

/* The driver must be loaded (km_cuda_get). */
void km_timer_gpu_init(km_timer_gpu *g);
void km_timer_gpu_release(km_timer_gpu *g);

/* The ops: with clocks and energy (km.timing reports them) or without (km_time does not). */
const km_timer_ops *km_timer_gpu_ops(int clocks_and_energy);

/* The SM clock in MHz while a kernel runs (clock64 against %globaltimer, over `cycles` SM
 * cycles of one warp's spin); NaN on failure. A timing's start and end probe
 * KM_CLOCK_PROBE_CYCLES: 20k cycles, 10 us at 1980 MHz. On an H200 its standard deviation is
 * 0.13% (bench/RESULTS.md, "clock-probe"): far inside the 2% that clock_moved tells, where a
 * longer probe costs the candidates' timings more (400k cycles: 2%, "probe-length"). */
#define KM_CLOCK_PROBE_CYCLES 20000LL
double km_timer_gpu_sm_clock(void);
double km_timer_gpu_sm_clock_cycles(long long cycles);

/* The gate's page checked now (put back where it differs from its shadow, km_gate_check):
 * the process's count of checks, by runs and by this call, that found it written. Needs no
 * device: 0 before the first gate. */
unsigned long long km_timer_gpu_gate_check(void);

/* For tests only (a stand-in for what an attacker learns): the page's device address, the
 * page made now if it is not yet. */
CUresult km_timer_gpu_gate_page(CUdeviceptr *addr);

/* This device's measured ceilings: a 16-byte copy of 2 x 512 MiB (bytes read and written)
 * and 8 FMA chains per thread on every SM. CUDA_SUCCESS, or the failure with *what. */
CUresult km_timer_gpu_peaks(double *bandwidth_gbs, double *fp32_tflops, const char **what);

#endif
