// An independent oracle for the codec (spec/interop_java_codec_spec.lua):
// kafka-clients' own generated message classes write the bytes of bodies
// that the Lua spec defines once, as JSON in the form of Kafka's generated
// *JsonConverter classes.
//
//   java -cp build/kafka/codecpeer-4.4.0:<kafka-clients classpath> CodecPeer cases.json out.txt
//
// cases.json: {"cases": [{"id": "...", "kind": "request" | "response" | "data",
//   "name": "Fetch" (an API) or "ConsumerProtocolSubscription" (a data structure),
//   "key": 1 (APIs), "version": 12, "header": {...} (APIs), "body": {...},
//   "bare": true (data: no int16 version prefix)}, ...]}
//
// out.txt: one line per case, "ID HEX" (requests: the header at the
// version ApiKeys says, then the body; responses likewise; data: the int16
// version then the struct, as MessageUtil.toVersionPrefixedBytes writes,
// or the struct alone when bare) or "ID ERR message"; a case with "ours"
// (the hex of lua-kafka's encoding) also gets "ID~read HEX": Java's classes
// read those bytes (all of them, or ERR) and write what they read again;
// then "DONE".
// Also (stdin-free modes): "murmur2 HEX..." prints Utils.murmur2 of each
// hex argument, one per line; "errors" prints every Errors constant as
// "CODE NAME retriable|fatal" (retriable: its exception is a
// RetriableException); then DONE.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.utils.Utils;

public class CodecPeer {
  private static final String PKG = "org.apache.kafka.common.message.";

  static Message read(String cls, JsonNode node, short version) throws Exception {
    Class<?> conv = Class.forName(PKG + cls + "JsonConverter");
    Method m = conv.getMethod("read", JsonNode.class, short.class);
    try {
      return (Message) m.invoke(null, node, version);
    } catch (InvocationTargetException e) {
      throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
    }
  }

  // The generated class's reading constructor: new cls(readable, version).
  static Message parse(String cls, ByteBuffer buf, short version) throws Exception {
    try {
      return (Message) Class.forName(PKG + cls).getConstructor(Readable.class, short.class)
          .newInstance(new ByteBufferAccessor(buf), version);
    } catch (InvocationTargetException e) {
      throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
    }
  }

  static byte[] write(Message m, short version) {
    ObjectSerializationCache cache = new ObjectSerializationCache();
    int size = m.size(cache, version);
    ByteBuffer buf = ByteBuffer.allocate(size);
    m.write(new ByteBufferAccessor(buf), cache, version);
    if (buf.hasRemaining()) throw new IllegalStateException("size() and write() disagree");
    return buf.array();
  }

  static byte[] concat(byte[] a, byte[] b) {
    byte[] c = new byte[a.length + b.length];
    System.arraycopy(a, 0, c, 0, a.length);
    System.arraycopy(b, 0, c, a.length, b.length);
    return c;
  }

  static String hex(byte[] b) {
    StringBuilder sb = new StringBuilder(b.length * 2);
    for (byte x : b) sb.append(Character.forDigit((x >> 4) & 15, 16)).append(Character.forDigit(x & 15, 16));
    return sb.toString();
  }

  static byte[] unhex(String s) {
    byte[] b = new byte[s.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    return b;
  }

  static byte[] one(JsonNode c) throws Exception {
    String kind = c.get("kind").asText();
    String name = c.get("name").asText();
    short v = (short) c.get("version").asInt();
    JsonNode body = c.get("body");
    if (kind.equals("data")) {
      Message m = read(name, body, v);
      if (c.path("bare").asBoolean(false)) return write(m, v);
      ByteBuffer b = MessageUtil.toVersionPrefixedByteBuffer(v, m);
      byte[] out = new byte[b.remaining()];
      b.get(out);
      return out;
    }
    ApiKeys k = ApiKeys.forId(c.get("key").asInt());
    if (kind.equals("request")) {
      short hv = k.requestHeaderVersion(v);
      byte[] h = write(read("RequestHeaderData", c.get("header"), hv), hv);
      return concat(h, write(read(name + "RequestData", body, v), v));
    }
    short hv = k.responseHeaderVersion(v);
    byte[] h = write(read("ResponseHeaderData", c.get("header"), hv), hv);
    return concat(h, write(read(name + "ResponseData", body, v), v));
  }

  // Reads lua-kafka's bytes of a case with Java's classes (every byte must
  // be taken) and writes what was read again.
  static byte[] reread(JsonNode c) throws Exception {
    String kind = c.get("kind").asText();
    String name = c.get("name").asText();
    short v = (short) c.get("version").asInt();
    ByteBuffer buf = ByteBuffer.wrap(unhex(c.get("ours").asText()));
    byte[] out;
    if (kind.equals("data")) {
      boolean bare = c.path("bare").asBoolean(false);
      short pv = bare ? v : buf.getShort();
      if (pv != v) throw new IllegalStateException("version prefix " + pv + ", not " + v);
      byte[] body = write(parse(name, buf, v), v);
      out = bare ? body : concat(new byte[] {(byte) (v >> 8), (byte) v}, body);
    } else {
      ApiKeys k = ApiKeys.forId(c.get("key").asInt());
      boolean req = kind.equals("request");
      short hv = req ? k.requestHeaderVersion(v) : k.responseHeaderVersion(v);
      String hcls = req ? "RequestHeaderData" : "ResponseHeaderData";
      byte[] h = write(parse(hcls, buf, hv), hv);
      out = concat(h, write(parse(name + (req ? "RequestData" : "ResponseData"), buf, v), v));
    }
    if (buf.hasRemaining()) throw new IllegalStateException(buf.remaining() + " bytes left unread");
    return out;
  }

  public static void main(String[] args) throws Exception {
    if (args.length > 0 && args[0].equals("errors")) {
      for (Errors e : Errors.values()) {
        System.out.println(e.code() + " " + e.name() + " "
            + (e.exception() instanceof RetriableException ? "retriable" : "fatal"));
      }
      System.out.println("DONE");
      return;
    }
    if (args.length > 0 && args[0].equals("murmur2")) {
      for (int i = 1; i < args.length; i++) {
        byte[] key = args[i].equals("~") ? new byte[0] : unhex(args[i]);
        System.out.println(Integer.toUnsignedString(Utils.murmur2(key)) + " " + Utils.toPositive(Utils.murmur2(key)));
      }
      System.out.println("DONE");
      return;
    }
    JsonNode root = new ObjectMapper().readTree(new File(args[0]));
    try (PrintStream out = new PrintStream(new File(args[1]), "UTF-8")) {
      for (JsonNode c : root.get("cases")) {
        String id = c.get("id").asText();
        try {
          out.println(id + " " + hex(one(c)));
        } catch (Exception e) {
          out.println(id + " ERR " + String.valueOf(e).replace('\n', ' '));
        }
        if (c.has("ours")) {
          try {
            out.println(id + "~read " + hex(reread(c)));
          } catch (Exception e) {
            out.println(id + "~read ERR " + String.valueOf(e).replace('\n', ' '));
          }
        }
      }
      out.println("DONE");
    }
    System.out.println("DONE");
  }
}
