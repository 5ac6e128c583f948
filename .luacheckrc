-- luacheck configuration: `make lint`
std = "max"
max_line_length = 140
files["spec"] = { std = "+busted" }
exclude_files = { "build/**" }
