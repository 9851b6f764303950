/* PNG plots via gnuplot: data files and one script in the output folder, then
 * `gnuplot plots.gp` there. Missing scenarios are skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"

static const char *color(strategy s) {
  static const char *c[] = {"#808080", "#d62728", "#1f77b4",
                            "#ff7f0e", "#2ca02c", "#9467bd"};
  return s < ST_COUNT ? c[s] : "#000000";
}

static const scenario_out *find(const scenario_out *sc, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(sc[i].name, name))
      return &sc[i];
  return NULL;
}

static FILE *open_in(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f)
    perror(path);
  return f;
}

/* Loader calls per 100 ms, one column per result [from, to). */
static int timeline(const char *dir, const char *file, const scenario_out *s, int from,
                    int to) {
  FILE *f = open_in(dir, file);
  if (!f)
    return -1;
  int nb = 0;
  for (int j = from; j < to; j++)
    nb = s->results[j].nbuckets > nb ? s->results[j].nbuckets : nb;
  for (int b = 0; b < nb; b++) {
    fprintf(f, "%.1f", b * BUCKET_MS / 1000.0);
    for (int j = from; j < to; j++)
      fprintf(f, " %d", b < s->results[j].nbuckets ? s->results[j].buckets[b] : 0);
    fprintf(f, "\n");
  }
  return fclose(f);
}

static void loads_panel(FILE *gp, const scenario_out *s, const char *dat, int from, int to,
                        const char *title) {
  int top = 1;
  for (int j = from; j < to; j++)
    top =
        s->results[j].peak_loads_per_100ms > top ? s->results[j].peak_loads_per_100ms : top;
  /* One scale for every panel, so 1 load looks small next to 32. */
  fprintf(gp, "set yrange [0:%d]\nset multiplot layout %d,1 title '%s'\n",
          top + top / 10 + 1, to - from, title);
  for (int j = from; j < to; j++) {
    const result *r = &s->results[j];
    fprintf(gp,
            "set ylabel 'loads/100ms'\nset xlabel '%s'\nplot '%s' using 1:%d with impulses "
            "lw 2 lc rgb '%s' title '%s (%.2f loads/expiry, peak %d)'\n",
            j + 1 == to ? "time (s)" : "", dat, j - from + 2, color(r->strat),
            strategy_name(r->strat), r->loads_per_expiry, r->peak_loads_per_100ms);
  }
  fprintf(gp, "unset multiplot\nunset xlabel\nunset ylabel\n");
}

static void hot_key(const char *dir, FILE *gp, const scenario_out *s) {
  if (timeline(dir, "hot_key-loads.dat", s, 1, s->nresults) != 0)
    return;
  fprintf(gp,
          "set terminal pngcairo size 900,%d font ',10' noenhanced\nset output "
          "'hot_key-loads.png'\nset yrange [0:*]\n",
          160 * (s->nresults - 1) + 40);
  loads_panel(gp, s, "hot_key-loads.dat", 1, s->nresults,
              "hot_key: loader calls over time (same key, same loader)");
  FILE *f = open_in(dir, "hot_key-cdf.dat");
  if (!f)
    return;
  for (int i = 0; i < CDF_POINTS; i++) {
    fprintf(f, "%.6f", 1.0 / (1.0 - s->results[0].cdf_pct[i] / 100.0 + 1e-12));
    for (int j = 0; j < s->nresults; j++)
      fprintf(f, " %.4f", s->results[j].cdf_ms[i]);
    fprintf(f, "\n");
  }
  fclose(f);
  fprintf(gp, "set terminal pngcairo size 900,500 font ',10' noenhanced\nset output "
              "'hot_key-latency.png'\nset logscale xy\nset yrange [*:*]\n"
              "set xtics ('0%%%%' 1, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, "
              "'99.99%%%%' 10000)\n"
              "set xlabel 'percentile'\nset ylabel 'latency (ms)'\nset key top left\n"
              "set title 'hot_key: latency by percentile'\nplot ");
  for (int j = 0; j < s->nresults; j++)
    fprintf(gp, "%s'hot_key-cdf.dat' using 1:%d with lines lw 2 lc rgb '%s' title '%s'",
            j ? ", " : "", j + 2, color(s->results[j].strat),
            strategy_name(s->results[j].strat));
  fprintf(gp, "\nunset logscale\nunset title\nset xtics autofreq\nunset xlabel\nunset "
              "ylabel\nset key default\n");
}

static void mass_expiry(const char *dir, FILE *gp, const scenario_out *s) {
  int half = s->nresults / 2, top = 1;
  for (int j = 0; j < s->nresults; j++)
    top =
        s->results[j].peak_loads_per_100ms > top ? s->results[j].peak_loads_per_100ms : top;
  if (timeline(dir, "mass_expiry-loads.dat", s, 0, s->nresults) != 0)
    return;
  fprintf(gp,
          "set terminal pngcairo size 1100,%d font ',10' noenhanced\nset output "
          "'mass_expiry-loads.png'\nset yrange [0:%d]\n"
          "set multiplot layout %d,2 columnsfirst title 'mass_expiry: loader calls per "
          "100 ms, left without jitter, right with jitter'\n",
          150 * half + 40, top + top / 10 + 1, half);
  for (int j = 0; j < s->nresults; j++)
    fprintf(gp,
            "plot 'mass_expiry-loads.dat' using 1:%d with impulses lw 2 lc rgb '%s' "
            "title '%s jitter %.1f (peak %d/100ms, %d at once)'\n",
            j + 2, color(s->results[j].strat), strategy_name(s->results[j].strat),
            s->results[j].jitter, s->results[j].peak_loads_per_100ms,
            s->results[j].peak_concurrent_loads);
  fprintf(gp, "unset multiplot\n");
}

static void beta_sweep(const char *dir, FILE *gp, const scenario_out *s) {
  FILE *f = open_in(dir, "beta_sweep.dat");
  if (!f)
    return;
  for (int j = 0; j < s->nresults; j++) {
    const result *r = &s->results[j];
    fprintf(f, "%g %.4f %d %.4f %.2f %.2f\n", r->beta, r->loads_per_expiry,
            r->max_loads_per_expiry, r->theory_loads_per_expiry, r->early_ms,
            r->theory_early_ms);
  }
  fclose(f);
  fprintf(gp,
          "set terminal pngcairo size 1000,420 font ',10' noenhanced\nset output "
          "'beta_sweep.png'\n"
          "set multiplot layout 1,2 title 'beta_sweep: pure XFetch (no lease), Poisson "
          "arrivals'\nset xlabel 'beta'\nset ylabel 'loads per expiry'\nset yrange [0:*]\n"
          "set xrange [0.3:4.2]\nset samples 200\n"
          "plot exp(1/x) with lines lw 2 title 'theory e^(1/beta)', 'beta_sweep.dat' "
          "using 1:2 with linespoints pt 7 ps 1.5 title 'measured mean', '' using 1:3 with "
          "points pt 2 title 'measured max'\n"
          "set ylabel 'refresh lands before expiry (ms)'\n"
          "plot 'beta_sweep.dat' using 1:6 with linespoints lw 2 title 'theory', '' using "
          "1:5 with linespoints pt 7 ps 1.5 title 'measured'\nunset multiplot\n"
          "set xrange [*:*]\nunset xlabel\nunset ylabel\n");
}

int plot_all(const char *dir, const scenario_out *sc, int n) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    perror(dir);
    return -1;
  }
  FILE *gp = open_in(dir, "plots.gp");
  if (!gp)
    return -1;
  const scenario_out *s;
  if ((s = find(sc, n, "hot_key")) && s->nresults > 1)
    hot_key(dir, gp, s);
  if ((s = find(sc, n, "mass_expiry")) && s->nresults > 1)
    mass_expiry(dir, gp, s);
  if ((s = find(sc, n, "beta_sweep")) && s->nresults > 0)
    beta_sweep(dir, gp, s);
  fclose(gp);
  if (system("command -v gnuplot > /dev/null 2>&1") != 0) {
    fprintf(stderr, "xfetch-bench: no gnuplot on PATH: data and plots.gp are in %s\n", dir);
    return 0;
  }
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp", dir);
  int rc = system(cmd);
  if (rc != 0)
    fprintf(stderr, "xfetch-bench: gnuplot failed (%d); data and plots.gp are in %s\n", rc,
            dir);
  return rc == 0 ? 0 : -1;
}
