--- kafka.socket: the transport seam. Everything above talks to objects with
-- the cosocket interface (timeouts in milliseconds):
--   sock:settimeout(ms)  sock:connect(host, port)  sock:send(data)
--   sock:receive(n) -> data | nil, err, partial     sock:close()
-- (a timeout returns the bytes read so far as `partial`: the connection
-- keeps them and goes on reading later)
-- ngx.socket.tcp objects have it natively; luasocket's are wrapped here;
-- any other object with these methods can be injected.
--
-- TLS (security_protocol SSL / SASL_SSL) is one call after connect,
-- _M.tls(sock, host, port, tls): on luasocket objects the inbox does it in
-- C with OpenSSL (kafka.core's tls_context and inbox:starttls: records
-- decrypted straight into the response frames; the chain verified against
-- ssl_ca_location and the host name checked by OpenSSL in the handshake),
-- or with ssl_transport = "luasec" (or direct_reads off) LuaSec wraps them
-- (the same checks after its handshake: X509_check_host /
-- X509_check_ip_asc on the peer's certificate); cosockets and injected
-- objects with a cosocket-style sslhandshake(reused, server_name, verify)
-- method do their own handshake (in nginx the chain is verified against
-- lua_ssl_trusted_certificate, the host name by lua-nginx-module).
-- @module kafka.socket
local ngx = ngx -- luacheck: ignore (nil outside OpenResty)
local io, table = io, table
local pcall, require, setmetatable, getmetatable, type, tostring, ipairs, pairs = pcall, require, setmetatable,
  getmetatable, type, tostring, ipairs, pairs

local _M = {}

--- false: plain luasocket connections read and write through luasocket
-- (the C inbox off; for comparisons). Read when each socket is made.
-- @field direct_reads
_M.direct_reads = true

local luasocket -- loaded on first use

local ls_mt = {}
ls_mt.__index = ls_mt

-- A timeout bounds each whole call (luasocket's "t" mode), not each wait
-- inside it: a peer trickling bytes cannot stretch a receive past it.
function ls_mt:settimeout(ms)
  self.timeout_ms = ms
  self.sock:settimeout(ms and ms / 1000 or nil, "t")
end

-- read_frame(timeout_ms, max_bytes, expect) on a plain luasocket
-- connection: see kafka.core's inbox (csrc/lua_bytes.c); the frame is a
-- kafka.bytes.
local io_err
local function inbox_read_frame(self, ms, max, expect)
  local corr, frame, started, tls = self.inbox:frame(ms, max, expect)
  if tls then
    -- on a TLS connection an alert or a bad record; else the first bytes of
    -- a plaintext connection were a TLS record
    if self.tls then frame = io_err(self, frame) else self.tls_error = frame end
  end
  return corr, frame, started
end

-- Reads on a plain luasocket connection go through an inbox: readv()
-- on its descriptor straight into each frame (no copy in luasocket's
-- buffers, no join of pieces). Every read then takes that path, for the
-- inbox's read-ahead to stay in order; TLS through LuaSec (which reads the
-- descriptor itself) turns it off before the first read, TLS in C keeps it
-- (the inbox decrypts into the frames).
local function open_inbox(self)
  if not _M.direct_reads then return end
  local ok, core = pcall(require, "kafka.core")
  local fd = self.sock.getfd and self.sock:getfd()
  if not ok or not core.inbox or type(fd) ~= "number" or fd < 0 then return end
  self.inbox, self.core = core.inbox(fd), core
  self.read_frame = inbox_read_frame
  -- and writes with sendmsg(): send() then takes a Produce frame in
  -- pieces (proto.encode_request's gather option, kafka.connection)
  self.write_pieces = true
end

local function close_inbox(self)
  if self.inbox then self.inbox:close() end
  self.inbox, self.read_frame, self.write_pieces = nil, nil, nil
end

-- TCP_NODELAY once connected: luasocket 3 makes the descriptor in
-- connect() (the address family is known then), so a setoption before it
-- fails (EBADF) and requests ran under Nagle: a request written in two
-- pieces waited for the broker's delayed ACK, 40 ms.
function ls_mt:connect(host, port)
  local ok, err = self.sock:connect(host, port)
  if ok then
    self.sock:setoption("tcp-nodelay", true)
    open_inbox(self)
  end
  return ok, err
end

-- LuaSec reports a timeout as "wantread"/"wantwrite"; any other error of
-- a TLS connection (an alert, a bad record) is kept as its tls_error.
function io_err(self, err)
  if err == "wantread" or err == "wantwrite" then return "timeout" end
  if self.tls and err ~= "timeout" and err ~= "closed" then
    self.tls_error = err
    -- TLS 1.3: the broker checks the client certificate after the client's
    -- handshake is over; its refusal is an alert on the first read
    if not self.client_cert and tostring(err):find("alert", 1, true) and tostring(err):find("certificate", 1, true) then
      return "TLS: " .. tostring(err) .. " (the broker requires a client certificate: ssl_certificate_location "
        .. "and ssl_key_location)"
    end
    return "TLS: " .. tostring(err)
  end
  return err
end

-- send(data) -> bytes sent | nil, err, sent: data a string, or with the
-- inbox on, a kafka.outframe too (written by the inbox, not copied into
-- luasocket's string)
function ls_mt:send(data)
  if self.inbox then
    local ok, err, sent = self.inbox:write(data, self.timeout_ms)
    if not ok then return nil, io_err(self, err), sent end
    return #data
  end
  local n, err, last = self.sock:send(data)
  if not n then return nil, io_err(self, err), last end
  return n
end

function ls_mt:receive(n)
  local data, err, partial
  if self.inbox then
    data, err, partial = self.inbox:receive(n, self.timeout_ms)
  else
    data, err, partial = self.sock:receive(n)
  end
  if not data then return nil, io_err(self, err), partial end
  if not self.seen then
    self.seen = true
    -- a TLS alert or handshake record where the first frame size should be:
    -- a plaintext client on a TLS listener
    local a, b, c = data:byte(1, 3)
    if not self.tls and n == 4 and (a == 21 or a == 22) and b == 3 and c <= 4 then
      self.tls_error = "the broker answered with TLS: is it an SSL or SASL_SSL listener? (security_protocol)"
      return nil, self.tls_error
    end
  end
  return data
end

function ls_mt:close()
  close_inbox(self)
  return self.sock:close()
end

--- A luasocket TCP object behind the cosocket interface.
-- @treturn table the socket object
function _M.luasocket_tcp()
  if not luasocket then luasocket = require "socket" end
  local s, err = luasocket.tcp()
  if not s then return nil, err end
  -- total_timeout: settimeout bounds a whole receive (a 0 ms timeout looks at
  -- what is there without blocking); frames are read in 64 KiB pieces
  -- (connection.lua, LUASOCKET_PIECE), other sockets' in 1 MiB pieces
  return setmetatable({ sock = s, total_timeout = true }, ls_mt)
end

local ssl -- LuaSec, loaded on first TLS use

-- CA bundles tried when ssl_ca_location is not given (the system's trust
-- store: Debian/Ubuntu, Fedora/RHEL, Alpine/macOS/BSD)
local SYSTEM_CAS = { "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem" }

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local data = f:read("*a")
  f:close()
  return data
end

local function is_ip(host)
  return host:match("^%d+%.%d+%.%d+%.%d+$") ~= nil or host:find(":", 1, true) ~= nil
end

-- The trusted CAs of a tls config: ssl_ca_location, else the system's
-- bundle; and whether it is a directory (hashed, c_rehash) or a file.
local function ca_location(tls)
  local ca = tls.ca
  if not ca then
    for _, p in ipairs(SYSTEM_CAS) do
      if exists(p) then ca = p break end
    end
    if not ca then ca = "/etc/ssl/certs" end
  end
  return ca, exists(ca .. "/.") -- "dir/." opens only for a directory
end

-- The LuaSec context of a tls config (see kafka.options.security), made once.
local function luasec_context(tls)
  if tls._ctx then return tls._ctx end
  if not ssl then
    local ok, m = pcall(require, "ssl")
    if not ok then return nil, "security_protocol " .. tls.protocol .. " needs LuaSec (apt-get install lua-sec): " .. tostring(m) end
    ssl = m
  end
  local params = {
    mode = "client",
    protocol = "any",
    options = { "all", "no_sslv2", "no_sslv3", "no_tlsv1", "no_tlsv1_1" },
    verify = tls.verify_chain and "peer" or "none",
    -- verification errors are collected (getpeerverification) and refused
    -- right after the handshake, so the error can name the reason
    verifyext = tls.verify_chain and { "lsec_continue" } or nil,
    certificate = tls.certificate,
    key = tls.key,
    password = tls.key_password,
  }
  local ca, dir = ca_location(tls)
  if dir then params.capath = ca else params.cafile = ca end
  local ctx, err = ssl.newcontext(params)
  if not ctx then return nil, "TLS configuration: " .. tostring(err) end
  tls._ctx = ctx
  return ctx
end

local function verify_errors(errs)
  if type(errs) ~= "table" then return tostring(errs) end
  local out = {}
  for depth, list in pairs(errs) do
    for _, e in ipairs(type(list) == "table" and list or { list }) do
      out[#out + 1] = tostring(e) .. " (depth " .. tostring(depth) .. ")"
    end
  end
  table.sort(out)
  return table.concat(out, "; ")
end

-- The OpenSSL context (kafka.core.tls_context) of a tls config, made once:
-- one SSL_CTX per client's security settings.
local function openssl_context(tls, core)
  if tls._octx then return tls._octx end
  local ca, dir = ca_location(tls)
  local ctx, err = core.tls_context { cafile = not dir and ca or nil, capath = dir and ca or nil,
    certificate = tls.certificate, key = tls.key, key_password = tls.key_password, verify_chain = tls.verify_chain }
  if not ctx then return nil, "TLS configuration: " .. tostring(err) end
  tls._octx = ctx
  return ctx
end

-- A failed handshake's message (both transports): a peer that closed or
-- answered with something other than TLS is named as a plaintext listener.
local function handshake_failed(self, host, port, err)
  err = tostring(err)
  if err == "closed" or err == "System error" or err:find("unexpected eof", 1, true)
    or err:find("wrong version number", 1, true) or err:find("record layer failure", 1, true)
    or err:find("packet length too long", 1, true) then
    return ("TLS handshake with %s:%s failed: %s (is it a PLAINTEXT or SASL_PLAINTEXT listener?)"):format(
      host, tostring(port), err)
  end
  -- TLS 1.2: the refusal of a missing client certificate is a handshake alert
  if not self.client_cert and err:find("alert", 1, true) and (err:find("certificate", 1, true)
      or err:find("handshake failure", 1, true)) then
    return ("TLS handshake with %s:%s failed: %s (the broker requires a client certificate? "
      .. "ssl_certificate_location and ssl_key_location)"):format(host, tostring(port), err)
  end
  return ("TLS handshake with %s:%s failed: %s"):format(host, tostring(port), err)
end

local function not_trusted(host, port, tls, why)
  return ("TLS: the certificate of %s:%s is not trusted: %s (ssl_ca_location: %s)"):format(host, tostring(port),
    why, tostring(tls.ca or "the system's CAs"))
end

local function host_mismatch(host, port)
  return ("TLS: host name mismatch: the certificate of %s:%s is not valid for %q "
    .. "(ssl_endpoint_identification = \"none\" turns the check off)"):format(host, tostring(port), host)
end

-- luasocket objects with the inbox: the handshake in C (csrc/tls.c),
-- verified there; the inbox then decrypts every response into its frame.
local function openssl_handshake(self, host, port, tls, timeout_ms)
  local ctx, err = openssl_context(tls, self.core)
  if not ctx then return nil, err end
  self.tls, self.tls_transport = true, "openssl"
  self.client_cert = tls.certificate ~= nil
  local ok, kind, depth
  ok, err, kind, depth = self.inbox:starttls(ctx, host, tls.verify_host, timeout_ms)
  if ok then return true end
  if kind == "timeout" then
    return nil, ("TLS handshake with %s:%s timed out (is it a TLS listener?)"):format(host, tostring(port))
  elseif kind == "verify" then
    return nil, not_trusted(host, port, tls, ("%s (depth %d)"):format(err, depth))
  elseif kind == "host" then
    return nil, host_mismatch(host, port)
  end
  return nil, handshake_failed(self, host, port, err)
end

-- luasocket objects: TLS in C on the inbox (the default), or the LuaSec
-- handshake, then the chain and the host name.
function ls_mt:tls_handshake(host, port, tls, timeout_ms)
  if tls.transport ~= "luasec" and self.inbox and self.core and self.core.tls_context then
    return openssl_handshake(self, host, port, tls, timeout_ms)
  end
  local ctx, err = luasec_context(tls)
  if not ctx then return nil, err end
  local conn
  close_inbox(self)
  conn, err = ssl.wrap(self.sock, ctx)
  if not conn then return nil, "TLS: " .. tostring(err) end
  self.sock = conn
  self.tls, self.tls_transport = true, "luasec"
  self.client_cert = tls.certificate ~= nil
  if not is_ip(host) then conn:sni(host) end
  conn:settimeout(timeout_ms and timeout_ms / 1000 or nil)
  local ok
  ok, err = conn:dohandshake()
  if not ok then
    if err == "wantread" or err == "wantwrite" then
      return nil, ("TLS handshake with %s:%s timed out (is it a TLS listener?)"):format(host, tostring(port))
    end
    return nil, handshake_failed(self, host, port, err)
  end
  local verified, errs = conn:getpeerverification()
  if not verified and tls.verify_chain then
    return nil, not_trusted(host, port, tls, verify_errors(errs))
  end
  if tls.verify_host then
    local cert = conn:getpeercertificate()
    if not cert then return nil, ("TLS: %s:%s sent no certificate"):format(host, tostring(port)) end
    local match, cerr = require("kafka.proto").crypto.check_host(cert:pem(), host)
    if match == nil then return nil, "TLS: " .. tostring(cerr) end
    if not match then return nil, host_mismatch(host, port) end
  end
  return true
end

-- Cosockets in nginx: the client certificate (parsed once) and sslhandshake.
local function cosocket_handshake(sock, host, port, tls)
  if tls.certificate then
    if not sock.setclientcert then return nil, "TLS: this socket cannot send a client certificate (setclientcert)" end
    if tls.key_password then return nil, "TLS: ssl_key_password is not supported in nginx: use an unencrypted key" end
    if not tls._ngx_cert then
      local nssl = require "ngx.ssl"
      local cpem, err = read_file(tls.certificate)
      if not cpem then return nil, "ssl_certificate_location: " .. tostring(err) end
      local kpem
      kpem, err = read_file(tls.key)
      if not kpem then return nil, "ssl_key_location: " .. tostring(err) end
      local c, k
      c, err = nssl.parse_pem_cert(cpem)
      if not c then return nil, "ssl_certificate_location: " .. tostring(err) end
      k, err = nssl.parse_pem_priv_key(kpem)
      if not k then return nil, "ssl_key_location: " .. tostring(err) end
      tls._ngx_cert, tls._ngx_key = c, k
    end
    local ok, err = sock:setclientcert(tls._ngx_cert, tls._ngx_key)
    if not ok then return nil, "TLS: client certificate: " .. tostring(err) end
  end
  -- lua-nginx-module checks the host name against server_name when it
  -- verifies, with X509_check_host, which matches DNS names only: an IP
  -- address cannot be checked there, and "none" sends no SNI so that only
  -- the chain is verified.
  local name
  if tls.verify_host then
    if is_ip(host) then
      return nil, ("TLS: nginx cannot check the certificate of %s:%s against an IP address: connect by host name "
        .. "or set ssl_endpoint_identification = \"none\""):format(host, tostring(port))
    end
    name = host
  end
  local ok, err = sock:sslhandshake(false, name, tls.verify_chain)
  if not ok then
    return nil, ("TLS handshake with %s:%s failed: %s"):format(host, tostring(port), tostring(err))
  end
  return true
end

--- The TLS handshake on a connected socket, verified as tls says.
-- @tparam table sock a connected socket object
-- @tparam string host the broker's host name (SNI, and the name checked)
-- @tparam integer port the port
-- @tparam table tls the TLS settings (kafka.options.security's)
-- @tparam number timeout_ms the handshake's time
-- @return true, or nil, err ("ssl" errors)
function _M.tls(sock, host, port, tls, timeout_ms)
  if sock.tls_handshake then return sock:tls_handshake(host, port, tls, timeout_ms) end
  if sock.sslhandshake then return cosocket_handshake(sock, host, port, tls) end
  return nil, "TLS: the injected socket has no sslhandshake method"
end

--- The TLS handshake when the security settings ask for it.
-- @tparam table sock a connected socket object
-- @tparam string host the broker's host name
-- @tparam integer port the port
-- @tparam table security kafka.options.security's result
-- @tparam number timeout_ms the handshake's time
-- @return true, or nil, err
function _M.secure(sock, host, port, security, timeout_ms)
  if not security or not security.tls then return true end
  return _M.tls(sock, host, port, security.tls, timeout_ms)
end

--- The TLS-level error a send or receive saw (an alert: e.g. a missing
-- client certificate refused after a TLS 1.3 handshake).
-- @tparam table sock the socket object
-- @treturn ?string the error
function _M.tls_error(sock)
  return type(sock) == "table" and sock.tls_error or nil
end

-- in_nginx() -> true inside lua-nginx-module (its timers, cosockets and
-- phases are there).
local function in_nginx()
  return type(ngx) == "table" and type(ngx.socket) == "table" and ngx.get_phase ~= nil and type(ngx.timer) == "table"
end
_M.in_nginx = in_nginx

-- The nginx phases without cosockets. In init, init_worker and exit_worker
-- (no request is served, blocking is harmless) the client falls back to
-- luasocket; in the others a connect fails: a producer sends from its
-- background timer there, anything else goes through ngx.timer.at.
local NO_COSOCKET = { init = "luasocket", init_worker = "luasocket", exit_worker = "luasocket",
  set = false, log = false, header_filter = false, body_filter = false, balancer = false,
  ssl_session_store = false }

local function phase()
  local ok, ph = pcall(ngx.get_phase)
  return ok and ph or "unknown"
end
_M.phase = function() return in_nginx() and phase() or nil end

--- A cosocket (ngx.socket.tcp), picked when the socket is made (a client
-- made in init_worker still gets cosockets in the timer that uses it).
-- @return the cosocket; a luasocket object in init, init_worker and exit_worker
-- (no request is served: blocking is harmless); nil, err in the other phases
-- without cosockets
function _M.nginx_tcp()
  local ph = phase()
  local fallback = NO_COSOCKET[ph]
  if fallback == nil then return ngx.socket.tcp() end
  if fallback then return _M.luasocket_tcp() end
  return nil, "no cosockets in nginx's " .. ph .. " phase (a producer in background mode sends from its own timer;"
    .. " other I/O goes through ngx.timer.at)"
end

--- What a client makes its sockets with.
-- @tparam table opts the client's options
-- @treturn function returning new socket objects: opts.socket when given, else
-- cosockets inside nginx, else luasocket
function _M.factory(opts)
  if opts and opts.socket then return opts.socket end
  if in_nginx() then return _M.nginx_tcp end
  return _M.luasocket_tcp
end

--- What a socket object actually is (looked at on the object, not on how it
-- was asked for).
-- @tparam table sock
-- @treturn string "luasocket", "cosocket" or "custom"
function _M.kind(sock)
  if getmetatable(sock) == ls_mt then return "luasocket" end
  if in_nginx() and type(sock) == "table" and type(sock.setkeepalive) == "function"
      and type(sock.getreusedtimes) == "function" then
    return "cosocket"
  end
  return "custom"
end

local get_request -- resty.core's, loaded on first use (false: not there)

--- Inside nginx, the request (or timer) running now: a cosocket belongs to
-- the one that created it. Its ngx.ctx table stands for it, not the request
-- pointer: nginx frees a finished timer's request and the next timer's often
-- gets the same address (ngx.timer.every, tick after tick), and a cosocket
-- of the dead one then raises "bad request"; a table held as a connection's
-- owner is never reused.
-- @return the context, nil outside nginx (and in init_worker)
function _M.context()
  if get_request == nil then
    get_request = false
    if in_nginx() then
      local ok, base = pcall(require, "resty.core.base")
      if ok and type(base) == "table" and base.get_request then get_request = base.get_request end
    end
  end
  return get_request and get_request() and ngx.ctx or nil
end

--- The clock: injected (opts.now, opts.sleep), else nginx's or luasocket's.
-- @tparam table opts
-- @treturn function now_ms()
-- @treturn function sleep_ms(ms)
function _M.clock(opts)
  if opts and opts.now then
    return opts.now, opts.sleep or function() end
  end
  if type(ngx) == "table" and ngx.now and ngx.sleep then
    return function()
      ngx.update_time()
      return ngx.now() * 1000
    end, function(ms) ngx.sleep(ms / 1000) end
  end
  if not luasocket then luasocket = require "socket" end
  return function() return luasocket.gettime() * 1000 end,
    function(ms) luasocket.sleep(ms / 1000) end
end

return _M
