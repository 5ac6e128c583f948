-- kafka.bytes and the inbox (csrc/lua_bytes.c): frames read with readv()
-- from a luasocket descriptor straight into their own memory, and views
-- into them that the decoders take like strings. The peer is a luasocket
-- server socket in this process; what it writes, and when, is up to each
-- test.
local socket = require "socket"
local proto = require "kafka.proto"
local ksocket = require "kafka.socket"
local H = require "support.helpers"

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- a frame as a broker writes it: size, correlation id, body
local function frame(corr, body)
  return be32(4 + #body) .. be32(corr) .. body
end

-- a connected pair: our luasocket wrapper (with its inbox) and the peer
local function pair()
  local srv = assert(socket.bind("127.0.0.1", 0))
  local _, port = srv:getsockname()
  local s = assert(ksocket.luasocket_tcp())
  s:settimeout(1000)
  assert(s:connect("127.0.0.1", port))
  srv:settimeout(1)
  local peer = assert(srv:accept())
  srv:close()
  peer:setoption("tcp-nodelay", true)
  return s, peer
end

-- writes all of data and lets it arrive
local function put(peer, data)
  assert(peer:send(data) == #data)
  socket.sleep(0.02)
end

describe("kafka.inbox", function()
  local s, peer
  before_each(function() s, peer = pair() end)
  after_each(function()
    s:close()
    peer:close()
  end)

  it("plain luasocket connections read through an inbox", function()
    assert.is_not_nil(s.inbox)
    assert.are.equal("function", type(s.read_frame))
  end)

  it("its descriptor is close-on-exec: a program started here does not hold the connection", function()
    local files = H.open_files("self")
    local function file_of(fd)
      for what, n in pairs(files) do if n == fd then return what end end
    end
    local mine, theirs = file_of(s.sock:getfd()), file_of(peer:getfd())
    assert.is_not_nil(mine, "no /proc entry for the connection")
    assert.is_not_nil(theirs, "no /proc entry for the peer")
    -- a child: `ls` lists what it inherited (glibc's popen closes only
    -- other popen streams); the peer is plain luasocket, inherited
    local child = H.open_files_of_child()
    assert.is_nil(child[mine], mine .. " inherited by a child")
    assert.is_not_nil(child[theirs], "the check sees an inherited socket")
  end)

  it("a frame split at every byte: a timeout keeps what was read, the next call goes on", function()
    local bytes = frame(7, "abcdefghi")
    for cut = 1, #bytes - 1 do
      put(peer, bytes:sub(1, cut))
      local corr, err, started = s:read_frame(0, 1000)
      assert.is_nil(corr)
      assert.are.equal("timeout", err)
      assert.is_true(started)
      put(peer, bytes:sub(cut + 1))
      local f
      corr, f = s:read_frame(0, 1000)
      assert.are.equal(7, corr)
      assert.are.equal("abcdefghi", tostring(f))
      assert.are.equal(9, #f)
    end
  end)

  it("frames written at once come out one by one, one larger than the read-ahead among them", function()
    local big = ("0123456789"):rep(20000) -- 200,000 bytes: the read-ahead holds 65,536
    put(peer, frame(1, "one") .. frame(2, big) .. frame(3, "") .. frame(4, "four"))
    local got = {}
    for _ = 1, 4 do
      local corr, f = s:read_frame(1000, 1000000)
      got[#got + 1] = { corr, tostring(f) }
    end
    assert.are.same({ { 1, "one" }, { 2, big }, { 3, "" }, { 4, "four" } }, got)
    local corr, err, started = s:read_frame(0, 1000)
    assert.is_nil(corr)
    assert.are.equal("timeout", err)
    assert.is_false(started)
  end)

  it("a wrong correlation id takes nothing of the frame: a next call may accept it", function()
    put(peer, frame(9, "late") .. frame(10, "mine"))
    local ok, size, corr = s:read_frame(0, 1000, 10)
    assert.are.equal(false, ok)
    assert.are.equal(8, size)
    assert.are.equal(9, corr)
    local c, f = s:read_frame(0, 1000, 9)
    assert.are.equal(9, c)
    assert.are.equal("late", tostring(f))
    c, f = s:read_frame(0, 1000, 10)
    assert.are.equal(10, c)
    assert.are.equal("mine", tostring(f))
  end)

  it("a size prefix below 4 or above the cap is refused before anything is allocated", function()
    put(peer, be32(3)) -- a frame too short may end with its size: nothing to wait for
    local ok, size, corr = s:read_frame(0, 1000)
    assert.are.equal(false, ok)
    assert.are.equal(3, size)
    assert.is_nil(corr)
    local s2, peer2 = pair()
    put(peer2, be32(1001) .. be32(1))
    ok, size = s2:read_frame(0, 1000)
    assert.are.equal(false, ok)
    assert.are.equal(1001, size)
    s2:close()
    peer2:close()
  end)

  it("a close mid-frame and a close between frames", function()
    put(peer, frame(1, "whole") .. frame(2, "cut"):sub(1, 9))
    local corr, f = s:read_frame(0, 1000)
    assert.are.equal(1, corr)
    assert.are.equal("whole", tostring(f))
    peer:close()
    local err, started
    corr, err, started = s:read_frame(1000, 1000)
    assert.is_nil(corr)
    assert.are.equal("closed", err)
    assert.is_true(started)
    local s2, peer2 = pair()
    peer2:close()
    corr, err, started = s2:read_frame(1000, 1000)
    assert.is_nil(corr)
    assert.are.equal("closed", err)
    assert.is_false(started)
    s2:close()
  end)

  it("a TLS record where the first size should be: a plaintext client on a TLS listener", function()
    put(peer, "\22\3\3\0\90" .. ("x"):rep(90))
    local corr, err, started = s:read_frame(0, 1000)
    assert.is_nil(corr)
    assert.matches("answered with TLS", err)
    assert.is_false(started)
    assert.are.equal(err, ksocket.tls_error(s))
  end)

  it("receive(n) and frames share the read-ahead, in order", function()
    put(peer, "abc" .. frame(5, "five") .. "xyz")
    assert.are.equal("abc", s:receive(3))
    local corr, f = s:read_frame(0, 1000)
    assert.are.equal(5, corr)
    assert.are.equal("five", tostring(f))
    s:settimeout(0)
    local data, err, partial = s:receive(5)
    assert.is_nil(data)
    assert.are.equal("timeout", err)
    assert.are.equal("xyz", partial)
  end)

  it("a wait has its deadline", function()
    local t0 = socket.gettime()
    local corr, err = s:read_frame(150, 1000)
    local took = socket.gettime() - t0
    assert.is_nil(corr)
    assert.are.equal("timeout", err)
    assert.is_true(took >= 0.14 and took < 1, "waited " .. took .. " s")
  end)

  it("a released frame is read into again; views into it made before raise", function()
    local a, b, c = ("a"):rep(100000), ("b"):rep(90000), ("c"):rep(300000)
    put(peer, frame(1, a))
    local corr, f1 = s:read_frame(1000, 1000000)
    assert.are.equal(1, corr)
    local v = proto.bytes(f1, 1, 10)
    local vv = proto.bytes(v, 2, 3) -- a view of a view lies in the same frame
    assert.are.equal("aa", tostring(vv))
    assert.is_true(proto.release(vv))
    assert.are.equal(0, #f1)
    assert.is_false(proto.release(v)) -- once
    assert.is_false(proto.release(f1))
    for _, stale in ipairs { v, vv } do
      assert.has_error(function() proto.decode_records(stale) end,
        "kafka.bytes: the frame this view lies in was released (proto.release) and reused")
      assert.has_error(function() return #stale end)
      assert.has_error(function() return tostring(stale) end)
    end
    -- the next frame that fits goes into the same memory, one too big does not
    put(peer, frame(2, b) .. frame(3, c))
    local _, f2 = s:read_frame(1000, 1000000)
    assert.is_true(rawequal(f1, f2))
    assert.are.equal(b, tostring(f2))
    local v2 = proto.bytes(f2, 89991)
    assert.are.equal(("b"):rep(10), tostring(v2))
    assert.is_true(proto.release(v2))
    local _, f3 = s:read_frame(1000, 1000000)
    assert.is_false(rawequal(f1, f3))
    assert.are.equal(c, tostring(f3))
    -- a frame far smaller than the one kept is not read into it
    assert.is_true(proto.release(f3))
    put(peer, frame(4, ("d"):rep(70000)))
    local _, f4 = s:read_frame(1000, 1000000)
    assert.is_false(rawequal(f3, f4))
    assert.are.equal(("d"):rep(70000), tostring(f4))
    -- nothing to release: bytes in a string, a small frame
    assert.is_false(proto.release(proto.bytes("abc")))
    put(peer, frame(5, "small"))
    local _, f5 = s:read_frame(1000, 1000000)
    assert.is_false(proto.release(f5))
    assert.are.equal("small", tostring(f5))
    -- a decode's rest (max_records) into a released frame raises too
    local msgs = {}
    for i = 1, 1000 do msgs[i] = ("m%04d"):format(i) .. ("z"):rep(100) end
    local recs = proto.encode_records(msgs, { compression = "lz4" })
    put(peer, frame(6, recs .. ("p"):rep(70000)))
    local _, f6 = s:read_frame(1000, 1000000)
    local m, info = proto.decode_records(proto.bytes(f6, 1, #recs), { max_records = 10 })
    assert.are.equal(10, #m)
    assert.are.equal(msgs[10], m[10].value)
    local m2 = proto.decode_records(info.rest, { max_records = 10 })
    assert.are.equal(msgs[11], m2[1].value)
    assert.is_true(proto.release(f6))
    assert.has_error(function() proto.decode_records(info.rest) end,
      "kafka.bytes: the frame this view lies in was released (proto.release) and reused")
  end)

  it("TLS turns it off; direct_reads = false leaves luasocket's own reads", function()
    ksocket.direct_reads = false
    local ok, s2, peer2 = pcall(pair)
    ksocket.direct_reads = true
    assert(ok, s2)
    assert.is_nil(s2.inbox)
    assert.is_nil(s2.read_frame)
    s2:close()
    peer2:close()
  end)
end)

describe("kafka.bytes", function()
  -- records from kafka-python's encoder would need python here; these are
  -- ours, compared through two paths that share no bytes: a string and a
  -- view into a longer string
  local recs = proto.encode_records({ { value = "v1", key = "k1", timestamp = 1 }, { value = "v2", timestamp = 2 } },
    { compression = "none" })

  it("a view decodes as the string it views", function()
    local host = "junk" .. recs .. "tail"
    local v = proto.bytes(host, 5, 4 + #recs)
    assert.are.equal(#recs, #v)
    assert.are.equal(recs, tostring(v))
    local a, ai = proto.decode_records(recs)
    local b, bi = proto.decode_records(v)
    assert.are.same(a, b)
    assert.are.same(ai, bi)
    assert.are.same({ proto.records_end(recs) }, { proto.records_end(v) })
    assert.are.same(proto.decode_columns(recs), proto.decode_columns(v))
  end)

  it("raw_records = \"view\": views into the frame, the bytes raw_records = true copies", function()
    local body = { responses = { { topic = "t", partitions = {
      { partition_index = 0, high_watermark = 2, records = recs },
      { partition_index = 1, high_watermark = 0, records = "" } } } } }
    local f = proto.encode_response("Fetch", 11, 3, body)
    local _, strings = proto.decode_response("Fetch", 11, f, { raw_records = true })
    local _, views = proto.decode_response("Fetch", 11, f, { raw_records = "view" })
    f = nil -- luacheck: ignore (the views keep the frame alive)
    collectgarbage()
    collectgarbage()
    for i = 1, 2 do
      local sv, vv = strings.responses[1].partitions[i].records, views.responses[1].partitions[i].records
      assert.are.equal("string", type(sv))
      assert.are.equal("userdata", type(vv))
      assert.are.equal(sv, tostring(vv))
    end
    assert.are.equal(recs, tostring(views.responses[1].partitions[1].records))
    assert.has_error(function() proto.decode_response("Fetch", 11, "", { raw_records = "copy" }) end)
  end)

  it("anything else is misuse", function()
    assert.has_error(function() proto.decode_records({}) end)
    assert.has_error(function() proto.decode_records(io.stdout) end)
  end)
end)

-- A Produce frame in pieces (encode_request's gather option): the frame's
-- own bytes, and between them the uncompressed builders' records, written
-- from the builders' memory by the inbox with sendmsg(). The other side
-- reads plain bytes; kafka-python reads the batches (it checks their CRCs).
describe("kafka.outframe", function()
  local s, peer
  before_each(function() s, peer = pair() end)
  after_each(function()
    s:close()
    peer:close()
  end)

  local function messages(n, tag)
    local t = {}
    for i = 1, n do
      t[i] = { key = i % 3 == 0 and nil or (tag .. i), value = (tag .. "-value-%04d "):format(i):rep(i % 7 + 1),
               timestamp = 1700000000000 + i, headers = i % 4 == 0 and { { key = "h", value = tag .. i } } or nil }
    end
    return t
  end
  local function builder(msgs, codec)
    local b = proto.batch { compression = codec }
    for _, m in ipairs(msgs) do
      local hs
      if m.headers then hs = { [m.headers[1].key] = m.headers[1].value } end
      b:append(m.value, m.key, hs, m.timestamp)
    end
    return b
  end
  local function produce_body(parts)
    local pd = {}
    for i, r in ipairs(parts) do pd[i] = { index = i - 1, records = r } end
    return { acks = -1, timeout_ms = 1000, topic_data = { { name = "t", partition_data = pd } } }
  end

  if H.have_python() then
    it("is the frame's bytes on the wire, every version from 3, and kafka-python reads its batches", function()
      local m1, m2, m3 = messages(40, "a"), messages(25, "b"), messages(10, "c")
      local b1, b2 = builder(m1, "none"), builder(m2, "lz4")
      local parts = { b1, b2, m3, b1 } -- a builder twice, a compressed one, a message array
      local want = { m1, m2, m3, m1 }
      for _, v in ipairs { 3, 7, 8, 9, 11 } do
        local body = produce_body(parts)
        local hdr = { correlation_id = v, client_id = "spec" }
        local str = proto.encode_request("Produce", v, hdr, body)
        local of = proto.encode_request("Produce", v, hdr, body, { gather = true })
        assert.are.equal("userdata", type(of))
        assert.are.equal(#str, #of)
        assert.are.equal(str, tostring(of))
        assert.are.equal(#str, s:send(of))
        local got = assert(peer:receive(#str))
        assert.are.equal(str, got)
        local req = assert(proto.decode_request(got, { raw_records = true }))
        assert.are.equal(v, req.correlation_id)
        for i, p in ipairs(req.body.topic_data[1].partition_data) do
          local msgs = {}
          local out = H.kp("records_decode", p.records)
          local pos = 1
          while pos <= #out do
            local m = {}
            local off, ts
            off, ts, pos = H.unpack(">i8i8", out, pos)
            local function lb()
              local n
              n, pos = H.unpack(">i4", out, pos)
              if n < 0 then return nil end
              local x = out:sub(pos, pos + n - 1)
              pos = pos + n
              return x
            end
            m.key, m.value = lb(), lb()
            local nh
            nh, pos = H.unpack(">i4", out, pos)
            for _ = 1, nh do m.headers = { { key = lb(), value = lb() } } end
            m.offset, m.timestamp = off, ts
            msgs[#msgs + 1] = m
          end
          assert.are.equal(#want[i], #msgs, "partition " .. (i - 1))
          for j, w in ipairs(want[i]) do
            assert.are.same({ j - 1, w.key, w.value, w.timestamp, w.headers },
              { msgs[j].offset, msgs[j].key, msgs[j].value, msgs[j].timestamp, msgs[j].headers })
          end
        end
        assert.is_true(proto.release(of))
      end
    end)
  end

  it("goes out whole in many writes to a peer that reads slowly", function()
    -- 8 MiB, far above loopback's socket buffers: sendmsg() takes part of
    -- it at a time and the next write starts inside a piece or between
    local msgs = {}
    for i = 1, 2048 do msgs[i] = { value = ("%05d"):format(i) .. ("v"):rep(2043) } end
    local b1, b2 = builder(msgs, "none"), builder({ msgs[1], msgs[2] }, "none")
    local body = produce_body { b1, b2, b1, b1, b2, b1 }
    local str = proto.encode_request("Produce", 9, { correlation_id = 1 }, body)
    local of = proto.encode_request("Produce", 9, { correlation_id = 1 }, body, { gather = true })
    assert.are.equal(str, tostring(of))
    local out = os.tmpname()
    local srv = assert(socket.bind("127.0.0.1", 0))
    local _, port = srv:getsockname()
    srv:close()
    -- the reader: another process (this one is busy writing)
    local reader = io.popen(("exec /usr/bin/python3 spec/support/slow_reader.py %d %s %d"):format(port, out, #str), "r")
    local ok, err = pcall(function()
      assert.are.equal("ready", reader:read("*l"))
      local w = assert(ksocket.luasocket_tcp())
      w:settimeout(10000)
      assert(w:connect("127.0.0.1", port))
      assert.are.equal(#str, w:send(of))
      w:close()
    end)
    reader:close() -- waits for the reader to finish (its own 10 s deadlines)
    local f = io.open(out, "rb")
    local got = f and f:read("*a")
    if f then f:close() end
    os.remove(out)
    assert(ok, err)
    assert.are.equal(#str, #got)
    assert.is_true(str == got, "the bytes differ")
  end)

  it("a peer that stops reading: the write times out with the bytes that went", function()
    local msgs = {}
    for i = 1, 4096 do msgs[i] = { value = ("%05d"):format(i) .. ("w"):rep(2043) } end
    local body = produce_body { builder(msgs, "none") }
    local of = proto.encode_request("Produce", 7, { correlation_id = 2 }, body, { gather = true })
    local str = tostring(of)
    s:settimeout(200)
    local ok, err, sent = s:send(of)
    assert.is_nil(ok)
    assert.are.equal("timeout", err)
    assert.is_true(sent > 0 and sent < #str, "sent " .. tostring(sent))
    peer:settimeout(1)
    assert.are.equal(str:sub(1, sent), peer:receive(sent))
  end)

  it("its builders must not change until it is sent; released, it is void", function()
    local b = builder(messages(5, "x"), "none")
    local body = produce_body { b }
    local of = proto.encode_request("Produce", 9, { correlation_id = 3 }, body, { gather = true })
    local n = #of
    b:append("more")
    assert.has_error(function() s:send(of) end, "kafka.outframe: a builder of this frame changed after encode_request")
    assert.has_error(function() return tostring(of) end)
    of = proto.encode_request("Produce", 9, { correlation_id = 3 }, body, { gather = true })
    assert.are.equal(proto.encode_request("Produce", 9, { correlation_id = 3 }, body), tostring(of))
    assert.is_not.equal(n, #of)
    -- cleared and filled again with the same records: the same bytes in
    -- the same memory, but not the records the frame was encoded with
    b:clear()
    for _, m in ipairs(messages(5, "x")) do b:append(m.value, m.key, m.headers and { h = m.headers[1].value }, m.timestamp) end
    b:append("more")
    assert.has_error(function() s:send(of) end, "kafka.outframe: a builder of this frame changed after encode_request")
    of = proto.encode_request("Produce", 9, { correlation_id = 3 }, body, { gather = true })
    assert.is_true(proto.release(of))
    assert.is_false(proto.release(of))
    assert.has_error(function() return #of end, "kafka.outframe: released (proto.release)")
    assert.has_error(function() s:send(of) end, "kafka.outframe: released (proto.release)")
    -- only Produce is written in pieces; a compressed builder is encoded into the frame
    assert.are.equal("string", type(proto.encode_request("Metadata", 9, { correlation_id = 4 }, { topics = {} },
      { gather = true })))
    local z = proto.encode_request("Produce", 9, { correlation_id = 5 }, produce_body { builder(messages(5, "z"), "lz4") },
      { gather = true })
    assert.are.equal(proto.encode_request("Produce", 9, { correlation_id = 5 }, produce_body { builder(messages(5, "z"), "lz4") }),
      tostring(z))
  end)
end)
