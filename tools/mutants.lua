-- tools/mutants.lua: mutation testing (`make mutants`).
--
--   lua5.4 tools/mutants.lua [name ...]      (or MUTANTS=name1,name2)
--
-- For each mutant of tools/mutants-list.lua: copies the tree (lua/ csrc/
-- spec/ docs/ Makefile, the builds in build/) to build/mutants/work, changes the
-- one place in the copy (the real tree is never written), rebuilds when a C
-- file changed, runs the mutant's specs there with a timeout and prints
--   KILLED    the specs failed (or timed out): the change was caught
--   SURVIVED  every spec passed: a promise no spec checks (write one)
--   ERROR     the original text is not in the file exactly once (the list is
--             stale: refactored code must get its entry updated), the build
--             failed, or the specs fail on the unchanged tree too
-- then a summary. Exits 1 when any mutant survived or errored.
--
-- Environment: MUTANTS (subset), MUTANTS_CI=1 (the entries marked ci = true:
-- the set .ci/run runs, `make mutants-ci`), MUTANT_TIMEOUT (seconds per spec run, 300),
-- MUTANT_BASELINE=0 (skip the run of each spec command on the unchanged
-- copy, which makes sure a kill is the mutant's and not a broken setup),
-- MUTANT_LOG (directory of the spec outputs, build/mutants/logs), MUTANT_WORK
-- (the scratch copy, build/mutants/work: give two concurrent runs two).
-- Real-broker specs share the brokers of one run: `make mutants` runs this
-- under spec/support/kafka/with-brokers.sh, and the copy's build/kafka is a
-- link to the tree's.
local io, os, table = io, os, table
local ipairs, pairs, type, tostring, tonumber, print = ipairs, pairs, type, tostring, tonumber, print

local root = (arg and arg[0] or ""):match("^(.*)/tools/[^/]*$") or "."
if root:sub(1, 1) ~= "/" then
  local p = io.popen("pwd")
  local cwd = p:read("*l")
  p:close()
  root = cwd .. "/" .. root
end
local scratch = os.getenv("MUTANT_WORK") or (root .. "/build/mutants/work")
local logdir = os.getenv("MUTANT_LOG") or (root .. "/build/mutants/logs")
local default_timeout = tonumber(os.getenv("MUTANT_TIMEOUT") or "") or 300
local baseline_on = os.getenv("MUTANT_BASELINE") ~= "0"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sh(cmd)
  local ok, _, code = os.execute(cmd)
  if type(ok) == "number" then return ok == 0, ok end -- Lua 5.1
  return ok == true, code
end

local function readfile(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function writefile(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- occurrences of plain text s in text
local function count(text, s)
  local n, init = 0, 1
  while true do
    local i, j = text:find(s, init, true)
    if not i then return n end
    n, init = n + 1, j + 1
  end
end

local function list(v)
  if v == nil then return {} end
  if type(v) == "table" then return v end
  return { v }
end

-- A fresh copy of the tree: sources, then the builds with their times kept
-- (make then rebuilds only what the mutant changed).
local function fresh_copy()
  assert(sh("rm -rf " .. q(scratch) .. " && mkdir -p " .. q(scratch .. "/build")))
  local parts = {}
  for _, d in ipairs { "lua", "csrc", "spec", "Makefile", "bin", "examples", "tools", "docs", "compat" } do
    if sh("test -e " .. q(root .. "/" .. d)) then parts[#parts + 1] = q(root .. "/" .. d) end
  end
  assert(sh("cp -a " .. table.concat(parts, " ") .. " " .. q(scratch)))
  for _, d in ipairs { "lua5.4", "luajit", "mockbroker" } do
    if sh("test -e " .. q(root .. "/build/" .. d)) then
      assert(sh("cp -a " .. q(root .. "/build/" .. d) .. " " .. q(scratch .. "/build/")))
    end
  end
  assert(sh("mkdir -p " .. q(root .. "/build/kafka") .. " && ln -s " .. q(root .. "/build/kafka") .. " "
    .. q(scratch .. "/build/kafka")))
end

local function spec_cmd(m)
  local env = {
    "LUA_PATH=" .. q(scratch .. "/lua/?.lua;" .. scratch .. "/lua/?/init.lua;" .. scratch .. "/spec/?.lua;;"),
    "LUA_CPATH=" .. q(scratch .. "/build/lua5.4/?.so;;"),
  }
  local names = {}
  for k in pairs(m.env or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do env[#env + 1] = k .. "=" .. q(m.env[k]) end
  local filters = {}
  if m.filter then
    for f in (m.filter .. "|"):gmatch("([^|]*)|") do filters[#filters + 1] = "--filter=" .. q(f) end
  end
  local specs = {}
  for _, s in ipairs(list(m.spec)) do specs[#specs + 1] = q(s) end
  return table.concat(env, " ") .. " timeout -k 10 " .. (m.timeout or default_timeout) .. " lua5.4 "
    .. "$(command -v busted) " .. table.concat(filters, " ") .. " " .. table.concat(specs, " ")
end

local function run_specs(m, log)
  local t0 = os.time()
  local ok, code = sh("cd " .. q(scratch) .. " && " .. spec_cmd(m) .. " >" .. q(log) .. " 2>&1")
  return ok, code, os.time() - t0
end

local function build(m, log)
  if not (m.file:match("%.c$") or m.file:match("%.h$")) then return true end
  local cmd = "cd " .. q(scratch) .. " && make -s LUA=lua5.4 all"
  if m.luajit then cmd = cmd .. " && make -s LUA=luajit all" end
  return sh(cmd .. " >" .. q(log) .. " 2>&1")
end

-- the mutants to run
local all = dofile(root .. "/tools/mutants-list.lua")
local want = {}
local sel = {}
for _, a in ipairs(arg or {}) do sel[#sel + 1] = a end
for n in (os.getenv("MUTANTS") or ""):gmatch("[^,%s]+") do sel[#sel + 1] = n end
local byname = {}
for _, m in ipairs(all) do
  assert(not byname[m.name], "two mutants named " .. m.name)
  byname[m.name] = m
end
if #sel == 0 and os.getenv("MUTANTS_CI") == "1" then
  for _, m in ipairs(all) do
    if m.ci then want[#want + 1] = m end
  end
elseif #sel == 0 then
  want = all
else
  for _, n in ipairs(sel) do
    if not byname[n] then io.stderr:write("no mutant named " .. n .. "\n") os.exit(2) end
    want[#want + 1] = byname[n]
  end
end

sh("mkdir -p " .. q(logdir))
local results, baseline = {}, {}
local t_start = os.time()
for i, m in ipairs(want) do
  local verdict, why
  local log = logdir .. "/" .. m.name .. ".log"
  local text = readfile(root .. "/" .. m.file)
  local n = text and count(text, m.find) or -1
  if n ~= 1 then
    verdict = "ERROR"
    why = n < 0 and ("no file " .. m.file) or
      (("the original text occurs %d times in %s (stale list: update the entry)"):format(n, m.file))
  else
    fresh_copy()
    local key = spec_cmd(m)
    if baseline_on and baseline[key] == nil then
      local ok = run_specs(m, logdir .. "/" .. m.name .. ".baseline.log")
      baseline[key] = ok
    end
    if baseline_on and not baseline[key] then
      verdict, why = "ERROR", "the specs fail on the unchanged tree (" .. logdir .. "/" .. m.name .. ".baseline.log)"
    else
      local i0 = text:find(m.find, 1, true)
      writefile(scratch .. "/" .. m.file, text:sub(1, i0 - 1) .. m.replace .. text:sub(i0 + #m.find))
      if not build(m, log) then
        verdict, why = "ERROR", "the mutant does not build (" .. log .. ")"
      else
        local ok, code, secs = run_specs(m, log)
        if ok then
          verdict, why = "SURVIVED", ("%d s"):format(secs)
        else
          verdict = "KILLED"
          why = (code == 124 or code == 137) and ("timed out after %d s"):format(secs) or ("%d s"):format(secs)
        end
      end
    end
  end
  results[#results + 1] = { m = m, verdict = verdict }
  print(("%-9s %2d/%d %-28s %s  [%s]"):format(verdict, i, #want, m.name, why or "", table.concat(list(m.spec), " ")))
  if verdict ~= "KILLED" then print("          promise: " .. m.promise) end
  io.stdout:flush()
end
sh("rm -rf " .. q(scratch))

local tally = { KILLED = 0, SURVIVED = 0, ERROR = 0 }
for _, r in ipairs(results) do tally[r.verdict] = tally[r.verdict] + 1 end
print(("== mutants: %d killed, %d survived, %d errors of %d (%d s)"):format(tally.KILLED, tally.SURVIVED, tally.ERROR,
  #results, os.time() - t_start))
for _, r in ipairs(results) do
  if r.verdict ~= "KILLED" then print(("   %s %s: %s"):format(r.verdict, r.m.name, r.m.promise)) end
end
os.exit((tally.SURVIVED + tally.ERROR == 0) and 0 or 1)
