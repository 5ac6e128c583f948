-- issue 27 item 2: a group consumer's poll keeps its deadline whatever the
-- coordinator does. Finding the coordinator, connecting to it, the group's
-- metadata and the committed offsets of new partitions are asked without
-- waiting past the poll's deadline: what is not answered by then stays in
-- flight and a later poll takes the answer (Member:ask), as Java's consumer
-- keeps its FindCoordinator and OffsetFetch in flight across polls.
-- kafka.mock in-process on a virtual clock, so every duration is exact.
local kafka = require "kafka"
local mock = require "kafka.mock"

-- a cluster, a client and a producer on one virtual clock
local function setup_cluster(brokers, topics)
  local clock = { t = 0 }
  local now, sleep = function() return clock.t end, function(ms) clock.t = clock.t + ms end
  local cluster = mock.new { brokers = brokers, topics = topics, now = now, sleep = sleep }
  local function client()
    return kafka.client.new { brokers = cluster:bootstrap(), socket = cluster:socket_factory(), now = now,
      sleep = sleep }
  end
  return clock, cluster, client
end

describe("a group consumer's poll keeps its deadline", function()
  it("while the coordinator is frozen for 40 s (past request_timeout_ms): every poll(200) takes 200 ms", function()
    local clock, cluster, new_client = setup_cluster(3, { t = { partitions = 3, replication_factor = 3 } })
    local pclient, cclient = new_client(), new_client()
    local p = kafka.producer.new(pclient, {})
    for i = 1, 30 do p:send("t", "a" .. i, { partition = i % 3 }) end
    assert.are.same(0, select(2, p:flush()))
    local c = kafka.consumer.new(cclient, { group_id = "g", auto_offset_reset = "earliest" })
    assert(c:subscribe { "t" })
    local got = 0
    while got < 30 and clock.t < 60000 do got = got + #assert(c:poll(100)) end
    local gen = c:group_state().generation
    assert.are.same({ 30, "stable" }, { got, c:group_state().state })

    local coord = cluster:coordinator("g")
    cluster:freeze(coord)
    local frozen_at = clock.t
    -- messages for the partitions the frozen broker does not lead are read meanwhile
    local others = {}
    for part = 0, 2 do
      if cluster:leader("t", part) ~= coord then others[#others + 1] = part end
    end
    local durations, read, polls, sent = {}, 0, 0, false
    while clock.t - frozen_at < 40000 do
      if polls == 50 and not sent then
        sent = true
        for i = 1, 10 do p:send("t", "b" .. i, { partition = others[i % #others + 1] }) end
        assert.are.same(0, select(2, p:flush()))
      end
      local t0 = clock.t
      local msgs = c:poll(200)
      local n = msgs and #msgs or 0
      if n == 0 then
        polls = polls + 1
        durations[clock.t - t0] = (durations[clock.t - t0] or 0) + 1
      end
      read = read + n
    end
    -- every empty poll took exactly its 200 ms (one took 30 s before: the
    -- heartbeat timed out and the coordinator lookup waited for the frozen
    -- broker), and the other leaders' messages were read meanwhile
    assert.are.same({ [200] = polls }, durations)
    assert.are.same(10, read)
    cluster:thaw(coord)
    local t1 = clock.t
    while c:group_state().state ~= "stable" or c:group_state().generation ~= gen do
      assert(clock.t - t1 < 60000, "the member is back in its generation within 60 s")
      c:poll(200)
    end
    -- the member kept its generation (the session, 45 s, did not expire)
    -- and commits again
    assert.are.same({ "stable", gen }, { c:group_state().state, c:group_state().generation })
    assert(c:commit())
    -- 10 per partition, and 5 more on each of the two other leaders' partitions
    local want = { [0] = 10, [1] = 10, [2] = 10 }
    for _, part in ipairs(others) do want[part] = 15 end
    assert.are.same({ t = want }, cluster:committed("g"))
    c:close()
    pclient:close()
    cclient:close()
    cluster:close()
  end)

  it("a poll(0) loop joins the group when each answer takes 50 ms: later polls take the answers", function()
    local clock, cluster, new_client = setup_cluster(1, { t = 2 })
    local pclient, cclient = new_client(), new_client()
    local p = kafka.producer.new(pclient, {})
    for i = 1, 4 do p:send("t", "m" .. i, { partition = i % 2 }) end
    assert.are.same(0, select(2, p:flush()))
    for _, api in ipairs { "FindCoordinator", "Metadata", "JoinGroup", "SyncGroup", "OffsetFetch", "ApiVersions" } do
      cluster:delay(api, 50)
    end
    local c = kafka.consumer.new(cclient, { group_id = "g", auto_offset_reset = "earliest" })
    assert(c:subscribe { "t" })
    local t0, got, polls, longest = clock.t, 0, 0, 0
    while got < 4 and clock.t - t0 < 10000 do
      local ts = clock.t
      local msgs = assert(c:poll(0))
      longest = math.max(longest, clock.t - ts)
      polls = polls + 1
      got = got + #msgs
      clock.t = clock.t + 10 -- the caller's own work between polls
    end
    local counts = cluster:request_counts()
    -- no poll waited; each request was sent once (none abandoned and sent
    -- again): the coordinator found, its connection negotiated, the
    -- metadata, JoinGroup, SyncGroup and the committed offsets each 50 ms
    -- (two JoinGroups: the first is answered MEMBER_ID_REQUIRED, KIP-394);
    -- nine answers in a row, each taken by the first poll after its 50 ms
    -- (ApiVersions, Metadata, FindCoordinator, the coordinator's
    -- ApiVersions, JoinGroup twice, the leader's Metadata for its
    -- assignment, SyncGroup, OffsetFetch), then the ListOffsets and Fetch
    -- of the next polls: the messages at 460 ms
    assert.are.same({ 4, 0, "stable", 460 }, { got, longest, c:group_state().state, clock.t - t0 })
    assert.are.same({ "joining", "unjoined", "joining", "assigning", "syncing", "stable" },
      c:group_state().transitions)
    assert.are.same({ 1, 2, 1, 1 }, { counts.FindCoordinator, counts.JoinGroup, counts.SyncGroup,
      counts.OffsetFetch })
    c:close()
    pclient:close()
    cclient:close()
    cluster:close()
  end)
end)
