/*
 * mockbroker - a real Kafka-protocol broker for the tests and the demo:
 * librdkafka's mock cluster (rdkafka_mock.h) behind a tiny control
 * protocol on stdin.
 *
 *   mockbroker [-b BROKERS] [-t TOPIC:PARTITIONS]... -f BOOTSTRAP_FILE
 *
 * Writes the bootstrap list ("127.0.0.1:p1,127.0.0.1:p2,...") to
 * BOOTSTRAP_FILE once listening. Then reads commands, one per line, and
 * answers each on stdout with "ok SEQ" or "error SEQ message" (SEQ is the
 * line number), so a driver can wait for a command to take effect:
 *
 *   err API CODE [COUNT]     the next COUNT requests of API fail with CODE
 *   broker_err ID API CODE RTT_MS   one error (with a delay) on one broker
 *   down ID | up ID          take a broker down / up (-1: all)
 *   leader TOPIC PART ID     move a partition's leader
 *   coord group|txn KEY ID   set a coordinator
 *   rtt ID MS                add latency to a broker
 *   topic TOPIC PARTITIONS   create a topic
 *   topic_err TOPIC CODE     make Metadata return CODE for a topic
 *   clear API                drop pending injected errors of an api
 *   quit                     exit (so does end of input, or SIGTERM)
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int run(rd_kafka_mock_cluster_t *mc, char *line) {
  char a[256], b[256];
  int x = 0, y = 0, z = 0, n;
  if (sscanf(line, "err %d %d %d", &x, &y, &z) >= 2) {
    rd_kafka_resp_err_t *errs;
    int i;
    n = sscanf(line, "err %d %d %d", &x, &y, &z);
    if (n < 3) z = 1;
    if (z < 1 || z > 100000) return -1;
    errs = calloc((size_t)z, sizeof *errs);
    if (!errs) return -1;
    for (i = 0; i < z; i++) errs[i] = (rd_kafka_resp_err_t)y;
    rd_kafka_mock_push_request_errors_array(mc, (int16_t)x, (size_t)z, errs);
    free(errs);
    return 0;
  }
  if (sscanf(line, "broker_err %d %d %d %d", &x, &y, &z, &n) == 4)
    return rd_kafka_mock_broker_push_request_error_rtts(mc, x, (int16_t)y, 1,
                                                        (rd_kafka_resp_err_t)z, n)
               ? -1 : 0;
  if (sscanf(line, "down %d", &x) == 1) return rd_kafka_mock_broker_set_down(mc, x) ? -1 : 0;
  if (sscanf(line, "up %d", &x) == 1) return rd_kafka_mock_broker_set_up(mc, x) ? -1 : 0;
  if (sscanf(line, "leader %255s %d %d", a, &x, &y) == 3)
    return rd_kafka_mock_partition_set_leader(mc, a, x, y) ? -1 : 0;
  if (sscanf(line, "coord %255s %255s %d", a, b, &x) == 3)
    return rd_kafka_mock_coordinator_set(mc, a, b, x) ? -1 : 0;
  if (sscanf(line, "rtt %d %d", &x, &y) == 2) return rd_kafka_mock_broker_set_rtt(mc, x, y) ? -1 : 0;
  if (sscanf(line, "topic_err %255s %d", a, &x) == 2) {
    rd_kafka_mock_topic_set_error(mc, a, (rd_kafka_resp_err_t)x);
    return 0;
  }
  if (sscanf(line, "topic %255s %d", a, &x) == 2) return rd_kafka_mock_topic_create(mc, a, x, 1) ? -1 : 0;
  if (sscanf(line, "clear %d", &x) == 1) {
    rd_kafka_mock_clear_request_errors(mc, (int16_t)x);
    return 0;
  }
  return -1;
}

int main(int argc, char **argv) {
  int brokers = 1, opt, seq = 0;
  const char *file = NULL;
  char errstr[512], line[1024];
  rd_kafka_conf_t *conf;
  rd_kafka_t *rk;
  rd_kafka_mock_cluster_t *mc;
  FILE *f;
  char *topics[64];
  int ntopics = 0, i;

  while ((opt = getopt(argc, argv, "b:t:f:")) != -1) {
    switch (opt) {
    case 'b': brokers = atoi(optarg); break;
    case 't': if (ntopics < 64) topics[ntopics++] = optarg; break;
    case 'f': file = optarg; break;
    default:
      fprintf(stderr, "usage: %s [-b brokers] [-t topic:partitions]... -f bootstrap_file\n", argv[0]);
      return 2;
    }
  }
  if (!file || brokers < 1) {
    fprintf(stderr, "mockbroker: -f bootstrap_file is required\n");
    return 2;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGPIPE, SIG_IGN);

  conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
  rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    fprintf(stderr, "mockbroker: %s\n", errstr);
    return 1;
  }
  mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    fprintf(stderr, "mockbroker: cannot create the mock cluster\n");
    return 1;
  }
  for (i = 0; i < ntopics; i++) {
    char name[256];
    int parts = 1;
    if (sscanf(topics[i], "%255[^:]:%d", name, &parts) >= 1)
      rd_kafka_mock_topic_create(mc, name, parts, 1);
  }
  /* Write to a temporary name and rename: readers never see half a list. */
  snprintf(line, sizeof line, "%s.tmp", file);
  f = fopen(line, "w");
  if (!f) {
    perror("mockbroker: bootstrap file");
    return 1;
  }
  fprintf(f, "%s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fclose(f);
  rename(line, file);
  setvbuf(stdout, NULL, _IOLBF, 0);

  while (!stop && fgets(line, sizeof line, stdin)) {
    seq++;
    line[strcspn(line, "\r\n")] = 0;
    if (strcmp(line, "quit") == 0) break;
    if (run(mc, line) == 0) printf("ok %d\n", seq);
    else printf("error %d cannot do: %s\n", seq, line);
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
