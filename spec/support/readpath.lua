-- The read-path cases of spec/readpath_spec.lua, shared with nginx's
-- /readpath location (spec/nginx/locations.conf): each is a list of
-- spec/support/badbroker.lua modes, connection options, and the requests
-- made on one kafka.connection with their exact results. Every transport
-- must give exactly these results.
local _M = {}

local LIST = { replica_id = -1, topics = { { name = "t", partitions = { { partition_index = 0, timestamp = -1 } } } } }

-- Each request's result: "ok <offset>" or "<code> <message>" with the
-- connection's name as {name}.
_M.cases = {
  {
    name = "bad answers are clear errors, each closing the connection; the next request works",
    modes = "close_mid_frame,garbage,wrong_corr,silent,short_frame",
    conn = { request_timeout_ms = 300 },
    steps = { {}, {}, {}, {}, {}, {} },
    want = {
      "network {name}: mid-frame receive failed: closed",
      "protocol {name}: bad ListOffsets v2 response: truncated array length 'topics' at byte 4 (corrupt)",
      "protocol {name}: correlation id mismatch: expected 6, got 1006",
      "timeout {name}: receive failed: timeout",
      "protocol {name}: frame too short for a response header",
      "ok 42",
    },
  },
  {
    name = "a wrong correlation id is refused on the id, before a 256 MiB frame is read",
    modes = "huge_wrong_corr",
    conn = { request_timeout_ms = 5000, receive_message_max_bytes = 1073741824 },
    steps = { {}, {} },
    want = {
      "protocol {name}: correlation id mismatch: expected 2, got 9",
      "ok 42",
    },
  },
  {
    name = "a frame larger than receive_message_max_bytes is refused on its size prefix",
    modes = "huge_frame",
    conn = { request_timeout_ms = 5000, receive_message_max_bytes = 1048576 },
    steps = { {}, {} },
    want = {
      "limit {name}: frame of 268435456 bytes exceeds receive_message_max_bytes (1048576)",
      "ok 42",
    },
  },
  {
    -- the broker answers 400 ms after the request; request_timeout_ms is 150:
    -- without the broker-side wait the request times out, with 300 ms of it
    -- (a Fetch's max_wait_ms, a Produce's timeout_ms) it is answered
    name = "a request's deadline is request_timeout_ms plus the broker-side wait it asked for",
    modes = "delay_400,delay_400,delay_400",
    conn = { request_timeout_ms = 150 },
    steps = { {}, { timeout_ms = 300 }, { timeout_ms = 200 } },
    want = {
      "timeout {name}: receive failed: timeout",
      "ok 42",
      "timeout {name}: receive failed: timeout",
    },
  },
}

-- run(conn, case) -> the results of case's requests on conn, as strings.
function _M.run(c, case)
  local got = {}
  for _, step in ipairs(case.steps) do
    local body, err, code = c:request("ListOffsets", LIST, step)
    if body then
      got[#got + 1] = "ok " .. tostring(body.topics[1].partitions[1].offset)
    else
      got[#got + 1] = tostring(code) .. " " .. tostring(err)
    end
  end
  return got
end

-- expected(case, port) -> case.want with the connection's name filled in
function _M.expected(case, port)
  local t = {}
  for i, w in ipairs(case.want) do t[i] = (w:gsub("{name}", "127.0.0.1:" .. port)) end
  return t
end

return _M
