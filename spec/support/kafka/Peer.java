// Kafka's own Java client as a peer for the specs (spec/support/realkafka.lua
// compiles it once against kafka-clients and runs it with java -cp).
//
// Every mode prints one line per fact and "DONE" at the end (modes chained
// with "+" in one run: "NEXT" after each); bytes are hex,
// a null key/value/header value is "-", an empty one "~":
//   produce TOPIC N CODEC MODE   MODE: plain | idempotent | txn-commit | txn-abort
//       record i: key "k<i>", value "v<i>-" + 'x' * (i % 7 * 40), header "i" = "<i>",
//       header "n" = null, timestamp 1700000000000 + i, partition by the default partitioner
//       -> ACK partition offset i   (for each record, in send order)
//   consume TOPIC N SECONDS [read_committed]
//       assigns every partition from the beginning, check.crcs on, until N records or the deadline
//       -> REC partition offset timestamp timestamp_type keyhex valuehex hkey=hvalhex,...
//   produce-hang TOPIC N          a transactional producer sends N records (key "h<i>", value "hang<i>") and dies
//       with its transaction open (no commit, abort or close; 15-minute transaction timeout) -> ACK partition offset i
//   partition NPARTS KEYHEX...   -> PART keyhex partition   (the Java client's key placement)
//   murmur2 KEYHEX...            -> MURMUR2 keyhex value     (org.apache.kafka.common.utils.Utils.murmur2)
//   create TOPIC PARTS RF [name=value ...]
//   group TOPIC GROUP PROTOCOL SECS STOPFILE
//       a group member (PROTOCOL: classic:range, classic:cooperative-sticky, consumer:uniform, ...)
//       subscribed to TOPIC, auto commit every second, until SECS pass or STOPFILE exists; then close()
//       -> JOINED, then ASSIGNED p,p,... / REVOKED p,... / LOST p,... (rebalance callbacks, "-" for none)
//          and REC partition offset for each record (FIRST ms: subscribe to the first record); lines are flushed as they are written; the
//          positions of revoked partitions are committed in onPartitionsRevoked
//   share TOPIC GROUP SECS STOPFILE [DELAY_MS]   (needs kafka-clients 4.2+: realkafka compiles it against 4.4.0)
//       a KafkaShareConsumer (explicit acknowledgement) subscribed to TOPIC, accepting every record
//       (DELAY_MS of work on each first), until SECS pass or STOPFILE exists; then close()
//       -> JOINED, then REC partition offset delivery_count for each record, ACKED partition offset... per
//          partition acknowledged (the acknowledgement commit callback), ACKFAIL partition error on failures
//   admin modes (Kafka's AdminClient, the oracle of spec/admin_spec.lua), strings as they are:
//   list-topics                   -> TOPIC name id internal                  (internal ones too)
//   describe-topic TOPIC          -> TOPIC name id internal, then PART p leader replicas isr (ids joined by ",", "-" for none)
//   describe-configs TYPE NAME    -> CFG name source readonly sensitive default synonyms value (TYPE: topic, broker,
//       broker_logger, group; synonyms name:source joined by ",", "-" for none; value "-" for null; every entry, by name)
//   describe-cluster              -> CLUSTER id controller, then BROKER id host port rack
//   list-groups                   -> GROUP id state type (listConsumerGroups)
//   describe-group GROUP          -> GROUP id type state assignor, then MEMBER client_id host instance tps (topic:p joined by ",")
//   list-group-offsets GROUP      -> OFF topic partition offset metadata ("~" for empty)
//   alter-group-offsets GROUP TOPIC P OFFSET...   (pairs P OFFSET)
//   group-lag GROUP               -> LAG topic partition committed end lag  (committed: listConsumerGroupOffsets,
//       end: listOffsets latest; as kafka-consumer-groups --describe)
//   offsets TOPIC SPEC P...       -> OFFSET p offset timestamp  (SPEC: earliest, latest, max_timestamp or a time in ms)
//   create-topic-assign TOPIC P=B,B... [name=value ...]   (a replica assignment)
//   create-partitions TOPIC COUNT
//   delete-records TOPIC P OFFSET -> LOW p low_watermark
//   alter-config TYPE NAME OP name [value]    (OP: set, delete, append, subtract)
//   describe-producers TOPIC P... -> PRODUCER p id epoch last_sequence last_timestamp coordinator_epoch txn_start ("-" for none)
//   list-transactions             -> TXN id producer_id state
//   describe-transaction ID       -> TXN id state producer_id epoch timeout_ms start_ms ("-" for none) tps (topic:p joined by ",")
//   describe-acls                 -> ACL resource_type name pattern_type principal host operation permission (every ACL,
//       Java's enum names, sorted)
//   create-acl TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION   (Java's enum names)
//   describe-scram [USER...]      -> SCRAM user mechanism iterations (every user when none is named; sorted)
//   alter-scram USER MECHANISM ITERATIONS PASSWORD   (an upsertion, Java salting the password)
//   describe-quotas               -> QUOTA entity key value  (every quota; entity: type=[name] or type=<default>,
//       sorted, joined by ","; value with 3 decimals; sorted)
//   alter-quota TYPE NAME KEY VALUE   (NAME "<default>": the default entity; VALUE "-": remove)
//   describe-features             -> EPOCH e ("-" for none), FIN name min max, SUP name min max (sorted)
//   update-feature NAME LEVEL TYPE   (TYPE: UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE)
//   list-reassignments            -> REASSIGN topic p replicas adding removing (ids joined by ",", "-" for none; sorted)
//   describe-log-dirs BROKER TOPIC -> DIR path error total_bytes, then PART path topic p size offset_lag future
//       (the partitions of TOPIC only; error "-" for none; total "-" when unknown)
// -Dbs=host:port,... sets the bootstrap servers, -Dprops=FILE extra client settings.
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Utils;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

public class Peer {
    static Properties base() throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", System.getProperty("bs", "127.0.0.1:9092"));
        String extra = System.getProperty("props");
        if (extra != null) try (var in = new java.io.FileInputStream(extra)) { p.load(in); }
        return p;
    }

    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder s = new StringBuilder(b.length * 2 + 1);
        for (byte x : b) s.append(String.format("%02x", x));
        return s.length() == 0 ? "~" : s.toString();
    }

    static byte[] unhex(String h) {
        if (h.equals("~")) return new byte[0];
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return b;
    }

    static byte[] utf8(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    // Several modes in one JVM (a JVM and kafka-clients take a second to
    // start): "MODE ARGS + MODE ARGS ...", each mode's lines ended by "NEXT".
    public static void main(String[] args) throws Exception {
        boolean chained = List.of(args).contains("+");
        List<String> cmd = new ArrayList<>();
        for (int i = 0; i <= args.length; i++) {
            if (i < args.length && !args[i].equals("+")) { cmd.add(args[i]); continue; }
            run(cmd.toArray(new String[0]));
            if (chained) System.out.println("NEXT");
            cmd.clear();
        }
        System.out.println("DONE");
        System.out.flush();
        System.exit(0);
    }

    static void run(String[] a) throws Exception {
        switch (a[0]) {
            case "produce" -> produce(a[1], Integer.parseInt(a[2]), a[3], a[4]);
            case "produce-hang" -> produceHang(a[1], Integer.parseInt(a[2]));
            case "consume" -> consume(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]), a.length > 4 ? a[4] : "read_uncommitted");
            case "partition" -> {
                int n = Integer.parseInt(a[1]);
                for (int i = 2; i < a.length; i++)
                    System.out.println("PART " + a[i] + " " + Utils.toPositive(Utils.murmur2(unhex(a[i]))) % n);
            }
            case "murmur2" -> {
                for (int i = 1; i < a.length; i++)
                    System.out.println("MURMUR2 " + a[i] + " " + Utils.murmur2(unhex(a[i])));
            }
            case "create" -> {
                Map<String, String> cfg = new HashMap<>();
                for (int i = 4; i < a.length; i++) { String[] kv = a[i].split("=", 2); cfg.put(kv[0], kv[1]); }
                try (Admin admin = Admin.create(base())) {
                    admin.createTopics(List.of(new NewTopic(a[1], Integer.parseInt(a[2]), Short.parseShort(a[3])).configs(cfg))).all().get();
                }
            }
            case "group" -> group(a[1], a[2], a[3], Integer.parseInt(a[4]), a[5]);
            case "share" -> ShareMode.share(a[1], a[2], Integer.parseInt(a[3]), a[4], a.length > 5 ? Integer.parseInt(a[5]) : 0);
            case "list-topics", "describe-topic", "describe-configs", "describe-cluster", "list-groups", "describe-group",
                 "list-group-offsets", "alter-group-offsets", "group-lag", "offsets", "create-topic-assign",
                 "create-partitions", "delete-records", "alter-config", "describe-producers", "list-transactions",
                 "describe-transaction", "describe-acls", "create-acl", "describe-scram", "alter-scram",
                 "describe-quotas", "alter-quota", "describe-features", "update-feature", "describe-log-dirs",
                 "list-reassignments" -> {
                try (Admin admin = Admin.create(base())) { AdminModes.run(admin, a); }
            }
            default -> throw new IllegalArgumentException("unknown mode " + a[0]);
        }
    }

    static void produce(String topic, int n, String codec, String mode) throws Exception {
        Properties p = base();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, mode.equals("plain") ? "false" : "true");
        if (mode.startsWith("txn")) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "peer-" + topic + "-" + mode);
        try (KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p)) {
            if (mode.startsWith("txn")) { pr.initTransactions(); pr.beginTransaction(); }
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, null, 1700000000000L + i,
                    utf8("k" + i), utf8("v" + i + "-" + "x".repeat(i % 7 * 40)));
                r.headers().add("i", utf8(Integer.toString(i)));
                r.headers().add("n", null);
                acks.add(pr.send(r));
            }
            if (mode.equals("txn-commit")) pr.commitTransaction();
            else if (mode.equals("txn-abort")) { pr.flush(); pr.abortTransaction(); }
            else pr.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata m = acks.get(i).get();
                System.out.println("ACK " + m.partition() + " " + m.offset() + " " + i);
            }
        }
    }

    // a transactional producer that dies (halt: no commit, no abort, no close) with its transaction open;
    // its 15-minute transaction timeout keeps the coordinator from aborting it during a test
    static void produceHang(String topic, int n) throws Exception {
        Properties p = base();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "peer-hang-" + topic);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "900000");
        KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p);
        pr.initTransactions();
        pr.beginTransaction();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        for (int i = 0; i < n; i++) acks.add(pr.send(new ProducerRecord<>(topic, null, utf8("h" + i), utf8("hang" + i))));
        pr.flush();
        for (int i = 0; i < n; i++) {
            RecordMetadata m = acks.get(i).get();
            System.out.println("ACK " + m.partition() + " " + m.offset() + " " + i);
        }
        System.out.println("DONE");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    static void consume(String topic, int n, int secs, String isolation) throws Exception {
        Properties p = base();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            long end = System.currentTimeMillis() + secs * 1000L;
            int got = 0;
            while (got < n && System.currentTimeMillis() < end) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    StringBuilder h = new StringBuilder();
                    for (Header x : r.headers()) {
                        if (h.length() > 0) h.append(',');
                        h.append(hex(x.key().getBytes(StandardCharsets.UTF_8))).append('=').append(hex(x.value()));
                    }
                    System.out.println("REC " + r.partition() + " " + r.offset() + " " + r.timestamp() + " "
                        + r.timestampType().id + " " + hex(r.key()) + " " + hex(r.value()) + " " + (h.length() == 0 ? "." : h));
                    got++;
                }
            }
        }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String parts(java.util.Collection<TopicPartition> tps) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        java.util.Collections.sort(ps);
        StringBuilder b = new StringBuilder();
        for (int x : ps) { if (b.length() > 0) b.append(','); b.append(x); }
        return b.length() == 0 ? "-" : b.toString();
    }

    static void group(String topic, String groupId, String protocol, int secs, String stopFile) throws Exception {
        Properties p = base();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "true");
        p.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "1000");
        String[] pr = protocol.split(":", 2);
        p.put("group.protocol", pr[0]);
        if (pr[0].equals("classic")) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, pr[1].equals("range")
                ? "org.apache.kafka.clients.consumer.RangeAssignor"
                : pr[1].equals("roundrobin") ? "org.apache.kafka.clients.consumer.RoundRobinAssignor"
                : "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        } else if (pr.length > 1) {
            p.put("group.remote.assignor", pr[1]);
        }
        java.io.File stop = new java.io.File(stopFile);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic), new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> tps) {
                    // the positions of what is given up, committed before it moves (auto commit
                    // alone commits before the rebalance, not what was fetched during it)
                    Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offs = new HashMap<>();
                    for (TopicPartition tp : tps) offs.put(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(c.position(tp)));
                    // (the consumer protocol's Java client may answer STALE_MEMBER_EPOCH here: its
                    // auto commit before the revocation has committed them then)
                    try { if (!offs.isEmpty()) c.commitSync(offs); }
                    catch (org.apache.kafka.common.KafkaException e) { say("COMMITFAIL " + e.getClass().getSimpleName()); }
                    say("REVOKED " + parts(tps));
                }
                public void onPartitionsAssigned(java.util.Collection<TopicPartition> tps) { say("ASSIGNED " + parts(tps)); }
                public void onPartitionsLost(java.util.Collection<TopicPartition> tps) { say("LOST " + parts(tps)); }
            });
            say("JOINED");
            long start = System.currentTimeMillis(), end = start + secs * 1000L;
            boolean first = true;
            while (System.currentTimeMillis() < end && !stop.exists()) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    if (first) { say("FIRST " + (System.currentTimeMillis() - start)); first = false; }
                    say("REC " + r.partition() + " " + r.offset());
                }
            }
        }
    }
}

// Kafka's AdminClient as the oracle of spec/admin_spec.lua (the modes listed at the top).
@SuppressWarnings("deprecation")
class AdminModes {
    static String ids(java.util.Collection<org.apache.kafka.common.Node> nodes) {
        StringBuilder b = new StringBuilder();
        for (org.apache.kafka.common.Node n : nodes) { if (b.length() > 0) b.append(','); b.append(n.id()); }
        return b.length() == 0 ? "-" : b.toString();
    }

    static String joined(List<Integer> ids) {
        if (ids.isEmpty()) return "-";
        List<String> s = new ArrayList<>();
        for (Integer i : ids) s.add(i.toString());
        return String.join(",", s);
    }

    static org.apache.kafka.common.config.ConfigResource resource(String type, String name) {
        var t = switch (type) {
            case "topic" -> org.apache.kafka.common.config.ConfigResource.Type.TOPIC;
            case "broker" -> org.apache.kafka.common.config.ConfigResource.Type.BROKER;
            case "broker_logger" -> org.apache.kafka.common.config.ConfigResource.Type.BROKER_LOGGER;
            case "group" -> org.apache.kafka.common.config.ConfigResource.Type.GROUP;
            default -> throw new IllegalArgumentException("resource type " + type);
        };
        return new org.apache.kafka.common.config.ConfigResource(t, name);
    }

    static org.apache.kafka.clients.admin.OffsetSpec spec(String s) {
        return switch (s) {
            case "earliest" -> org.apache.kafka.clients.admin.OffsetSpec.earliest();
            case "latest" -> org.apache.kafka.clients.admin.OffsetSpec.latest();
            case "max_timestamp" -> org.apache.kafka.clients.admin.OffsetSpec.maxTimestamp();
            default -> org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(Long.parseLong(s));
        };
    }

    static void run(Admin admin, String[] a) throws Exception {
        switch (a[0]) {
            case "list-topics" -> {
                var names = admin.listTopics(new org.apache.kafka.clients.admin.ListTopicsOptions().listInternal(true)).listings().get();
                List<String> lines = new ArrayList<>();
                for (var l : names) lines.add("TOPIC " + l.name() + " " + l.topicId() + " " + l.isInternal());
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "describe-topic" -> {
                var d = admin.describeTopics(List.of(a[1])).allTopicNames().get().get(a[1]);
                System.out.println("TOPIC " + d.name() + " " + d.topicId() + " " + d.isInternal());
                for (var p : d.partitions())
                    System.out.println("PART " + p.partition() + " " + (p.leader() == null ? -1 : p.leader().id()) + " "
                        + ids(p.replicas()) + " " + ids(p.isr()));
            }
            case "describe-configs" -> {
                var r = resource(a[1], a[2]);
                var cfg = admin.describeConfigs(List.of(r), new org.apache.kafka.clients.admin.DescribeConfigsOptions()
                    .includeSynonyms(true)).all().get().get(r);
                List<String> lines = new ArrayList<>();
                for (var e : cfg.entries()) {
                    StringBuilder syn = new StringBuilder();
                    for (var s : e.synonyms()) { if (syn.length() > 0) syn.append(','); syn.append(s.name()).append(':').append(s.source()); }
                    lines.add("CFG " + e.name() + " " + e.source() + " " + e.isReadOnly() + " " + e.isSensitive() + " "
                        + e.isDefault() + " " + (syn.length() == 0 ? "-" : syn) + " " + (e.value() == null ? "-" : e.value()));
                }
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "describe-cluster" -> {
                var c = admin.describeCluster();
                System.out.println("CLUSTER " + c.clusterId().get() + " " + c.controller().get().id());
                List<org.apache.kafka.common.Node> nodes = new ArrayList<>(c.nodes().get());
                nodes.sort(java.util.Comparator.comparingInt(org.apache.kafka.common.Node::id));
                for (var n : nodes) System.out.println("BROKER " + n.id() + " " + n.host() + " " + n.port() + " " + (n.rack() == null ? "-" : n.rack()));
            }
            case "list-groups" -> {
                List<String> lines = new ArrayList<>();
                for (var g : admin.listConsumerGroups().all().get())
                    lines.add("GROUP " + g.groupId() + " " + g.state().map(Object::toString).orElse("-") + " "
                        + g.type().map(t -> t.toString().toLowerCase()).orElse("-"));
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "describe-group" -> {
                var g = admin.describeConsumerGroups(List.of(a[1])).all().get().get(a[1]);
                System.out.println("GROUP " + g.groupId() + " " + g.type().toString().toLowerCase() + " " + g.state() + " " + g.partitionAssignor());
                List<String> lines = new ArrayList<>();
                for (var m : g.members()) {
                    List<String> tps = new ArrayList<>();
                    for (TopicPartition tp : m.assignment().topicPartitions()) tps.add(tp.topic() + ":" + tp.partition());
                    java.util.Collections.sort(tps);
                    lines.add("MEMBER " + m.clientId() + " " + m.host() + " " + m.groupInstanceId().orElse("-") + " "
                        + (tps.isEmpty() ? "-" : String.join(",", tps)));
                }
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "list-group-offsets" -> {
                var offs = admin.listConsumerGroupOffsets(a[1]).partitionsToOffsetAndMetadata().get();
                List<String> lines = new ArrayList<>();
                for (var e : offs.entrySet())
                    lines.add("OFF " + e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset() + " "
                        + (e.getValue().metadata().isEmpty() ? "~" : e.getValue().metadata()));
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "alter-group-offsets" -> {
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> m = new HashMap<>();
                for (int i = 3; i + 1 < a.length; i += 2)
                    m.put(new TopicPartition(a[2], Integer.parseInt(a[i])), new org.apache.kafka.clients.consumer.OffsetAndMetadata(Long.parseLong(a[i + 1])));
                admin.alterConsumerGroupOffsets(a[1], m).all().get();
            }
            case "group-lag" -> {
                var offs = admin.listConsumerGroupOffsets(a[1]).partitionsToOffsetAndMetadata().get();
                Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> q = new HashMap<>();
                for (TopicPartition tp : offs.keySet()) q.put(tp, org.apache.kafka.clients.admin.OffsetSpec.latest());
                var ends = admin.listOffsets(q).all().get();
                List<String> lines = new ArrayList<>();
                for (var e : offs.entrySet()) {
                    long end = ends.get(e.getKey()).offset();
                    lines.add("LAG " + e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset() + " " + end + " " + (end - e.getValue().offset()));
                }
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "offsets" -> {
                Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> q = new HashMap<>();
                for (int i = 3; i < a.length; i++) q.put(new TopicPartition(a[1], Integer.parseInt(a[i])), spec(a[2]));
                var r = admin.listOffsets(q).all().get();
                for (int i = 3; i < a.length; i++) {
                    var x = r.get(new TopicPartition(a[1], Integer.parseInt(a[i])));
                    System.out.println("OFFSET " + a[i] + " " + x.offset() + " " + x.timestamp());
                }
            }
            case "create-topic-assign" -> {
                Map<Integer, List<Integer>> asg = new HashMap<>();
                Map<String, String> cfg = new HashMap<>();
                for (int i = 2; i < a.length; i++) {
                    String[] kv = a[i].split("=", 2);
                    if (kv[0].matches("\\d+")) {
                        List<Integer> bs = new ArrayList<>();
                        for (String b : kv[1].split(",")) bs.add(Integer.parseInt(b));
                        asg.put(Integer.parseInt(kv[0]), bs);
                    } else cfg.put(kv[0], kv[1]);
                }
                admin.createTopics(List.of(new NewTopic(a[1], asg).configs(cfg))).all().get();
            }
            case "create-partitions" ->
                admin.createPartitions(Map.of(a[1], org.apache.kafka.clients.admin.NewPartitions.increaseTo(Integer.parseInt(a[2])))).all().get();
            case "delete-records" -> {
                TopicPartition tp = new TopicPartition(a[1], Integer.parseInt(a[2]));
                var r = admin.deleteRecords(Map.of(tp, org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(Long.parseLong(a[3]))))
                    .lowWatermarks().get(tp).get();
                System.out.println("LOW " + a[2] + " " + r.lowWatermark());
            }
            case "alter-config" -> {
                var r = resource(a[1], a[2]);
                var op = org.apache.kafka.clients.admin.AlterConfigOp.OpType.valueOf(a[3].toUpperCase());
                var e = new org.apache.kafka.clients.admin.ConfigEntry(a[4], a.length > 5 ? a[5] : null);
                admin.incrementalAlterConfigs(Map.of(r, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(e, op)))).all().get();
            }
            case "describe-producers" -> {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 2; i < a.length; i++) tps.add(new TopicPartition(a[1], Integer.parseInt(a[i])));
                var all = admin.describeProducers(tps).all().get();
                for (TopicPartition tp : tps) {
                    List<String> lines = new ArrayList<>();
                    for (var st : all.get(tp).activeProducers())
                        lines.add("PRODUCER " + tp.partition() + " " + st.producerId() + " " + st.producerEpoch() + " " + st.lastSequence() + " "
                            + st.lastTimestamp() + " " + (st.coordinatorEpoch().isPresent() ? st.coordinatorEpoch().getAsInt() : "-") + " "
                            + (st.currentTransactionStartOffset().isPresent() ? st.currentTransactionStartOffset().getAsLong() : "-"));
                    java.util.Collections.sort(lines);
                    for (String l : lines) System.out.println(l);
                }
            }
            case "list-transactions" -> {
                List<String> lines = new ArrayList<>();
                for (var t : admin.listTransactions().all().get())
                    lines.add("TXN " + t.transactionalId() + " " + t.producerId() + " " + t.state());
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "describe-transaction" -> {
                var d = admin.describeTransactions(List.of(a[1])).all().get().get(a[1]);
                List<String> tps = new ArrayList<>();
                for (TopicPartition tp : d.topicPartitions()) tps.add(tp.topic() + ":" + tp.partition());
                java.util.Collections.sort(tps);
                System.out.println("TXN " + a[1] + " " + d.state() + " " + d.producerId() + " " + d.producerEpoch() + " "
                    + d.transactionTimeoutMs() + " " + (d.transactionStartTimeMs().isPresent() ? d.transactionStartTimeMs().getAsLong() : "-")
                    + " " + (tps.isEmpty() ? "-" : String.join(",", tps)));
            }
            case "describe-acls" -> {
                List<String> lines = new ArrayList<>();
                for (var b : admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get())
                    lines.add("ACL " + b.pattern().resourceType() + " " + b.pattern().name() + " " + b.pattern().patternType() + " "
                        + b.entry().principal() + " " + b.entry().host() + " " + b.entry().operation() + " " + b.entry().permissionType());
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "create-acl" -> {
                var pat = new org.apache.kafka.common.resource.ResourcePattern(org.apache.kafka.common.resource.ResourceType.valueOf(a[1]),
                    a[2], org.apache.kafka.common.resource.PatternType.valueOf(a[3]));
                var e = new org.apache.kafka.common.acl.AccessControlEntry(a[4], a[5], org.apache.kafka.common.acl.AclOperation.valueOf(a[6]),
                    org.apache.kafka.common.acl.AclPermissionType.valueOf(a[7]));
                admin.createAcls(List.of(new org.apache.kafka.common.acl.AclBinding(pat, e))).all().get();
            }
            case "describe-scram" -> {
                var r = a.length > 1 ? admin.describeUserScramCredentials(List.of(a).subList(1, a.length)) : admin.describeUserScramCredentials();
                List<String> lines = new ArrayList<>();
                for (var d : r.all().get().values())
                    for (var ci : d.credentialInfos()) lines.add("SCRAM " + d.name() + " " + ci.mechanism().mechanismName() + " " + ci.iterations());
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "alter-scram" -> {
                var m = org.apache.kafka.clients.admin.ScramMechanism.fromMechanismName(a[2]);
                admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(a[1],
                    new org.apache.kafka.clients.admin.ScramCredentialInfo(m, Integer.parseInt(a[3])), a[4]))).all().get();
            }
            case "describe-quotas" -> {
                List<String> lines = new ArrayList<>();
                var all = admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get();
                for (var e : all.entrySet()) {
                    List<String> parts = new ArrayList<>();
                    for (var en : e.getKey().entries().entrySet())
                        parts.add(en.getKey() + "=" + (en.getValue() == null ? "<default>" : "[" + en.getValue() + "]"));
                    java.util.Collections.sort(parts);
                    for (var v : e.getValue().entrySet())
                        lines.add("QUOTA " + String.join(",", parts) + " " + v.getKey() + " " + String.format(java.util.Locale.ROOT, "%.3f", v.getValue()));
                }
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "alter-quota" -> {
                Map<String, String> ent = new HashMap<>();
                ent.put(a[1], a[2].equals("<default>") ? null : a[2]);
                var op = new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(a[3], a[4].equals("-") ? null : Double.parseDouble(a[4]));
                admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(
                    new org.apache.kafka.common.quota.ClientQuotaEntity(ent), List.of(op)))).all().get();
            }
            case "describe-features" -> {
                var f = admin.describeFeatures().featureMetadata().get();
                System.out.println("EPOCH " + (f.finalizedFeaturesEpoch().isPresent() ? f.finalizedFeaturesEpoch().get() : "-"));
                List<String> lines = new ArrayList<>();
                for (var e : f.finalizedFeatures().entrySet())
                    lines.add("FIN " + e.getKey() + " " + e.getValue().minVersionLevel() + " " + e.getValue().maxVersionLevel());
                for (var e : f.supportedFeatures().entrySet())
                    lines.add("SUP " + e.getKey() + " " + e.getValue().minVersion() + " " + e.getValue().maxVersion());
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            case "update-feature" -> admin.updateFeatures(Map.of(a[1], new org.apache.kafka.clients.admin.FeatureUpdate(
                Short.parseShort(a[2]), org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.valueOf(a[3]))),
                new org.apache.kafka.clients.admin.UpdateFeaturesOptions()).all().get();
            case "describe-log-dirs" -> {
                int broker = Integer.parseInt(a[1]);
                var dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get().get(broker);
                List<String> names = new ArrayList<>(dirs.keySet());
                java.util.Collections.sort(names);
                for (String path : names) {
                    var d = dirs.get(path);
                    System.out.println("DIR " + path + " " + (d.error() == null ? "-" : org.apache.kafka.common.protocol.Errors.forException(d.error()).name()) + " "
                        + (d.totalBytes().isPresent() ? d.totalBytes().getAsLong() : "-"));
                    List<String> lines = new ArrayList<>();
                    for (var e : d.replicaInfos().entrySet())
                        if (e.getKey().topic().equals(a[2]))
                            lines.add("PART " + path + " " + e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().size()
                                + " " + e.getValue().offsetLag() + " " + e.getValue().isFuture());
                    java.util.Collections.sort(lines);
                    for (String l : lines) System.out.println(l);
                }
            }
            case "list-reassignments" -> {
                List<String> lines = new ArrayList<>();
                for (var e : admin.listPartitionReassignments().reassignments().get().entrySet()) {
                    var r = e.getValue();
                    lines.add("REASSIGN " + e.getKey().topic() + " " + e.getKey().partition() + " " + joined(r.replicas()) + " "
                        + joined(r.addingReplicas()) + " " + joined(r.removingReplicas()));
                }
                java.util.Collections.sort(lines);
                for (String l : lines) System.out.println(l);
            }
            default -> throw new IllegalArgumentException("unknown admin mode " + a[0]);
        }
    }
}

// The share mode: Kafka's KafkaShareConsumer (KIP-932) beside lua-kafka's share consumers.
class ShareMode {
    static void share(String topic, String groupId, int secs, String stopFile, int delayMs) throws Exception {
        Properties p = Peer.base();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put("share.acknowledgement.mode", "explicit");
        java.io.File stop = new java.io.File(stopFile);
        try (org.apache.kafka.clients.consumer.KafkaShareConsumer<byte[], byte[]> c =
                 new org.apache.kafka.clients.consumer.KafkaShareConsumer<>(p)) {
            c.setAcknowledgementCommitCallback((offsets, ex) -> {
                for (var e : offsets.entrySet()) {
                    StringBuilder b = new StringBuilder();
                    for (Long o : new java.util.TreeSet<>(e.getValue())) b.append(' ').append(o);
                    if (ex == null) Peer.say("ACKED " + e.getKey().partition() + b);
                    else Peer.say("ACKFAIL " + e.getKey().partition() + " " + ex.getClass().getSimpleName());
                }
            });
            c.subscribe(List.of(topic));
            Peer.say("JOINED");
            long end = System.currentTimeMillis() + secs * 1000L;
            while (System.currentTimeMillis() < end && !stop.exists()) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    Peer.say("REC " + r.partition() + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1));
                    if (delayMs > 0) Thread.sleep(delayMs);
                    c.acknowledge(r, org.apache.kafka.clients.consumer.AcknowledgeType.ACCEPT);
                }
                c.commitSync();
            }
        }
    }
}
