-- The frame rules on every read path. A response is read by one of two
-- readers: the inbox in C (plain luasocket connections, and TLS on them
-- in C) or kafka.connection's reader in Lua (TLS through LuaSec,
-- direct_reads = false, cosockets in nginx, any injected socket). Both must give the same answer to the same
-- bad peer: a wrong correlation id is a protocol error (never a frame
-- dropped and a timeout later), a frame too short, too large or cut is
-- refused on its prefix, and a request's deadline is request_timeout_ms
-- plus the broker-side wait it asked for. Each case runs on each transport
-- against spec/support/badbroker.lua; nginx_spec runs the same cases on
-- cosockets (spec/nginx/locations.conf, /readpath).
local kafka = require "kafka"
local ksocket = require "kafka.socket"
local options = require "kafka.options"
local H = require "support.helpers"
local RP = require "support.readpath"

local connection = kafka.connection

-- A socket object of the user's own (the seam kafka.socket documents),
-- here over luasocket: it has no read_frame, so reads go through Lua.
local function custom_socket()
  local s = require("socket").tcp()
  local o = {}
  function o.settimeout(_, ms) s:settimeout(ms and ms / 1000 or nil) end
  function o.connect(_, host, port) return s:connect(host, port) end
  function o.send(_, data) return s:send(data) end
  function o.receive(_, n) return s:receive(n) end
  function o.close() return s:close() end
  return o
end

-- A certificate for 127.0.0.1 (IP SAN), made once for the TLS transport.
local tlsdir
local function tls_dir()
  if not tlsdir then
    tlsdir = os.tmpname()
    os.remove(tlsdir)
    assert(os.execute(("mkdir -p %s && cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem "
      .. "-out cert.pem -days 2 -subj /CN=badbroker.test -addext 'subjectAltName=IP:127.0.0.1' 2>/dev/null")
      :format(tlsdir, tlsdir)))
  end
  return tlsdir
end

local transports = {
  { name = "luasocket (the inbox, in C)", reader = "inbox" },
  { name = "luasocket with direct_reads = false", reader = "lua", direct_reads = false },
  { name = "an injected socket", reader = "lua", socket = custom_socket },
  { name = "TLS (OpenSSL in C, the inbox)", reader = "inbox", tls = "openssl" },
  { name = "TLS (LuaSec)", reader = "lua", tls = "luasec" },
}

-- connection options for transport tr against port, and the bad broker's TLS folder
local function conn_opts(tr, port, o)
  local opts = { host = "127.0.0.1", port = port }
  for k, v in pairs(o or {}) do opts[k] = v end
  if tr.socket then opts.socket = tr.socket end
  if tr.tls then
    opts.security = options.security { security_protocol = "SSL", ssl_ca_location = tls_dir() .. "/cert.pem",
      ssl_transport = tr.tls }
  end
  return opts
end

describe("every read path", function()
  teardown(function()
    if tlsdir then os.execute("rm -rf " .. tlsdir) end
  end)

  for _, tr in ipairs(transports) do
    describe(tr.name, function()
      local saved
      before_each(function()
        saved = ksocket.direct_reads
        if tr.direct_reads ~= nil then ksocket.direct_reads = tr.direct_reads end
      end)
      after_each(function() ksocket.direct_reads = saved end)

      -- each case: a bad broker with its modes, a connection, the requests
      -- and their exact results (support/readpath.lua, shared with nginx)
      for _, case in ipairs(RP.cases) do
        it(case.name, function()
          local proc, port = H.start_bad(case.modes, tr.tls and tls_dir() or nil, 0.2)
          local c = connection.new(conn_opts(tr, port, case.conn))
          local ok, err = pcall(function()
            local got = RP.run(c, case)
            assert.are.same(RP.expected(case, port), got)
            -- the reader the transport was meant to exercise was the one used
            if not c:is_connected() then assert(c:connect()) end
            assert.are.equal(tr.reader, c.sock.read_frame and "inbox" or "lua")
            if tr.tls then assert.are.equal(tr.tls, c.sock.tls_transport) end
          end)
          c:close()
          proc:close()
          assert(ok, err)
        end)
      end
    end)
  end
end)

-- The clients ask for the broker-side wait: a Fetch's max_wait_ms and a
-- Produce's timeout_ms are added to the request's deadline, so a
-- request_timeout_ms below them never times a waiting broker out.
describe("the broker-side wait in the clients' requests", function()
  local rk = require "support.realkafka"
  local rt = require "support.realtools"
  local main = rk.main()

  if main then
    it("an empty poll on Kafka " .. main .. " with fetch_max_wait_ms above request_timeout_ms: no timeout, "
      .. "no new connection", function()
      local k = rk.cluster(main, 1)
      local client = kafka.client.new { brokers = k.bootstrap.PLAINTEXT, request_timeout_ms = 150 }
      local ok, err = pcall(function()
        local topic = rt.uniq("maxwait")
        rt.create_topic(client, topic, 1, 1)
        local c = kafka.consumer.new(client, { fetch_max_wait_ms = 500 })
        assert(c:assign { { topic = topic, partition = 0, offset = "earliest" } })
        assert.are.same({}, assert(c:poll(0)))
        local _, before = client:transport()
        before = before.luasocket
        for _ = 1, 3 do
          local msgs, perr, code = c:poll(1200)
          assert.are.same({ {}, nil, nil }, { msgs, perr, code })
        end
        local _, after = client:transport()
        assert.are.equal(before, after.luasocket)
      end)
      client:close()
      assert(ok, err)
    end)
  end

  it("a Produce answered after request_timeout_ms but within its timeout_ms is delivered, sent once", function()
    local mock = require "kafka.mock"
    local cluster = mock.new { brokers = 1, topics = { t = 1 } }
    local client = kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(),
      request_timeout_ms = 100 }
    local p = kafka.producer.new(client, { timeout_ms = 1000, delivery_timeout_ms = 2000 })
    cluster:delay("Produce", 300)
    local r = { p:send_sync("t", "v") }
    assert.are.same({ 0, 0 }, r)
    assert.are.equal(1, cluster:request_counts().Produce)
    local _, counts = client:transport()
    assert.are.equal(2, counts.custom) -- the bootstrap connection and broker 1's: none replaced
    client:close()
    cluster:close()
  end)
end)
