/* km_sampling_core.c — the stop rule, the pacing of queued samples and the protocol key
 * (km_sampling_core.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "km_sampling_core.h"
#include "km_stats_core.h"

/* ==== the stop rule ==== */

void km_stop_rule_default(km_stop_rule *r) {
  r->min_samples = 20;
  r->max_samples = 300;
  r->max_noise = 0.002;
  r->min_ms = 0;
  r->max_ms = 2000;
  r->early_samples = 0;
  r->max_ci = 0;
  r->noise_stat = KM_NOISE_IQR;
  memset(&r->alt, 0, sizeof r->alt);
}

int km_stop_rule_valid(const km_stop_rule *r) {
  if (!r || r->min_samples < 1 || r->max_samples < r->min_samples) return -1;
  if (!(r->max_noise >= 0) || !(r->min_ms >= 0) || !(r->max_ms > 0)) return -1; /* NaN fails too */
  if (r->early_samples < 0 || r->early_samples > r->min_samples) return -1;
  if (!(r->max_ci >= 0)) return -1;
  if (!km_noise_name(r->noise_stat)) return -1;
  if (r->alt.on && (r->alt.min_samples < 1 || r->alt.min_samples > r->max_samples || !(r->alt.max_noise >= 0) ||
                    r->alt.early_samples < 0 || r->alt.early_samples > r->alt.min_samples || !(r->alt.max_ci >= 0) ||
                    !(r->alt.min_median_ms >= 0) ||
                    !km_noise_name(r->alt.noise_stat)))
    return -1;
  return 0;
}

const char *km_stop_name(km_stop s) {
  switch (s) {
  case KM_STOP_NOISE: return "noise";
  case KM_STOP_MAX_SAMPLES: return "max_samples";
  case KM_STOP_MAX_TIME: return "max_time";
  default: return NULL;
  }
}

const char *km_noise_name(int stat) {
  switch (stat) {
  case KM_NOISE_IQR: return "iqr";
  case KM_NOISE_GINI: return "gini";
  default: return NULL;
  }
}

int km_noise_stat(const char *name) {
  for (int i = KM_NOISE_IQR; name && i <= KM_NOISE_GINI; i++)
    if (!strcmp(name, km_noise_name(i))) return i;
  return -1;
}

double km_stop_noise(const km_stop_rule *r, const double *sorted, int n) {
  return r->noise_stat == KM_NOISE_GINI ? km_stats_gini_noise(sorted, n) : km_stats_rel_noise(sorted, n);
}

void km_sampler_init(km_sampler *s, const km_stop_rule *r, double *samples, double *sorted) {
  memset(s, 0, sizeof *s);
  s->rule = *r;
  s->samples = samples;
  s->sorted = sorted;
  s->noise = INFINITY;
}

/* The noise a stop at n samples needs: max_noise from min_samples on; max_noise * n /
 * min_samples from early_samples on (an early stop); below them, none (-1). */
double km_stop_target(const km_stop_rule *r, int n) {
  if (n >= r->min_samples) return r->max_noise;
  if (r->early_samples > 0 && n >= r->early_samples) return r->max_noise * n / r->min_samples;
  return -1;
}

/* The least count at which the rule stops on noise: early_samples where it is below
 * min_samples, else min_samples. */
static int first_stop(const km_stop_rule *r) {
  return r->early_samples > 0 && r->early_samples < r->min_samples ? r->early_samples : r->min_samples;
}

/* Whether the rule's alt (km_stop_alt) holds at n sorted samples. */
static int alt_holds(const km_stop_rule *r, const double *sorted, int n) {
  const km_stop_alt *a = &r->alt;
  if (!a->on) return 0;
  if (n < first_stop(r)) return 0;
  if (a->min_median_ms > 0 && km_stats_quantile(sorted, n, 0.5) < a->min_median_ms) return 0;
  km_stop_rule as = *r;
  as.min_samples = a->min_samples, as.early_samples = a->early_samples, as.max_noise = a->max_noise;
  as.max_ci = a->max_ci, as.noise_stat = a->noise_stat;
  double target = km_stop_target(&as, n);
  return target >= 0 && km_stop_noise(&as, sorted, n) <= target &&
         (as.max_ci <= 0 || km_stats_median_ci(sorted, n) <= as.max_ci);
}

km_stop km_sampler_add(km_sampler *s, double ms, double elapsed_ms, int hold) {
  if (s->stop != KM_SAMPLE_ON || s->n >= s->rule.max_samples) return s->stop;
  s->samples[s->n] = ms;
  int i = s->n; /* insertion keeps `sorted` sorted: O(n) a sample, no sort per check */
  while (i > 0 && s->sorted[i - 1] > ms) { s->sorted[i] = s->sorted[i - 1]; i--; }
  s->sorted[i] = ms;
  s->n++;
  s->sum_ms += ms;
  s->noise = km_stop_noise(&s->rule, s->sorted, s->n);
  const km_stop_rule *r = &s->rule;
  int timeout_n = r->min_samples < 3 ? r->min_samples : 3;
  if (!hold && s->sum_ms >= r->min_ms &&
      ((s->noise <= km_stop_target(r, s->n) && (r->max_ci <= 0 || km_stats_median_ci(s->sorted, s->n) <= r->max_ci)) ||
       alt_holds(r, s->sorted, s->n)))
    s->stop = KM_STOP_NOISE;
  else if (s->n >= r->max_samples)
    s->stop = KM_STOP_MAX_SAMPLES;
  else if (elapsed_ms > r->max_ms && s->n >= timeout_n)
    s->stop = KM_STOP_MAX_TIME;
  return s->stop;
}

/* ==== pacing ==== */

int km_sampler_plan(const km_sampler *s, int queued, const km_pace *p) {
  const km_stop_rule *r = &s->rule;
  int done = s->n;
  if (s->stop != KM_SAMPLE_ON || queued >= r->max_samples) return queued;
  int max_lead = p->max_lead > 1 ? p->max_lead : 2;
  /* ahead of the host: while it wakes for sample i and enqueues one, the rest must run */
  int lead = KM_FIRST_LEAD;
  if (p->sample_ms > 0) {
    double need = 1 + ceil((p->host_ms + p->slack_ms) / p->sample_ms);
    lead = need > max_lead ? max_lead : (int)need;
    if (lead < 2) lead = 2;
  }
  if (lead > max_lead) lead = max_lead;
  if (p->serial) lead = 1; /* each sample waited for as it is enqueued: nothing runs ahead */
  int deciding = p->serial ? 1 : 2; /* past the first ask: one to run while the host decides */
  int first = first_stop(r);
  /* the most the rule may need */
  int may = r->max_samples;
  if (!p->hold) {
    if (done < first) {
      may = first;
    } else if (done < r->min_samples) {
      may = done + deciding; /* an early stop may come at any count */
    } else if (isfinite(s->noise) && r->max_noise > 0) {
      double ratio = s->noise / r->max_noise; /* noise ~ 1/sqrt(n) */
      double want = ceil(done * ratio * ratio);
      may = want > r->max_samples ? r->max_samples : (int)want;
      if (may < done + deciding) may = done + deciding;
    }
    if (s->sum_ms < r->min_ms && done > 0) { /* nvbench's min-time: the mean says how many more */
      double more = ceil((r->min_ms - s->sum_ms) / (s->sum_ms / done));
      double m = done + more + 1;
      if (m > may) may = m > r->max_samples ? r->max_samples : (int)m;
    }
  }
  /* none that would finish after max_ms */
  if (p->sample_ms > 0) {
    double left = (r->max_ms - p->elapsed_ms) / p->sample_ms;
    double tcap = done + 1 + (left > 0 ? floor(left) : 0);
    if (tcap < may) may = (int)tcap;
  }
  if (may > r->max_samples) may = r->max_samples;
  int target = done + lead < may ? done + lead : may;
  if (target < done + 1) target = done + 1; /* always progress */
  if (target > r->max_samples) target = r->max_samples;
  return target > queued ? target : queued;
}

/* ==== the protocol ==== */

/* cold: L2 flushed before each sample; warm: back to back; graph: the calls captured once
 * into a CUDA graph, its replays timed. */
const char *const km_timing_modes[KM_TIMING_NMODES] = {"cold", "warm", "graph"};

const char *km_timing_mode(const char *name) {
  for (int i = 0; name && i < KM_TIMING_NMODES; i++)
    if (!strcmp(name, km_timing_modes[i])) return km_timing_modes[i];
  return NULL;
}

void km_timing_protocol_default(km_timing_protocol *p) {
  p->mode = "cold";
  p->rep = 1;
  p->warmup = 3;
  p->warmup_ms = 1;
  p->flush_bytes = 0;
  p->energy = 0;
  p->gate = 1;
  km_stop_rule_default(&p->stop);
}

/* Shortest %g form that reads back as the same double. */
static void fmt_num(char *out, size_t cap, double v) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(out, cap, "%.*g", prec, v);
    if (strtod(out, NULL) == v) return;
  }
}

int km_timing_protocol_key(const km_timing_protocol *p, char *buf, size_t cap) {
  if (!p) return -1;
  char wms[32], noise[32], minms[32], maxms[32], flush[40];
  fmt_num(wms, sizeof wms, p->warmup_ms);
  fmt_num(noise, sizeof noise, p->stop.max_noise);
  fmt_num(minms, sizeof minms, p->stop.min_ms);
  fmt_num(maxms, sizeof maxms, p->stop.max_ms);
  const char *mode = p->mode ? p->mode : "cold";
  flush[0] = 0;
  if (!strcmp(mode, "cold")) {
    if (p->flush_bytes > 0) snprintf(flush, sizeof flush, " flush=%lld", p->flush_bytes);
    else snprintf(flush, sizeof flush, " flush=2xL2");
  }
  char early[64] = "", ci[32];
  if (p->stop.early_samples > 0 && p->stop.early_samples < p->stop.min_samples)
    snprintf(early, sizeof early, ",early=%d", p->stop.early_samples);
  if (p->stop.max_ci > 0) {
    fmt_num(ci, sizeof ci, p->stop.max_ci);
    size_t used = strlen(early);
    snprintf(early + used, sizeof early - used, ",ci<=%s", ci);
  }
  /* the IQR's rule keeps the word it always had: keys of timings taken under it stay valid */
  const char *stat = p->stop.noise_stat == KM_NOISE_GINI ? "gini" : "noise";
  char alt[128] = "";
  const km_stop_alt *a = &p->stop.alt;
  if (a->on) {
    char an[32], aci[32], amed[48] = "";
    fmt_num(an, sizeof an, a->max_noise);
    fmt_num(aci, sizeof aci, a->max_ci);
    if (a->min_median_ms > 0) {
      char m[32];
      fmt_num(m, sizeof m, a->min_median_ms);
      snprintf(amed, sizeof amed, ",median>=%sms", m);
    }
    snprintf(alt, sizeof alt, "|%s<=%s,n>=%d,early=%d,ci<=%s%s", a->noise_stat == KM_NOISE_GINI ? "gini" : "noise", an,
             a->min_samples, a->early_samples, aci, amed);
  }
  return snprintf(buf, cap, "km.timing/%d mode=%s rep=%d warmup=%d,%sms stop=%s<=%s,n=%d..%d%s%s,min_ms=%s,max_ms=%s%s energy=%d gate=%d",
                  KM_TIMING_PROTOCOL_VERSION, mode, p->rep, p->warmup, wms, stat, noise, p->stop.min_samples,
                  p->stop.max_samples, early, alt, minms, maxms, flush, p->energy ? 1 : 0, p->gate ? 1 : 0);
}
