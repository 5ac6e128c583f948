-- Bad peers: a connection closed mid-frame, garbage, a wrong correlation
-- id, silence, a frame too short. Each is a clear error, the connection is
-- closed and replaced, and the next request succeeds. Plus the socket seam.
local kafka = require "kafka"
local socket = require "socket"
local connection = kafka.connection
local H = require "support.helpers"

local start_bad = H.start_bad

local LIST = { replica_id = -1, topics = { { name = "t", partitions = { { partition_index = 0, timestamp = -1 } } } } }

describe("connection", function()
  it("bad responses are clear errors; the connection is replaced and the next request works", function()
    local proc, port = start_bad("close_mid_frame,garbage,wrong_corr,silent,short_frame")
    local c = connection.new { host = "127.0.0.1", port = port, request_timeout_ms = 300 }
    local expect = {
      { "network", "mid%-frame receive failed" },
      -- counted after the correlation id (the connection reads and checks it before the rest of the frame)
      { "protocol", "truncated array length 'topics' at byte 4" },
      { "protocol", "correlation id mismatch: expected %d+, got %d+" },
      { "timeout", "timeout" },
      { "protocol", "frame too short" },
    }
    for _, e in ipairs(expect) do
      local body, err, code = c:request("ListOffsets", LIST)
      assert.is_nil(body)
      assert.are.equal(e[1], code)
      assert.matches(e[2], err)
      assert.is_false(c:is_connected())
    end
    local body = assert(c:request("ListOffsets", LIST))
    assert.are.equal(42, body.topics[1].partitions[1].offset)
    assert.is_true(c:is_connected())
    c:close()
    proc:close()
  end)

  it("the cluster client retries past a bad response on its own", function()
    local proc, port = start_bad("garbage,wrong_corr")
    local cl = kafka.client.new { brokers = { "127.0.0.1:" .. port }, request_timeout_ms = 500, retry_backoff_ms = 10,
      reconnect_backoff_ms = 10 }
    assert.are.equal(42, cl:list_offsets("t", 0, "latest"))
    cl:close()
    proc:close()
  end)

  it("several requests in flight on one connection, answered in order", function()
    local proc, port = start_bad("")
    local c = connection.new { host = "127.0.0.1", port = port }
    assert(c:connect())
    local v = c:version("ListOffsets")
    local a = assert(c:send("ListOffsets", v, LIST))
    local b = assert(c:send("ListOffsets", v, LIST))
    local d = assert(c:send("Metadata", c:version("Metadata"), { topics = {} }))
    assert.are.equal(3, c:in_flight())
    -- read the last first: the earlier ones are kept for their receive()
    local md = assert(c:receive(d))
    assert.are.equal(0, md.brokers[1].node_id)
    assert.are.equal(42, assert(c:receive(b)).topics[1].partitions[1].offset)
    assert.are.equal(42, assert(c:receive(a)).topics[1].partitions[1].offset)
    local none, err, code = c:receive(a)
    assert.is_nil(none)
    assert.are.equal("closed", code)
    assert.is_string(err)
    c:close()
    proc:close()
  end)

  it("an unreachable broker is a network error, and the client backs off", function()
    local s = socket.bind("127.0.0.1", 0)
    local _, port = s:getsockname()
    s:close() -- nothing listens there now
    local cl = kafka.client.new { brokers = { "127.0.0.1:" .. port }, reconnect_backoff_ms = 1000, max_retries = 0 }
    local ok, err, code = cl:metadata { "t" }
    assert.is_nil(ok)
    assert.are.equal("network", code)
    assert.matches("no broker reachable", err)
    ok, err = cl:metadata { "t" }
    assert.is_nil(ok)
    assert.matches("next attempt in", err)
  end)

  it("luasocket connections run with TCP_NODELAY: a request written in pieces never waits for a delayed ACK",
    function()
    local server = assert(socket.bind("127.0.0.1", 0))
    local _, port = server:getsockname()
    local s = require("kafka.socket").luasocket_tcp()
    s:settimeout(2000)
    assert(s:connect("127.0.0.1", port))
    -- (luasocket makes the descriptor in connect: set before it, the option is lost)
    assert.is_true(s.sock:getoption("tcp-nodelay"))
    s:close()
    server:close()
  end)

  it("takes any object with the socket methods (injected transport)", function()
    -- a scripted socket: answers ApiVersions v3 with error 35 and a v0 body
    -- naming v2, then ApiVersions v2, then Metadata
    local proto = kafka.proto
    local sent, inbox = {}, {}
    local fake = {}
    function fake.settimeout() end
    function fake.connect() return true end
    function fake.close() end
    function fake.send(_, data)
      local req = assert(proto.decode_request(data))
      sent[#sent + 1] = req.api_name .. " v" .. req.api_version
      local resp
      if req.api_key == 18 and req.api_version == 3 then
        resp = proto.encode_response(18, 0, req.correlation_id, { error_code = 35,
          api_keys = { { api_key = 18, min_version = 0, max_version = 2 } } })
      elseif req.api_key == 18 then
        resp = proto.encode_response(18, req.api_version, req.correlation_id, { error_code = 0,
          api_keys = { { api_key = 3, min_version = 0, max_version = 1 }, { api_key = 18, min_version = 0, max_version = 2 } } })
      else
        resp = proto.encode_response(3, req.api_version, req.correlation_id, { brokers = {}, topics = {} })
      end
      inbox[#inbox + 1] = resp
      return #data
    end
    function fake.receive(_, n)
      local buf = inbox[1]
      local out = buf:sub(1, n)
      inbox[1] = buf:sub(n + 1)
      if inbox[1] == "" then table.remove(inbox, 1) end
      return out
    end
    local c = connection.new { host = "fake", port = 1, socket = function() return fake end }
    assert(c:connect())
    assert.are.equal(1, c:version("Metadata"))
    assert(c:request("Metadata", { topics = {} }))
    assert.are.same({ "ApiVersions v3", "ApiVersions v2", "Metadata v1" }, sent)
    local none, err, code = c:version("Produce")
    assert.is_nil(none)
    assert.are.equal("unsupported", code)
    assert.matches("does not support Produce", err)
  end)
end)
