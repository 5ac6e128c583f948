/* bench/rdkafka_bench.c: librdkafka producing N messages (acks=all,
 * batching on) to a topic and consuming them back, against a running mock
 * cluster. Prints "produce|consume<TAB>size<TAB>none<TAB>msgs_per_sec" for
 * each run, wall clock, like bench/e2e.lua.
 *   rdkafka_bench BROKERS TOPIC_PREFIX N RUNS SIZE [MODE [CODEC]]
 * MODE "mock" (the default): the settings for the mock cluster below.
 * MODE "idempotent" or "plain" (a real broker): enable.idempotence true or
 * false, batching tuned for throughput as librdkafka's INTRODUCTION.md
 * advises (linger.ms 100 so batches fill up, batch.size 1000000,
 * batch.num.messages 100000 so the size, not the count, closes a batch);
 * the ops are then named produce_MODE / consume_MODE. CODEC: the
 * producer's compression.codec (none, lz4, zstd, ...). At the end a line
 * "vmhwm<TAB>size<TAB>codec<TAB>kB": the process's peak resident memory.
 *   rdkafka_bench consume BROKERS TOPIC N RUNS [CA_PEM USER PASSWORD [MECHANISM]]
 * The consume matrix (bench/consume.lua): one consumer reads every partition
 * of a topic already holding N messages from offset 0, RUNS+1 times (run 0
 * warms up), tuned for throughput (consume_conf); with CA_PEM USER PASSWORD
 * over SASL_SSL with SCRAM-SHA-512 or MECHANISM (PLAIN: librdkafka before
 * 2.6.1, Debian's 2.0.2 too, fails SCRAM against Kafka 4.x brokers,
 * edenhill/kcat#462). Prints "rate<TAB>msg/s<TAB>cpu" per
 * measured run (cpu: the process's CPU seconds per wall second, every
 * librdkafka thread included) and "vmhwm<TAB>kB" at the end. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The process's peak resident set (VmHWM, kB) from /proc/self/status. */
static long vmhwm_kb(void) {
  char line[256];
  long kb = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
  fclose(f);
  return kb;
}

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long delivered, failed;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk, (void)opaque;
  if (m->err) failed++;
  else delivered++;
}

static void set(rd_kafka_conf_t *c, const char *k, const char *v) {
  char err[256];
  if (rd_kafka_conf_set(c, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
    fprintf(stderr, "%s: %s\n", k, err);
    exit(1);
  }
}

static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The consume matrix's settings: issue 33's tuning (queued.min.messages 1M
 * per partition, fetch.wait.max.ms 100, fetch.message.max.bytes 1 MiB per
 * partition) and queued.max.messages.kbytes raised to 1 GiB, since it caps
 * the prefetch before queued.min.messages does (CONFIGURATION.md: it has
 * higher priority); check.crcs stays false, its default. */
static rd_kafka_conf_t *consume_conf(int argc, char **argv) {
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  set(conf, "bootstrap.servers", argv[2]);
  set(conf, "group.id", "rdkafka-bench-consume");
  set(conf, "enable.auto.commit", "false");
  set(conf, "enable.partition.eof", "false");
  set(conf, "queued.min.messages", "1000000");
  set(conf, "queued.max.messages.kbytes", "1048576");
  set(conf, "fetch.wait.max.ms", "100");
  set(conf, "fetch.message.max.bytes", "1048576");
  if (argc >= 9) {
    set(conf, "security.protocol", "SASL_SSL");
    set(conf, "sasl.mechanisms", argc == 10 ? argv[9] : "SCRAM-SHA-512");
    set(conf, "ssl.ca.location", argv[6]);
    set(conf, "sasl.username", argv[7]);
    set(conf, "sasl.password", argv[8]);
  }
  /* BENCH_RDKAFKA_DEBUG=security,broker,...: librdkafka's debug contexts on stderr */
  if (getenv("BENCH_RDKAFKA_DEBUG") && *getenv("BENCH_RDKAFKA_DEBUG")) set(conf, "debug", getenv("BENCH_RDKAFKA_DEBUG"));
  return conf;
}

/* rdkafka_bench consume BROKERS TOPIC N RUNS [CA_PEM USER PASSWORD [MECHANISM]] */
static int consume_only(int argc, char **argv) {
  const char *topic = argv[3];
  long n = atol(argv[4]);
  int runs = atoi(argv[5]), r, p, np;
  char err[512];
  rd_kafka_t *rk;
  rd_kafka_topic_t *rkt;
  const rd_kafka_metadata_t *md;
  rd_kafka_topic_partition_list_t *parts;
  if (argc != 6 && argc != 9 && argc != 10) {
    fprintf(stderr, "usage: %s consume BROKERS TOPIC N RUNS [CA_PEM USER PASSWORD [MECHANISM]]\n", argv[0]);
    return 2;
  }
  rk = rd_kafka_new(RD_KAFKA_CONSUMER, consume_conf(argc, argv), err, sizeof err);
  if (!rk) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  rd_kafka_poll_set_consumer(rk);
  rkt = rd_kafka_topic_new(rk, topic, NULL);
  if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 ||
      md->topics[0].err) {
    fprintf(stderr, "metadata of %s failed\n", topic);
    return 1;
  }
  np = md->topics[0].partition_cnt;
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  parts = rd_kafka_topic_partition_list_new(np);
  /* offset 0, as the other clients (a fresh topic: its beginning, without a ListOffsets) */
  for (p = 0; p < np; p++) rd_kafka_topic_partition_list_add(parts, topic, p)->offset = 0;
  for (r = 0; r <= runs; r++) { /* run 0 is the warm-up; one handle, its connections made once */
    long got = 0;
    double t0 = wall(), c0 = cpu(), t1, c1;
    rd_kafka_assign(rk, parts);
    while (got < n && wall() - t0 < 120) {
      rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
      if (m) {
        if (!m->err) got++;
        else fprintf(stderr, "rdkafka_bench: %s\n", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
      }
    }
    t1 = wall();
    c1 = cpu();
    if (got != n) {
      fprintf(stderr, "rdkafka_bench: consumed %ld of %ld\n", got, n);
      return 1;
    }
    if (r > 0) printf("rate\t%.0f\t%.3f\n", (double)n / (t1 - t0), (c1 - c0) / (t1 - t0));
    fflush(stdout);
    rd_kafka_assign(rk, NULL); /* drops what was prefetched: the next run starts from the beginning */
  }
  rd_kafka_topic_partition_list_destroy(parts);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  printf("vmhwm\t%ld\n", vmhwm_kb());
  return 0;
}

int main(int argc, char **argv) {
  const char *brokers, *prefix, *mode = NULL, *codec = "none";
  long n, i, size;
  int runs, r;
  char *payload;
  if (argc >= 2 && strcmp(argv[1], "consume") == 0) return consume_only(argc, argv);
  if (argc < 6 || argc > 8) {
    fprintf(stderr, "usage: %s BROKERS TOPIC_PREFIX N RUNS SIZE [mock|idempotent|plain [CODEC]]\n", argv[0]);
    return 2;
  }
  if (argc >= 7 && strcmp(argv[6], "mock") != 0) {
    mode = argv[6];
    if (strcmp(mode, "idempotent") != 0 && strcmp(mode, "plain") != 0) {
      fprintf(stderr, "MODE: mock, idempotent or plain (got %s)\n", mode);
      return 2;
    }
  }
  if (argc == 8) codec = argv[7];
  brokers = argv[1];
  prefix = argv[2];
  n = atol(argv[3]);
  runs = atoi(argv[4]);
  size = atol(argv[5]);
  payload = malloc((size_t)size);
  memset(payload, 'x', (size_t)size);
  for (r = 0; r <= runs; r++) { /* run 0 is the warm-up */
    char topic[256], err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    double t0, t1;
    long got = 0, avail = 0;
    rd_kafka_topic_partition_list_t *parts;
    const rd_kafka_metadata_t *md;
    rd_kafka_topic_t *rkt;
    int p, np;
    snprintf(topic, sizeof topic, "%s%d", prefix, r);
    set(conf, "bootstrap.servers", brokers);
    set(conf, "acks", "all");
    set(conf, "compression.codec", codec);
    if (mode) {
      set(conf, "enable.idempotence", strcmp(mode, "idempotent") == 0 ? "true" : "false");
      set(conf, "linger.ms", "100");
      set(conf, "batch.size", "1000000");
      set(conf, "batch.num.messages", "100000");
    } else {
      set(conf, "linger.ms", "5");
      /* the mock keeps ~5 MB per partition: stick to a partition 1 ms, not
       * 10, so no partition gets more than that (all runs read back fully) */
      set(conf, "sticky.partitioning.linger.ms", "1");
    }
    set(conf, "queue.buffering.max.messages", "2000000");
    set(conf, "queue.buffering.max.kbytes", "2000000");
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    delivered = failed = 0;
    t0 = wall();
    for (i = 0; i < n; i++) {
      snprintf(payload, (size_t)size, "%ld", i);
      payload[strlen(payload)] = 'x';
      while (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(payload, (size_t)size),
                               RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) ==
             RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(rk, 10);
      rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 120000);
    t1 = wall();
    if (r > 0)
      printf("produce%s%s\t%ld\t%s\t%.0f\n", mode ? "_" : "", mode ? mode : "", size, codec, (double)n / (t1 - t0));
    if (failed || delivered != n) {
      fprintf(stderr, "rdkafka_bench: %ld failed deliveries, %ld of %ld delivered\n", failed, delivered, n);
      if (mode) return 1;
    }
    rd_kafka_destroy(rk);

    conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", brokers);
    set(conf, "group.id", "rdkafka-bench");
    set(conf, "enable.auto.commit", "false");
    set(conf, "queued.min.messages", "1000000");
    set(conf, "fetch.wait.max.ms", "100");
    set(conf, "enable.partition.eof", "false");
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    rd_kafka_poll_set_consumer(rk);
    rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fprintf(stderr, "metadata failed\n");
      return 1;
    }
    np = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    /* what the cluster holds: the mock keeps ~5 MB per partition and drops
     * the oldest batches beyond, which sticky partitioning can reach for a
     * partition at 1 KiB: the read stops at what is there, not at a
     * deadline (a real broker keeps everything: avail is n) */
    for (p = 0; p < np; p++) {
      int64_t lo = 0, hi = 0;
      if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "watermarks of partition %d failed\n", p);
        return 1;
      }
      avail += (long)(hi - lo);
    }
    if (avail != n) fprintf(stderr, "rdkafka_bench: the cluster holds %ld of the %ld messages\n", avail, n);
    if (mode && avail != n) return 1;
    parts = rd_kafka_topic_partition_list_new(np);
    for (p = 0; p < np; p++)
      rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    t0 = wall();
    rd_kafka_assign(rk, parts);
    while (got < avail && wall() - t0 < 30) {
      rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
      if (m) {
        if (!m->err) got++;
        rd_kafka_message_destroy(m);
      }
    }
    t1 = wall();
    if (r > 0)
      printf("consume%s%s\t%ld\t%s\t%.0f\n", mode ? "_" : "", mode ? mode : "", size, codec,
             (double)got / (t1 - t0));
    if (got < avail) {
      fprintf(stderr, "rdkafka_bench: consumed %ld of %ld\n", got, avail);
      if (mode) return 1;
    }
    fflush(stdout);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
  }
  free(payload);
  printf("vmhwm%s%s\t%ld\t%s\t%ld\n", mode ? "_" : "", mode ? mode : "", size, codec, vmhwm_kb());
  return 0;
}
