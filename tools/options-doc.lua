-- tools/options-doc.lua: docs/options.md from the declarations in
-- lua/kafka/options.lua (make options-doc; make docs runs it too).
--   lua5.4 tools/options-doc.lua > docs/options.md
-- spec/options_doc_spec.lua loads this file with "render" and compares.
local options = require "kafka.options"

local function show(v)
  if type(v) == "string" then return ('`"%s"`'):format(v) end
  return "`" .. tostring(v) .. "`"
end

local function type_text(d)
  local t = d.type
  if t == "int" then
    if d.min and d.max then return ("integer %d..%d"):format(d.min, d.max) end
    if d.min then return ("integer >= %d"):format(d.min) end
    return "integer"
  elseif t == "oneof" then
    local shown = {}
    for i, v in ipairs(d.values) do shown[i] = show(v) end
    return table.concat(shown, ", ")
  elseif t == "bool" then
    return "boolean"
  elseif type(t) == "table" then
    return table.concat(t, " or ")
  end
  return t
end

local function default_text(d)
  if d.default_doc then return d.default_doc end
  if d.default == nil then return "nil" end
  return show(d.default)
end

-- the doc column is a table cell: a "|" would end it
local function cell(s) return (s:gsub("|", "\\|")) end

local function render()
  local out = {
    "# Options",
    "",
    "Generated from the declarations in `lua/kafka/options.lua` by",
    "`tools/options-doc.lua` (`make options-doc`); do not edit by hand:",
    "`spec/options_doc_spec.lua` fails when this file is stale. Names are",
    "Kafka's (and librdkafka's) in snake_case; the last column names the",
    "Kafka client (or librdkafka) property an option mirrors. A wrong type or",
    "value raises in the constructor, naming the option.",
  }
  for _, decl in ipairs(options.ALL) do
    out[#out + 1] = ""
    out[#out + 1] = "## " .. decl.where
    out[#out + 1] = ""
    if decl.intro then
      out[#out + 1] = decl.intro
      out[#out + 1] = ""
    end
    out[#out + 1] = "| option | type | default | what it does | Kafka's name |"
    out[#out + 1] = "|---|---|---|---|---|"
    for _, d in ipairs(decl) do
      out[#out + 1] = ("| `%s` | %s | %s | %s | %s |"):format(d.name, cell(type_text(d)), cell(default_text(d)),
        cell(d.doc), d.kafka and ("`%s`%s"):format(d.kafka, d.librdkafka and " (librdkafka)" or "") or "")
    end
  end
  out[#out + 1] = ""
  return table.concat(out, "\n")
end

if ... == "render" then return render end
io.write(render())
