// Kafka's Java client as the end-to-end peer of `make bench` against a real
// broker: RUNS+1 rounds in one JVM (round 0 warms up), each producing N
// messages of SIZE bytes to TOPIC_PREFIX<round> (acks=all, linger 5 ms,
// 1 MiB batches, the given codec, idempotence as the Java default) and
// reading them back with one consumer (every partition assigned from the
// start, fetch.max.bytes 50 MB as its default, CRC checks on as default).
// One producer and one consumer serve every round. Prints "produce\tSIZE\tCODEC\trate" and "consume\tSIZE\tCODEC\trate" per
// measured round, as bench/e2e.lua does.
//   java -cp ... JavaBench BOOTSTRAP TOPIC_PREFIX N RUNS SIZE CODEC [SASL_SSL CA_PEM USER PASSWORD]
// With SASL_SSL both clients connect with TLS (the CA as a PEM trust store,
// host name verification on, as default) and SASL SCRAM-SHA-512, and the
// ops are named produce_sasl_ssl / consume_sasl_ssl.
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
        String bs = a[0], prefix = a[1], codec = a[5];
        int n = Integer.parseInt(a[2]), runs = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        Properties sec = new Properties();
        String suffix = "";
        if (a.length > 6) {
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
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bs);
        cp.putAll(sec);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "8388608");
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp);
             KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            for (int r = 0; r <= runs; r++) {
                String topic = prefix + r;
                AtomicLong failed = new AtomicLong();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(topic, pool[(i + 1) % 1000]), (m, e) -> { if (e != null) failed.incrementAndGet(); });
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
}
