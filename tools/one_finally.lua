-- one_finally.lua FILE...: fails when a test (an it(...) block) calls
-- finally() more than once. busted keeps only the last function given to
-- finally(): an earlier one never runs, and what it stops (a mock, a
-- client) outlives the test (a leaked mock's collection later waited in
-- pclose for 300 s). Blocks are found by indentation: `it(` (or
-- `full_it(`...) at some indent, up to `end)` at the same indent.
local bad = 0
for _, path in ipairs(arg) do
  local f = assert(io.open(path, "rb"))
  local n, indent, start, count = 0, nil, nil, 0
  local function close()
    if count > 1 then
      io.stderr:write(("%s:%d: the test calls finally() %d times (busted keeps only the last)\n")
        :format(path, start, count))
      bad = bad + 1
    end
    indent = nil
  end
  for line in f:lines() do
    n = n + 1
    if indent and line:match("^" .. indent .. "end%)") then close() end
    local ind = line:match("^(%s*)[%w_]*it%s*%(")
    -- (a test whose function starts on the next line ends deeper: the next
    -- test at its indent, or less, closes it)
    if ind and indent and #ind <= #indent then close() end
    if ind and not indent then indent, start, count = ind, n, 0 end
    if indent and line:match("finally%s*%(") and not line:match("^%s*%-%-") then count = count + 1 end
  end
  if indent then close() end
  f:close()
end
if bad > 0 then os.exit(1) end
