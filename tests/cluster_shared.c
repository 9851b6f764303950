/* The binary's shared cluster: started once by the runner (Criterion's
 * PRE_ALL hook), found by the test workers through XFT_CLUSTER_PORTS. A
 * binary that never calls xft_cluster_port does not link this file, so it
 * starts no shared cluster (test_cluster_chaos starts its own per test). */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_fixture.h"

static xft_cluster shared;

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  if (xft_cluster_start(&shared) != 0) {
    fprintf(stderr, "cluster fixture: cannot start the cluster\n");
    exit(1);
  }
  /* Criterion's workers are new processes: they find the cluster here. */
  char ports[XFT_CLUSTER_NODES * 8] = "";
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    snprintf(ports + strlen(ports), sizeof ports - strlen(ports), "%s%d", i ? "," : "",
             shared.port[i]);
  setenv("XFT_CLUSTER_PORTS", ports, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  (void)stats;
  xft_cluster_stop(&shared);
  fprintf(stderr, "cluster fixture: start %.2f s, stop %.2f s\n", shared.start_s,
          shared.stop_s);
}

int xft_cluster_port(int i) {
  const char *ports = getenv("XFT_CLUSTER_PORTS");
  cr_assert_not_null(ports, "no shared cluster (XFT_CLUSTER_PORTS unset)");
  cr_assert(i >= 0 && i < XFT_CLUSTER_NODES);
  for (; i > 0; i--)
    ports = strchr(ports, ',') + 1;
  return atoi(ports);
}

const xft_cluster *xft_cluster_shared(void) {
  static xft_cluster c; /* ports only: no pids, plain TCP */
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    c.port[i] = xft_cluster_port(i);
  return &c;
}
