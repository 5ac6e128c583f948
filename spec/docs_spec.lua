-- The README and the guides in docs/ stay true where a machine can tell:
-- every relative link reaches a file (and its #anchor a heading there),
-- the README stays short, links every guide, and its module map names
-- every file of lua/kafka/ and csrc/ and nothing else.
local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/") or "."

local function read(path)
  local f = io.open(root .. "/" .. path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function ls(pattern)
  local p = assert(io.popen("cd " .. root .. " && ls " .. pattern .. " 2>/dev/null"))
  local t = {}
  for l in p:lines() do t[#t + 1] = l end
  p:close()
  return t
end

-- A heading's anchor as GitHub makes it: lower case, punctuation dropped,
-- spaces to hyphens (bytes above 127, letters such as the c of façade, kept).
local function slug(heading)
  local s = heading:lower():gsub("`", "")
  s = s:gsub("[^%w%s%-_\128-\255]", "")
  return (s:gsub("%s", "-"))
end

local function anchors(text)
  local t = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local h = line:match("^#+%s+(.-)%s*$")
    if h then t[slug(h)] = true end
  end
  return t
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- Joins a relative link to the folder of the file it is in (a/b/../c -> a/c).
local function resolve(from, link)
  local parts = {}
  local base = dirname(from)
  if base ~= "." then
    for p in base:gmatch("[^/]+") do parts[#parts + 1] = p end
  end
  for p in link:gmatch("[^/]+") do
    if p == ".." then parts[#parts] = nil
    elseif p ~= "." then parts[#parts + 1] = p end
  end
  return table.concat(parts, "/")
end

-- The markdown files checked, and the relative links of one (code blocks
-- and code spans are not links).
local function docs_files()
  local t = { "README.md" }
  for _, f in ipairs(ls("docs/*.md")) do t[#t + 1] = f end
  return t
end

local function links(text)
  local t = {}
  local prose = text:gsub("\n```.-\n```", "\n"):gsub("`[^`\n]*`", "")
  for target in prose:gmatch("%]%(([^)%s]+)%)") do
    if not target:match("^%a[%w+.-]*:") then t[#t + 1] = target end
  end
  return t
end

-- Every broken link of the files: {"file: link (why)"}.
local function broken_links(files)
  local bad = {}
  for _, file in ipairs(files) do
    local text = assert(read(file), file)
    for _, target in ipairs(links(text)) do
      local path, anchor = target:match("^([^#]*)#?(.*)$")
      local dest = path == "" and file or resolve(file, path)
      local body = read(dest)
      if not body and not ls(dest)[1] then
        bad[#bad + 1] = ("%s: %s (no file %s)"):format(file, target, dest)
      elseif anchor ~= "" and body and dest:match("%.md$") and not anchors(body)[anchor] then
        bad[#bad + 1] = ("%s: %s (no heading #%s in %s)"):format(file, target, anchor, dest)
      end
    end
  end
  return bad
end

describe("the documentation", function()
  it("every relative link of README.md and docs/*.md reaches a file and its heading", function()
    local files = docs_files()
    assert.is_true(#files >= 9, "docs/ has " .. (#files - 1) .. " guides")
    local bad = broken_links(files)
    assert.are.same({}, bad)
  end)

  it("the link check finds a broken link and a broken anchor", function()
    local tmp = "docs/.docs_spec_probe.md"
    local f = assert(io.open(root .. "/" .. tmp, "wb"))
    f:write("# Probe\n\n[gone](no-such-guide.md), [anchor](codec.md#no-such-heading), ",
      "[fine](codec.md#the-error-contract), [self](#probe)\n")
    f:close()
    local ok, bad = pcall(broken_links, { tmp })
    os.remove(root .. "/" .. tmp)
    assert.is_true(ok, bad)
    assert.are.same({
      tmp .. ": no-such-guide.md (no file docs/no-such-guide.md)",
      tmp .. ": codec.md#no-such-heading (no heading #no-such-heading in docs/codec.md)",
    }, bad)
  end)

  it("the README is under 16 KB and links every guide", function()
    local readme = assert(read("README.md"))
    assert.is_true(#readme < 16384, "README.md has " .. #readme .. " bytes")
    local linked = {}
    for _, target in ipairs(links(readme)) do linked[(target:gsub("#.*$", ""))] = true end
    for _, guide in ipairs(ls("docs/*.md")) do
      assert.is_true(linked[guide] == true, guide .. " is not linked from README.md")
    end
  end)

  it("the README's module map names every file of lua/kafka/ and csrc/, and only those", function()
    local readme = assert(read("README.md"))
    local map = assert(readme:match("\n## Module map\n(.-)\n## "), "no Module map section")
    local named, dirs = {}, {}
    for entry in map:gmatch("\n| `([^`]+)` |") do
      local stem = entry:match("^(.*)%.%[ch%]$")
      if stem then
        named[stem .. ".c"], named[stem .. ".h"] = entry, entry
      elseif entry:match("/$") or entry:match("/%*%.lua$") then
        dirs[entry:match("^(.*/)")] = entry
      else
        named[entry] = entry
      end
    end
    local files = ls("lua/kafka/*.lua lua/kafka/*/*.lua csrc/*.c csrc/*.h")
    assert.is_true(#files > 30, "found only " .. #files .. " files")
    local present = {}
    for _, file in ipairs(files) do
      present[file] = true
      local dir = file:match("^(.*/)")
      assert.is_true(named[file] ~= nil or dirs[dir] ~= nil, file .. " is not in the README's module map")
    end
    for file, entry in pairs(named) do
      -- a .[ch] entry names a pair whose header may be the only one missing
      if not entry:match("%.%[ch%]$") or file:match("%.c$") then
        assert.is_true(present[file] == true, entry .. " in the module map is not a file")
      end
    end
    for dir, entry in pairs(dirs) do
      assert.is_true(ls(dir .. "*.lua")[1] ~= nil, entry .. " in the module map has no files")
    end
  end)
end)
