// Kafka's Java client as the end-to-end peer of `make bench` against a real
// broker: RUNS+1 rounds in one JVM (round 0 warms up), each producing N
// messages of SIZE bytes to TOPIC_PREFIX<round> (acks=all, linger 5 ms,
// 1 MiB batches, the given codec, idempotence as the Java default) and
// reading them back with one consumer (every partition assigned from the
// start, fetch.max.bytes 50 MB as its default, CRC checks on as default).
// One producer and one consumer serve every round. Prints "produce\tSIZE\tCODEC\trate" and "consume\tSIZE\tCODEC\trate" per
// measured round, as bench/e2e.lua does.
//   java -cp ... JavaBench BOOTSTRAP TOPIC_PREFIX N RUNS SIZE CODEC [SASL_SSL CA_PEM USER PASSWORD]
//   java -cp ... JavaBench BOOTSTRAP TOPIC_PREFIX N RUNS SIZE CODEC [transactional TXN_MSGS]
// With SASL_SSL both clients connect with TLS (the CA as a PEM trust store,
// host name verification on, as default) and SASL SCRAM-SHA-512, and the
// ops are named produce_sasl_ssl / consume_sasl_ssl. With transactional the
// producer has a transactional.id and commits a transaction every TXN_MSGS
// messages (ops produce_transactional / consume_transactional, read_committed).
// Consumer groups (the topic already holds N messages; a fresh group per round):
//   java -cp ... JavaBench group BOOTSTRAP TOPIC GROUP_PREFIX PROTOCOL N RUNS MEMBERS SIZE DEADLINE_S
//     MEMBERS KafkaConsumers (one thread each) subscribe together; prints
//     "group_PROTOCOL\tSIZE\tnone\trate": N / (first subscribe to the last new message)
//   java -cp ... JavaBench grouplat BOOTSTRAP TOPIC GROUP_PREFIX PROTOCOL PARTITIONS RUNS SIZE DEADLINE_S
//     a first member alone, then two more, then a 4th once the 3 own PARTITIONS/3 each
//     (no commits, so moved partitions start at the beginning); prints
//     "join_first_PROTOCOL\tSIZE\tnone\tms" and "join_4th_PROTOCOL\tSIZE\tnone\tms":
//     from the member's subscribe to its first message
// The consume matrix (bench/consume.lua; the topic already holds N messages):
//   java -cp ... JavaBench consume BOOTSTRAP TOPIC N RUNS [SASL_SSL CA_PEM USER PASSWORD]
//     one KafkaConsumer reads every partition from offset 0 RUNS+1 times (run 0
//     warms up), tuned for throughput (consumeProps); prints "rate\tMSG_PER_S\tCPU"
//     per measured run (CPU: the process's CPU seconds per wall second) and at
//     the end "vmhwm\tKB" (peak resident memory)
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

public class JavaBench {
    public static void main(String[] a) throws Exception {
        if (a[0].equals("group")) {
            groupBench(a[1], a[2], a[3], a[4], Long.parseLong(a[5]), Integer.parseInt(a[6]), Integer.parseInt(a[7]),
                Integer.parseInt(a[8]), Integer.parseInt(a[9]));
            return;
        }
        if (a[0].equals("grouplat")) {
            groupLatency(a[1], a[2], a[3], a[4], Integer.parseInt(a[5]), Integer.parseInt(a[6]), Integer.parseInt(a[7]),
                Integer.parseInt(a[8]));
            return;
        }
        if (a[0].equals("consume")) {
            consumeBench(a);
            return;
        }
        String bs = a[0], prefix = a[1], codec = a[5];
        boolean txn = a.length > 6 && a[6].equals("transactional");
        if (txn && a.length != 8) throw new IllegalArgumentException("expected transactional TXN_MSGS");
        int perTxn = txn ? Integer.parseInt(a[7]) : 0;
        int n = Integer.parseInt(a[2]), runs = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        Properties sec = new Properties();
        String suffix = txn ? "_transactional" : "";
        if (a.length > 6 && !txn) {
            if (!a[6].equals("SASL_SSL") || a.length != 10) throw new IllegalArgumentException("expected SASL_SSL CA_PEM USER PASSWORD");
            sec.put("security.protocol", "SASL_SSL");
            sec.put("sasl.mechanism", "SCRAM-SHA-512");
            sec.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + a[8] + "\" password=\"" + a[9] + "\";");
            sec.put("ssl.truststore.type", "PEM");
            sec.put("ssl.truststore.location", a[7]);
            suffix = "_sasl_ssl";
        }
        // 1,000 distinct values cycled, as bench/e2e.lua does
        byte[][] pool = new byte[1000][];
        for (int i = 0; i < 1000; i++) {
            byte[] v = new byte[size];
            Arrays.fill(v, (byte) 'x');
            byte[] id = Integer.toString(i + 1).getBytes(StandardCharsets.US_ASCII);
            System.arraycopy(id, 0, v, 0, Math.min(id.length, size));
            pool[i] = v;
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bs);
        pp.putAll(sec);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "1048576");
        pp.put(ProducerConfig.BUFFER_MEMORY_CONFIG, "134217728");
        pp.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "8388608");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (txn) pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "javabench-" + prefix);
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bs);
        cp.putAll(sec);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "8388608");
        if (txn) cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp);
             KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            if (txn) p.initTransactions();
            for (int r = 0; r <= runs; r++) {
                String topic = prefix + r;
                AtomicLong failed = new AtomicLong();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    if (txn && i % perTxn == 0) p.beginTransaction();
                    p.send(new ProducerRecord<>(topic, pool[(i + 1) % 1000]), (m, e) -> { if (e != null) failed.incrementAndGet(); });
                    if (txn && ((i + 1) % perTxn == 0 || i == n - 1)) p.commitTransaction();
                }
                p.flush();
                long t1 = System.nanoTime();
                if (failed.get() != 0) throw new IllegalStateException(failed.get() + " messages failed");
                if (r > 0) System.out.printf("produce%s\t%d\t%s\t%.0f%n", suffix, size, codec, n / ((t1 - t0) / 1e9));
                long got = 0;
                t0 = System.nanoTime();
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
                c.assign(tps);
                c.seekToBeginning(tps);
                long deadline = System.currentTimeMillis() + 60000;
                while (got < n && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                    got += rs.count();
                }
                t1 = System.nanoTime();
                if (got != n) throw new IllegalStateException("consumed " + got + " of " + n);
                if (r > 0) System.out.printf("consume%s\t%d\t%s\t%.0f%n", suffix, size, codec, got / ((t1 - t0) / 1e9));
                System.out.flush();
            }
        }
    }
    // A group consumer's settings: the bench's fetch tuning (as the end-to-end
    // consumer above), every group setting at its default.
    static Properties groupProps(String bs, String gid, String protocol, boolean commit) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bs);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, gid);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, commit ? "true" : "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "8388608");
        return cp;
    }

    // One group member on its own thread: polls until stopped, keeping its
    // first message's time, its assignment's size and (through progress) the
    // group's highest offset per partition.
    static final class Member extends Thread {
        final Properties props;
        final String topic;
        final Progress progress;
        volatile long joinedNs, firstNs;
        volatile int assigned = -1;
        volatile boolean stop;
        volatile Throwable failure;

        Member(Properties props, String topic, Progress progress) {
            this.props = props;
            this.topic = topic;
            this.progress = progress;
            setDaemon(true);
        }

        public void run() {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                joinedNs = System.nanoTime();
                c.subscribe(List.of(topic));
                while (!stop) {
                    ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                    if (!rs.isEmpty()) {
                        long t = System.nanoTime();
                        if (firstNs == 0) firstNs = t;
                        if (progress != null) {
                            for (TopicPartition tp : rs.partitions()) {
                                List<org.apache.kafka.clients.consumer.ConsumerRecord<byte[], byte[]>> l = rs.records(tp);
                                progress.seen(tp.partition(), l.get(l.size() - 1).offset() + 1, t);
                            }
                        }
                    }
                    assigned = c.assignment().size();
                }
            } catch (Throwable e) {
                failure = e;
            }
        }
    }

    // The group's progress: the highest offset seen per partition; the time
    // the sum of them reached the topic's size (every message seen once).
    static final class Progress {
        final long[] next = new long[1024];
        final long total;
        long seen, doneNs;

        Progress(long total) { this.total = total; }

        synchronized void seen(int p, long nextOffset, long t) {
            if (nextOffset > next[p]) {
                seen += nextOffset - next[p];
                next[p] = nextOffset;
                if (seen == total && doneNs == 0) doneNs = t;
            }
        }

        synchronized long doneNs() { return doneNs; }
    }

    static void check(List<Member> ms) {
        for (Member m : ms) if (m.failure != null) throw new IllegalStateException("a member failed", m.failure);
    }

    static void stopAll(List<Member> ms) throws InterruptedException {
        for (Member m : ms) m.stop = true;
        for (Member m : ms) m.join(60000);
    }

    static void groupBench(String bs, String topic, String prefix, String protocol, long n, int runs, int members,
                           int size, int deadlineS) throws Exception {
        for (int r = 0; r <= runs; r++) {
            Progress pr = new Progress(n);
            List<Member> ms = new ArrayList<>();
            for (int i = 0; i < members; i++)
                ms.add(new Member(groupProps(bs, prefix + protocol + "-" + r, protocol, true), topic, pr));
            try {
                for (Member m : ms) m.start();
                long deadline = System.currentTimeMillis() + deadlineS * 1000L;
                while (pr.doneNs() == 0 && System.currentTimeMillis() < deadline) {
                    check(ms);
                    Thread.sleep(10);
                }
                if (pr.doneNs() == 0) throw new IllegalStateException("group " + protocol + ": " + pr.seen + " of " + n);
            } finally {
                stopAll(ms);
            }
            check(ms);
            long t0 = Long.MAX_VALUE;
            for (Member m : ms) t0 = Math.min(t0, m.joinedNs);
            if (r > 0) System.out.printf("group_%s\t%d\tnone\t%.0f%n", protocol, size, n / ((pr.doneNs() - t0) / 1e9));
            System.out.flush();
        }
    }

    // waits (until the deadline) for cond; fails when a member failed
    static void await(List<Member> ms, long deadline, java.util.function.BooleanSupplier cond, String what)
            throws Exception {
        while (!cond.getAsBoolean()) {
            check(ms);
            if (System.currentTimeMillis() > deadline) {
                StringBuilder b = new StringBuilder();
                for (Member m : ms) b.append(" [owns ").append(m.assigned).append(m.firstNs != 0 ? ", had messages]" : ", no message]");
                throw new IllegalStateException("timed out: " + what + ";" + b);
            }
            Thread.sleep(5);
        }
    }

    static void groupLatency(String bs, String topic, String prefix, String protocol, int parts, int runs, int size,
                             int deadlineS) throws Exception {
        for (int r = 0; r <= runs; r++) {
            String gid = prefix + protocol + "-" + r;
            List<Member> ms = new ArrayList<>();
            try {
                long deadline = System.currentTimeMillis() + deadlineS * 1000L;
                Member first = new Member(groupProps(bs, gid, protocol, false), topic, null);
                ms.add(first);
                first.start();
                await(ms, deadline, () -> first.firstNs != 0, "the first member's first message");
                for (int i = 0; i < 2; i++) {
                    Member m = new Member(groupProps(bs, gid, protocol, false), topic, null);
                    ms.add(m);
                    m.start();
                }
                await(ms, deadline, () -> {
                    for (Member m : ms) if (m.assigned != parts / 3) return false;
                    return true;
                }, "3 members owning " + parts / 3 + " partitions each");
                Member fourth = new Member(groupProps(bs, gid, protocol, false), topic, null);
                ms.add(fourth);
                fourth.start();
                await(ms, deadline, () -> fourth.firstNs != 0, "the 4th member's first message");
                if (r > 0) {
                    System.out.printf("join_first_%s\t%d\tnone\t%.1f%n", protocol, size, (first.firstNs - first.joinedNs) / 1e6);
                    System.out.printf("join_4th_%s\t%d\tnone\t%.1f%n", protocol, size, (fourth.firstNs - fourth.joinedNs) / 1e6);
                }
                System.out.flush();
            } finally {
                stopAll(ms);
            }
        }
    }

    // The consume matrix's settings: throughput as the Kafka client's
    // documentation advises (bigger fetches, fewer round trips; a poll hands
    // over up to 10,000 records; receive.buffer.bytes -1: the OS's auto-tuned
    // socket buffer, bigger than the 64 KiB default on loopback), the rest at
    // its default (check.crcs true; fetch.max.bytes 50 MiB). fetch.min.bytes
    // stays 1: the topic is full before the clock starts, so a minimum never
    // batches more and only holds the last fetches fetch.max.wait.ms (an lz4
    // or zstd topic of the bench's repetitive values is small on disk).
    static Properties consumeProps(String bs, String[] a) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bs);
        if (a.length > 5) {
            if (!a[5].equals("SASL_SSL") || a.length != 9) throw new IllegalArgumentException("expected SASL_SSL CA_PEM USER PASSWORD");
            cp.put("security.protocol", "SASL_SSL");
            cp.put("sasl.mechanism", "SCRAM-SHA-512");
            cp.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + a[7] + "\" password=\"" + a[8] + "\";");
            cp.put("ssl.truststore.type", "PEM");
            cp.put("ssl.truststore.location", a[6]);
        }
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        cp.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "8388608");
        cp.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "52428800");
        cp.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, "-1");
        return cp;
    }

    // the process's peak resident memory (VmHWM, kB), as bench/e2e.lua reads it
    static long vmhwmKb() throws java.io.IOException {
        for (String l : java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/self/status")))
            if (l.startsWith("VmHWM:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        return -1;
    }

    static void consumeBench(String[] a) throws Exception {
        String bs = a[1], topic = a[2];
        long n = Long.parseLong(a[3]);
        int runs = Integer.parseInt(a[4]);
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumeProps(bs, a))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
            for (int r = 0; r <= runs; r++) {
                long got = 0, t0 = System.nanoTime(), cpu0 = os.getProcessCpuTime();
                c.assign(tps);
                // offset 0, as the other clients (a fresh topic: its beginning, without a ListOffsets)
                for (TopicPartition tp : tps) c.seek(tp, 0);
                long deadline = System.currentTimeMillis() + 120000;
                while (got < n && System.currentTimeMillis() < deadline) got += c.poll(Duration.ofMillis(100)).count();
                long t1 = System.nanoTime(), cpu1 = os.getProcessCpuTime();
                if (got != n) throw new IllegalStateException("consumed " + got + " of " + n);
                if (r > 0) System.out.printf("rate\t%.0f\t%.3f%n", n / ((t1 - t0) / 1e9), (double) (cpu1 - cpu0) / (t1 - t0));
                System.out.flush();
                c.assign(List.of());
            }
        }
        System.out.printf("vmhwm\t%d%n", vmhwmKb());
    }
}
