/*
 * The C API in a job: every process is a node of the store and a client.
 *
 *   cc -I nessie-c/include nessie-c/examples/c/job.c -L target/debug -lnessie_c \
 *      -Wl,-rpath,"$PWD/target/debug" -o job
 *   ./job                                   # three nodes in this process
 *   NESSIE_NODE_ID=0 NESSIE_NODES=3 ./job shm &   # ... and ids 1 and 2:
 *   mpirun -np 3 ./job shm                  # a launcher names the node
 *   srun -N 3 -n 3 ./job tcp                # NESSIE_SECRET_FILE set
 *
 * Each node PUTs a greeting, waits until every node has, GETs every
 * node's greeting into its own buffer (growing it when the store says
 * NESSIE_BUFFER_TOO_SMALL), and leaves after the last barrier.
 */
#include "nessie.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(NessieStatus status, const char *what) {
  if (status != NESSIE_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, nessie_status_name(status), nessie_last_error());
    exit(1);
  }
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static NessieStatus put_str(NessieClient *c, const char *key, const char *value) {
  return nessie_client_put(c, (const uint8_t *)key, strlen(key), (const uint8_t *)value,
                           strlen(value));
}

/* GETs `key` into *buf (of *cap bytes), growing it as the store asks. */
static NessieStatus get_grow(NessieClient *c, const char *key, uint8_t **buf, size_t *cap,
                             size_t *len) {
  for (;;) {
    NessieStatus s = nessie_client_get(c, (const uint8_t *)key, strlen(key), *buf, *cap, len);
    if (s != NESSIE_BUFFER_TOO_SMALL) return s;
    uint8_t *bigger = realloc(*buf, *len); /* *len is the length needed */
    if (bigger == NULL) return NESSIE_OUT_OF_MEMORY;
    *buf = bigger;
    *cap = *len;
  }
}

/* Every node PUTs "barrier/<name>/<id>" and waits for all the others'. */
static void barrier(NessieClient *c, const char *name, size_t id, size_t nodes) {
  char key[64];
  size_t len;
  snprintf(key, sizeof key, "barrier/%s/%zu", name, id);
  check(put_str(c, key, "1"), "barrier put");
  for (size_t other = 0; other < nodes; other++) {
    snprintf(key, sizeof key, "barrier/%s/%zu", name, other);
    for (int tries = 0;; tries++) {
      NessieStatus s = nessie_client_get(c, (const uint8_t *)key, strlen(key), NULL, 0, &len);
      /* Present (a one-byte value into no buffer: too small is found). */
      if (s == NESSIE_OK || s == NESSIE_BUFFER_TOO_SMALL) break;
      if (s != NESSIE_NOT_FOUND) check(s, "barrier get");
      if (tries > 120000) {
        fprintf(stderr, "node %zu: barrier %s timed out\n", id, name);
        exit(1);
      }
      sleep_ms(1);
    }
  }
}

/* Node `id` PUTs its greeting. */
static void greet(NessieClient *c, size_t id, size_t nodes) {
  char key[64], value[64];
  snprintf(key, sizeof key, "greeting/%zu", id);
  snprintf(value, sizeof value, "hello from node %zu of %zu", id, nodes);
  check(put_str(c, key, value), "put");
}

/* Reads and checks every node's greeting. */
static void read_all(NessieClient *c, size_t id, size_t nodes) {
  char key[64], want[64];
  size_t cap = 4, len = 0; /* deliberately small: the store says how much it needs */
  uint8_t *buf = malloc(cap);
  for (size_t other = 0; other < nodes; other++) {
    snprintf(key, sizeof key, "greeting/%zu", other);
    snprintf(want, sizeof want, "hello from node %zu of %zu", other, nodes);
    check(get_grow(c, key, &buf, &cap, &len), "get");
    if (len != strlen(want) || memcmp(buf, want, len) != 0) {
      fprintf(stderr, "node %zu: wrong greeting from node %zu\n", id, other);
      exit(1);
    }
  }
  free(buf);
}

int main(int argc, char **argv) {
  const char *fabric = argc > 1 ? argv[1] : NULL;
  const char *cluster = argc > 2 ? argv[2] : "c-example";
  char config[256];
  snprintf(config, sizeof config,
           "cluster = \"%s\"\nindex_slots_per_node = 4096\ndata_bytes_per_node = 33554432\n",
           cluster);

  if (fabric == NULL) {
    /* Three nodes in this process, a client on each. */
    NessieCluster *local = NULL;
    NessieClient *clients[3] = {NULL, NULL, NULL};
    check(nessie_cluster_local(config, &local), "start the cluster");
    for (size_t n = 0; n < 3; n++) check(nessie_cluster_client(local, n, &clients[n]), "client");
    for (size_t n = 0; n < 3; n++) greet(clients[n], n, 3);
    for (size_t n = 0; n < 3; n++) read_all(clients[n], n, 3);
    bool existed = false;
    check(nessie_client_delete(clients[2], (const uint8_t *)"greeting/0", 10, &existed), "delete");
    size_t len;
    NessieStatus s = nessie_client_get(clients[1], (const uint8_t *)"greeting/0", 10, NULL, 0, &len);
    if (!existed || s != NESSIE_NOT_FOUND) {
      fprintf(stderr, "delete did not remove the key\n");
      return 1;
    }
    s = nessie_client_put(clients[0], (const uint8_t *)"", 0, (const uint8_t *)"v", 1);
    if (s != NESSIE_EMPTY_KEY) {
      fprintf(stderr, "an empty key was not refused\n");
      return 1;
    }
    for (size_t n = 0; n < 3; n++) nessie_client_free(clients[n]);
    nessie_cluster_free(local);
    printf("local cluster: 3 nodes greeted each other\n");
    return 0;
  }

  /* This process's node; the launcher (or NESSIE_NODE_ID/NODES) says which. */
  NessieNode *node = NULL;
  NessieClient *client = NULL;
  check(nessie_node_from_launcher(config, fabric, &node), "start the node");
  size_t id = nessie_node_id(node), nodes = nessie_node_count(node);
  check(nessie_node_client(node, &client), "client");
  greet(client, id, nodes);
  barrier(client, "greeted", id, nodes);
  read_all(client, id, nodes);
  /* Peers may still read this node's keys until everyone is done. */
  barrier(client, "done", id, nodes);
  sleep_ms(500);
  nessie_client_free(client);
  nessie_node_free(node);
  printf("node %zu of %zu (%s): read every node's greeting\n", id, nodes, fabric);
  return 0;
}
