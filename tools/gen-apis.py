#!/usr/bin/env python3
"""Generate csrc/apis.c from Apache Kafka's message definitions.

Usage: tools/gen-apis.py DIR > csrc/apis.c

DIR is the folder clients/src/main/resources/common/message of the Apache
Kafka source tree (JSON with full-line // comments). Every request/response
pair becomes one kf_api entry whose field tables the interpreter in
csrc/schema.c walks. Versions marked latestVersionUnstable are left out:
brokers do not advertise them.
"""
import json
import os
import re
import sys

MAXV = 0x7FFF

SCALARS = {
    "bool": "KF_T_BOOL", "int8": "KF_T_INT8", "int16": "KF_T_INT16",
    "uint16": "KF_T_UINT16", "int32": "KF_T_INT32", "uint32": "KF_T_UINT32",
    "int64": "KF_T_INT64", "float64": "KF_T_FLOAT64", "uuid": "KF_T_UUID",
    "string": "KF_T_STRING", "bytes": "KF_T_BYTES", "records": "KF_T_RECORDS",
}


def load(path):
    with open(path, encoding="utf-8") as f:
        text = "\n".join(l for l in f if not l.lstrip().startswith("//"))
    return json.loads(text)


def vrange(s):
    """'0+' -> (0, MAXV); '1-3' -> (1, 3); '3' -> (3, 3); 'none'/None -> never."""
    if s is None or s == "none" or s == "":
        return (1, 0)
    s = s.strip()
    if s.endswith("+"):
        return (int(s[:-1]), MAXV)
    if "-" in s:
        a, b = s.split("-")
        return (int(a), int(b))
    return (int(s), int(s))


def snake(name):
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return s.lower()


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Gen:
    def __init__(self):
        self.out = []
        self.n = 0

    def struct(self, prefix, fields, common, seen):
        """Emits the field table of a struct (children first); returns its C name."""
        self.n += 1
        cname = "S%d" % self.n
        rows = []
        regular, tagged = [], []
        for f in fields:
            (tagged if "tag" in f else regular).append(f)
        tagged.sort(key=lambda f: int(f["tag"]))
        for f in regular + tagged:
            t = f["type"]
            is_array = t.startswith("[]")
            base = t[2:] if is_array else t
            child = "NULL"
            if base in SCALARS:
                ctype = SCALARS[base]
            else:
                ctype = "KF_T_STRUCT"
                sub = f.get("fields")
                if sub is None:
                    sub = common.get(base) or seen.get(base)
                    if sub is None:
                        raise SystemExit("unknown type %s in %s" % (base, prefix))
                else:
                    seen[base] = sub
                child = "&" + self.struct(prefix + "." + f["name"], sub, common, seen)
            vmin, vmax = vrange(f.get("versions"))
            nmin, nmax = vrange(f.get("nullableVersions"))
            tmin, tmax = vrange(f.get("taggedVersions")) if "tag" in f else (1, 0)
            tag = int(f.get("tag", -1))
            d = f.get("default")
            def_int, def_num, def_str, def_null = 0, "0.0", "NULL", 0
            if d is not None:
                d = str(d).strip()
                if d == "null":
                    def_null = 1
                elif base in ("bool",):
                    def_int = 1 if d == "true" else 0
                elif base in ("string",):
                    def_str = cstr(d)
                elif base == "float64":
                    def_num = repr(float(d))
                elif base in SCALARS and base not in ("uuid", "bytes", "records"):
                    def_int = int(d, 0)
            rows.append("  {%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, %s, %dLL, %s, %s, %d}," % (
                cstr(snake(f["name"])), ctype, 1 if is_array else 0, vmin, vmax, nmin, nmax,
                tmin, tmax, tag, child, def_int, def_num, def_str, def_null))
        ntagged = len(tagged)
        self.out.append("/* %s */" % prefix)
        if rows:
            self.out.append("static const kf_field F%s[] = {" % cname[1:])
            self.out.extend(rows)
            self.out.append("};")
            self.out.append("static const kf_struct %s = {%s, %d, %d, F%s};\n" % (
                cname, cstr(prefix.split(".")[-1]), len(rows), ntagged, cname[1:]))
        else:
            self.out.append("static const kf_struct %s = {%s, 0, 0, NULL};\n" % (
                cname, cstr(prefix.split(".")[-1])))
        return cname


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    msgs = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".json"):
            continue
        m = load(os.path.join(d, fn))
        if m.get("type") in ("request", "response"):
            msgs[(m["apiKey"], m["type"])] = m
    g = Gen()
    apis = []
    for key in sorted({k for k, _ in msgs}):
        req, resp = msgs.get((key, "request")), msgs.get((key, "response"))
        if not req or not resp:
            continue
        name = req["name"][: -len("Request")]
        lo, hi = vrange(req["validVersions"])
        rlo, rhi = vrange(resp["validVersions"])
        lo, hi = max(lo, rlo), min(hi, rhi)
        if req.get("latestVersionUnstable") or resp.get("latestVersionUnstable"):
            hi -= 1
        if hi < lo:
            continue
        rs = g.struct(name + "Request", req["fields"],
                      {c["name"]: c["fields"] for c in req.get("commonStructs", [])}, {})
        ps = g.struct(name + "Response", resp["fields"],
                      {c["name"]: c["fields"] for c in resp.get("commonStructs", [])}, {})
        apis.append("  {%d, %s, %s, %d, %d, %d, %d, &%s, &%s}," % (
            key, cstr(name), cstr(snake(name)), lo, hi,
            vrange(req.get("flexibleVersions"))[0] if req.get("flexibleVersions") != "none" else MAXV,
            vrange(resp.get("flexibleVersions"))[0] if resp.get("flexibleVersions") != "none" else MAXV,
            rs, ps))
    print("/* apis.c - GENERATED by tools/gen-apis.py; do not edit.")
    print(" * Generated from the Apache Kafka message definitions (Apache-2.0),")
    print(" * clients/src/main/resources/common/message; see NOTICE. */")
    print('#include "schema.h"\n')
    print("\n".join(g.out))
    print("const kf_api kf_apis[] = {")
    print("\n".join(apis))
    print("};")
    print("const size_t kf_napis = sizeof kf_apis / sizeof kf_apis[0];")


if __name__ == "__main__":
    main()
