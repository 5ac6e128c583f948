-- One list of the library's error codes: kafka.errors.codes, docs/codec.md's
-- table, and the code strings the modules of lua/kafka/ return agree.
local errors = require "kafka.errors"

local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."

local function lines(path)
  local f = assert(io.open(path, "rb"))
  local t = {}
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

-- the codes in docs/codec.md's "Error codes" table
local function readme_codes()
  local codes, inside = {}, false
  for _, l in ipairs(lines(root .. "/docs/codec.md")) do
    if l:match("^### Error codes") then inside = true
    elseif inside and l:match("^#") then break
    elseif inside then
      local c = l:match("^| `([%w_]+)` |")
      if c then codes[c] = true end
    end
  end
  return codes
end

-- string literals on the lines that return an error (return nil, ...,
-- fail(...), code = ...) of every module: what callers can get as `code`
local function source_codes()
  local p = assert(io.popen("ls " .. root .. "/lua/kafka/*.lua " .. root .. "/lua/kafka/*/*.lua 2>/dev/null"))
  local found = {}
  for file in p:lines() do
    for n, l in ipairs(lines(file)) do
      -- code = "x", or code = cond and "x" or "y" (not code = f("argument"))
      local assigned = l:match("[%w_]*code%s*=%s*(.*)$")
      if assigned and not (assigned:match('^"') or assigned:match(' and "')) then assigned = nil end
      local part = l:match("return nil,(.*)$") or l:match("fail%((.*)$") or assigned
      if part and not l:match("^%s*%-%-") and not l:match("check%.") and not l:match("error%(") then
        part = part:gsub("%-%-.*$", "")
        for lit in part:gmatch('"([%w_]+)"') do
          if lit:match("^[a-z][a-z_]*$") then found[lit] = file:match("[^/]+$") .. ":" .. n end
        end
      end
    end
  end
  p:close()
  return found
end

describe("error codes", function()
  it("docs/codec.md's table lists exactly kafka.errors.codes", function()
    local readme = readme_codes()
    for c in pairs(errors.codes) do assert.is_true(readme[c] == true, c .. " is not in docs/codec.md's table") end
    for c in pairs(readme) do assert.is_string(errors.codes[c], c .. " is in docs/codec.md but not in kafka.errors.codes") end
  end)

  it("every code string the modules return is in kafka.errors.codes", function()
    local found = source_codes()
    local n = 0
    for c, where in pairs(found) do
      n = n + 1
      assert.is_string(errors.codes[c], ("%s (%s) is not in kafka.errors.codes"):format(c, where))
    end
    assert.is_true(n >= 15, "the scan found only " .. n .. " codes") -- it does read the sources
  end)
end)
