#!/usr/bin/env python3
"""Generate csrc/apis.c from Apache Kafka's message definitions.

Usage: tools/gen-apis.py DIR [DIR...] > csrc/apis.c

Each DIR is the folder common/message of one Apache Kafka release (JSON
with full-line // comments), OLDEST FIRST: e.g. Kafka 3.9's (every version
from v0), 4.1's (old versions removed by KIP-896, newer ones added), 4.4's.
tools/fetch-protocol.sh VERSION DIR unpacks it from that release's
kafka-clients jar on Maven Central (`make gen` does it for the releases the
codec is generated from); a source tree has it at
clients/src/main/resources/common/message. The codec speaks the union:

- per API (and per "data" structure), the versions are the union of the
  folders' stable versions (validVersions minus a latestVersionUnstable
  one; brokers do not advertise those);
- per field, the version ranges (versions, nullableVersions,
  taggedVersions) are merged over the versions each folder covers;
- wherever two folders describe the same version, they must agree on it
  exactly (the fields present, their order, types, nullability, tags and
  defaults, and flexibility). A disagreement is an error: the script names
  the API and field and exits 1 without writing anything.

Names come from the newest folder. An API whose request was renamed (key
74: ListClientMetricsResources -> ListConfigResources) keeps its old name
as an alias for kf_api_by_name; fields that were renamed with it are mapped
by RENAMED_FIELDS below (the wire format is the same), any other name
change fails like any other disagreement.

Every request/response pair becomes one kf_api entry, every "data"
structure (ConsumerProtocolSubscription, EndTxnMarker, ...) one kf_data
entry; csrc/schema.c walks their field tables.
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

# Fields renamed between folders, wire-identical (the generator fails on any
# other name change at a version both folders describe):
# (message name in the newest folder, dotted path of the OLD name) -> new name.
RENAMED_FIELDS = {
    ("ListConfigResourcesResponse", "ClientMetricsResources"): "ConfigResources",
    ("ListConfigResourcesResponse", "ClientMetricsResources.Name"): "ResourceName",
    # KIP-996 (Vote v2, 4.x) renamed the candidate to the replica in every version.
    ("VoteRequest", "Topics.Partitions.CandidateEpoch"): "ReplicaEpoch",
    ("VoteRequest", "Topics.Partitions.CandidateId"): "ReplicaId",
    ("VoteRequest", "Topics.Partitions.CandidateDirectoryId"): "ReplicaDirectoryId",
    # Kafka 4.4 renamed it in every version (a consumer-protocol member's epoch rides there),
    # as OffsetCommit's GenerationId became GenerationIdOrMemberEpoch in 3.7.
    ("TxnOffsetCommitRequest", "GenerationId"): "GenerationIdOrMemberEpoch",
}


class Disagreement(Exception):
    pass


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


def vset(s, within):
    lo, hi = vrange(s)
    return {v for v in within if lo <= v <= hi}


def snake(name):
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return s.lower()


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fmt(vs):
    """A set of versions for messages: '3-7', '0, 2-4', 'none'."""
    vs = sorted(vs)
    if not vs:
        return "none"
    out, start, prev = [], vs[0], vs[0]
    for v in vs[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if v is not None:
            start = prev = v
    return ", ".join(out)


def interval(vs, top, what):
    """A set of versions as (lo, hi) for the C tables; hi = MAXV when it
    reaches the newest version. Raises when the set has a hole."""
    if not vs:
        return (1, 0)
    lo, hi = min(vs), max(vs)
    if len(vs) != hi - lo + 1:
        raise Disagreement("%s: versions %s are not one range" % (what, fmt(vs)))
    return (lo, MAXV if hi >= top else hi)


def norm_default(f):
    d = f.get("default")
    if d is None:
        return None
    d = str(d).strip()
    base = f["type"][2:] if f["type"].startswith("[]") else f["type"]
    if d != "null" and base in SCALARS and base not in ("uuid", "bytes", "records", "string",
                                                          "bool", "float64"):
        return int(d, 0)
    if base == "float64" and d != "null":
        return float(d)
    return d


def kind_of(f):
    """A field's wire type: a scalar, or "struct" whatever the struct's name."""
    t = f["type"]
    base = t[2:] if t.startswith("[]") else t
    return ("[]" if t.startswith("[]") else "") + (base if base in SCALARS else "struct")


def struct_types(fields, out):
    """Collects every struct type defined inline (by type name)."""
    for f in fields:
        if "fields" in f:
            t = f["type"]
            out.setdefault(t[2:] if t.startswith("[]") else t, f["fields"])
            struct_types(f["fields"], out)
    return out


class Part:
    """One folder's definition of one struct, over the versions it covers."""

    def __init__(self, label, fields, types, versions, msg, path):
        self.label, self.types, self.versions = label, types, versions
        self.msg, self.path = msg, path  # newest message name, old dotted path
        self.fields = []  # (name, field, fv, nv, tv) in declaration order
        for f in fields:
            fv = vset(f.get("versions"), versions)
            if not fv:
                continue
            name = f["name"]
            old = path + [name]
            name = RENAMED_FIELDS.get((msg, ".".join(old)), name)
            nv = vset(f.get("nullableVersions"), fv)
            tv = vset(f.get("taggedVersions"), fv) if "tag" in f else set()
            self.fields.append((name, f, fv, nv, tv, old))

    def child(self, entry):
        name, f, fv, _, _, old = entry
        base = f["type"][2:] if f["type"].startswith("[]") else f["type"]
        sub = f.get("fields")
        if sub is None:
            sub = self.types.get(base)
            if sub is None:
                raise Disagreement("unknown type %s of %s in %s" % (base, name, self.label))
        return Part(self.label, sub, self.types, fv, self.msg, old)

    def at(self, v):
        """What the wire holds at version v: regular fields in order, then
        the tagged ones by tag."""
        reg, tag = [], []
        for name, f, fv, nv, tv, _ in self.fields:
            if v not in fv:
                continue
            d = (name, kind_of(f), "nullable" if v in nv else "not nullable",
                 "tag %s" % f["tag"] if "tag" in f and v in tv else
                 ("tag %s (not tagged in v%d)" % (f["tag"], v) if "tag" in f else "untagged"),
                 "default %r" % (norm_default(f),))
            (tag if "tag" in f else reg).append((int(f.get("tag", -1)), d))
        tag.sort(key=lambda x: x[0])
        return [d for _, d in reg] + [d for _, d in tag]


PROBLEMS = []  # disagreements found so far: all are reported, then exit 1


def check_overlap(prefix, parts):
    """Two folders describing one version must say the same thing (the
    first difference is recorded in PROBLEMS, with the versions it is in)."""
    for i in range(len(parts)):
        for j in range(i + 1, len(parts)):
            a, b = parts[i], parts[j]
            found = {}  # difference -> versions
            for v in sorted(a.versions & b.versions):
                da, db = a.at(v), b.at(v)
                if da == db:
                    continue
                for k in range(max(len(da), len(db))):
                    x = da[k] if k < len(da) else None
                    y = db[k] if k < len(db) else None
                    if x != y:
                        break
                what = "%s says field %d is %s, %s says %s" % (
                    a.label, k + 1, x and ", ".join(map(str, x)) or "absent",
                    b.label, y and ", ".join(map(str, y)) or "absent")
                found.setdefault(what, set()).add(v)
            for what, vs in found.items():
                PROBLEMS.append("%s v%s: %s" % (prefix, fmt(vs), what))


def merged_order(prefix, parts):
    """One field order that respects every folder's order."""
    names = [e[0] for e in parts[-1].fields]
    for p in reversed(parts[:-1]):
        prev = None
        for e in p.fields:
            if e[0] not in names:
                names.insert(names.index(prev) + 1 if prev else 0, e[0])
            prev = e[0]
    pos = {n: i for i, n in enumerate(names)}
    for p in parts:
        got = [pos[e[0]] for e in p.fields if "tag" not in e[1]]
        if got != sorted(got):
            raise Disagreement("%s: %s orders the fields differently (%s)" % (
                prefix, p.label, ", ".join(e[0] for e in p.fields)))
    return names


class Gen:
    def __init__(self):
        self.out = []
        self.n = 0

    def struct(self, prefix, parts, top):
        """Emits the merged field table of a struct (children first); returns its C name."""
        self.n += 1
        cname = "S%d" % self.n
        check_overlap(prefix, parts)
        names = merged_order(prefix, parts)
        regular, tagged = [], []
        for name in names:
            entries = [(p, e) for p in parts for e in p.fields if e[0] == name]
            fs = [e[1] for _, e in entries]
            what = "%s.%s" % (prefix, name)
            for g in fs[1:]:
                for label, get in (("type", kind_of), ("tag", lambda x: int(x.get("tag", -1)))):
                    if get(g) != get(fs[0]):
                        raise Disagreement("%s: %s %s in %s, %s in %s" % (
                            what, label, get(fs[0]), entries[0][0].label, get(g),
                            entries[fs.index(g)][0].label))
                if norm_default(g) != norm_default(fs[0]):
                    raise Disagreement("%s: default %r in %s, %r in %s" % (
                        what, fs[0].get("default"), entries[0][0].label, g.get("default"),
                        entries[fs.index(g)][0].label))
            f = fs[-1]
            fv = set().union(*[e[2] for _, e in entries])
            nv = set().union(*[e[3] for _, e in entries])
            tv = set().union(*[e[4] for _, e in entries])
            row = (name, f, interval(fv, top, what), interval(nv, top, what + " (nullable)"),
                   interval(tv, top, what + " (tagged)"), [p.child(e) for p, e in entries]
                   if not (f["type"][2:] if f["type"].startswith("[]") else f["type"]) in SCALARS
                   else None)
            (tagged if "tag" in f else regular).append(row)
        tagged.sort(key=lambda r: int(r[1]["tag"]))
        rows = []
        for name, f, (vmin, vmax), (nmin, nmax), (tmin, tmax), kids in regular + tagged:
            t = f["type"]
            is_array = t.startswith("[]")
            base = t[2:] if is_array else t
            child = "NULL"
            if kids is None:
                ctype = SCALARS[base]
            else:
                ctype = "KF_T_STRUCT"
                child = "&" + self.struct(prefix + "." + name, kids, top)
            tag = int(f.get("tag", -1))
            if tag < 0:
                tmin, tmax = 1, 0
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
                cstr(snake(name)), ctype, 1 if is_array else 0, vmin, vmax, nmin, nmax,
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


def stable(m):
    lo, hi = vrange(m["validVersions"])
    if m.get("latestVersionUnstable"):
        hi -= 1
    return set(range(lo, hi + 1))


def first_flexible(prefix, defs, versions):
    """The first flexible version of the union (MAXV: never); the folders
    must agree where they overlap and flexibility must be a suffix."""
    flex = set()
    for label, m, vs in defs:
        fv = vset(m.get("flexibleVersions"), vs)
        for label2, m2, vs2 in defs:
            fv2 = vset(m2.get("flexibleVersions"), vs2)
            both = vs & vs2
            if fv & both != fv2 & both:
                raise Disagreement("%s: flexible versions %s in %s, %s in %s" % (
                    prefix, fmt(fv & both), label, fmt(fv2 & both), label2))
        flex |= fv
    if not flex:
        return MAXV
    lo = min(flex)
    if flex != {v for v in versions if v >= lo}:
        raise Disagreement("%s: flexible versions %s are not a suffix of %s" % (
            prefix, fmt(flex), fmt(versions)))
    return lo


def source_lines(d, msgs):
    """The folder's name, the title of its SOURCE.md when it has one, and
    what it defines of three APIs (which tells the Kafka line apart)."""
    out = [os.path.basename(os.path.normpath(d))]
    try:
        with open(os.path.join(d, "SOURCE.md"), encoding="utf-8") as f:
            out[0] += ": " + f.readline().strip().lstrip("#").strip()
    except OSError:
        pass
    have = []
    for key, name in ((0, "Produce"), (1, "Fetch"), (3, "Metadata")):
        m = msgs.get((key, "request"))
        if m:
            have.append("%s %s" % (name, fmt(stable(m))))
    out.append("  (%d request and response definitions; %s)" % (len(msgs), ", ".join(have)))
    return out


def main():
    dirs = sys.argv[1:]
    if not dirs or any(d.startswith("-") for d in dirs):
        raise SystemExit(__doc__)
    folders = []  # (label, {(apiKey, type): msg}, {name: msg} of data structs)
    for d in dirs:
        msgs, datas = {}, {}
        for fn in sorted(os.listdir(d)):
            if not fn.endswith(".json"):
                continue
            m = load(os.path.join(d, fn))
            if m.get("type") in ("request", "response"):
                msgs[(m["apiKey"], m["type"])] = m
            elif m.get("type") == "data":
                datas[m["name"]] = m
        folders.append((os.path.basename(os.path.normpath(d)), msgs, datas))

    g = Gen()
    apis, aliases, datas = [], [], []
    try:
        keys = sorted({k for _, msgs, _ in folders for k, _ in msgs})
        for key in keys:
            reqs, resps = [], []
            for label, msgs, _ in folders:
                req, resp = msgs.get((key, "request")), msgs.get((key, "response"))
                if not req or not resp:
                    continue
                vs = stable(req) & stable(resp)
                if vs:
                    reqs.append((label, req, vs))
                    resps.append((label, resp, vs))
            if not reqs:
                continue
            versions = set().union(*[vs for _, _, vs in reqs])
            name = reqs[-1][1]["name"][: -len("Request")]
            lo, hi = interval(versions, MAXV + 1, "%s (key %d)" % (name, key))
            for label, req, _ in reqs:
                old = req["name"][: -len("Request")]
                if old != name and old not in [a[0] for a in aliases]:
                    aliases.append((old, key))
            structs = []
            for kind, defs in (("Request", reqs), ("Response", resps)):
                parts = [Part(label, m["fields"], struct_types(
                    m["fields"], {c["name"]: c["fields"] for c in m.get("commonStructs", [])}),
                    vs, defs[-1][1]["name"], []) for label, m, vs in defs]
                structs.append(g.struct(name + kind, parts, hi))
                structs.append(first_flexible(name + kind, defs, versions))
            apis.append("  {%d, %s, %s, %d, %d, %d, %d, &%s, &%s}," % (
                key, cstr(name), cstr(snake(name)), lo, hi, structs[1], structs[3],
                structs[0], structs[2]))
        for dname in sorted({n for _, _, ds in folders for n in ds}):
            defs = [(label, ds[dname], stable(ds[dname])) for label, _, ds in folders
                    if dname in ds and stable(ds[dname])]
            if not defs:
                continue
            versions = set().union(*[vs for _, _, vs in defs])
            lo, hi = interval(versions, MAXV + 1, dname)
            parts = [Part(label, m["fields"], struct_types(
                m["fields"], {c["name"]: c["fields"] for c in m.get("commonStructs", [])}),
                vs, dname, []) for label, m, vs in defs]
            s = g.struct(dname, parts, hi)
            datas.append("  {%s, %s, %d, %d, %d, &%s}," % (
                cstr(dname), cstr(snake(dname)), lo, hi, first_flexible(dname, defs, versions), s))
    except Disagreement as e:
        PROBLEMS.append(str(e))
    if PROBLEMS:
        for p in PROBLEMS:
            sys.stderr.write("gen-apis.py: the definitions disagree: %s\n" % p)
        sys.exit(1)

    print("/* apis.c - GENERATED by tools/gen-apis.py; do not edit.")
    print(" * Generated from the Apache Kafka message definitions (Apache-2.0),")
    print(" * common/message of kafka-clients' jars; see NOTICE. The union of,")
    print(" * oldest first:")
    for d, (_, msgs, _) in zip(dirs, folders):
        for line in source_lines(d, msgs):
            print(" *   %s" % line)
    print(" */")
    print('#include "schema.h"\n')
    print("\n".join(g.out))
    print("const kf_api kf_apis[] = {")
    print("\n".join(apis))
    print("};")
    print("const size_t kf_napis = sizeof kf_apis / sizeof kf_apis[0];\n")
    print("/* Old names of renamed APIs, still accepted by kf_api_by_name. */")
    print("const kf_api_alias kf_api_aliases[] = {")
    for old, key in aliases:
        print("  {%s, %s, %d}," % (cstr(old), cstr(snake(old)), key))
    print("  {NULL, NULL, -1}")
    print("};\n")
    print("/* Structures carried inside other messages (type \"data\"). */")
    print("const kf_data kf_datas[] = {")
    print("\n".join(datas))
    print("};")
    print("const size_t kf_ndatas = sizeof kf_datas / sizeof kf_datas[0];")


if __name__ == "__main__":
    main()
