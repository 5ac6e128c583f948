-- luacheck configuration: `make lint`
std = "max"
max_line_length = 140
-- the library and the specs run on Lua 5.4, 5.3, 5.1 and LuaJIT 2.1: only the
-- names all of them have (spec/support/helpers.lua looks up the others)
files["lua"] = { std = "min" }
files["spec"] = { std = "min+busted" }
-- the lua-resty-kafka drop-in runs inside nginx only (LuaJIT)
files["compat"] = { std = "min", read_globals = { "ngx" } }
exclude_files = { "build/**" }
files["examples/mock_spec.lua"] = { std = "min+busted" }
