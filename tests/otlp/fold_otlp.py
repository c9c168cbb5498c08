"""Folded stacks of OTLP profiles requests, read with OpenTelemetry's own Python bindings
(PyPI opentelemetry-proto): `python3 fold_otlp.py SAMPLE_TYPE REQUEST...` prints
`comm;outer;...;inner WEIGHT` per distinct stack, summed over every request, as perfpipe's
folded output names frames (the function's `name`; an address no symbol covers as
`[basename of its mapping]`; functions whose name starts with `(` dropped, as the collapsers
drop them); off-CPU samples get `[off-cpu: STATE]` after the comm, as `--weight offcpu` writes.
"""
import collections
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2


def attr_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def fold(path, sample_type, out):
    req = profiles_service_pb2.ExportProfilesServiceRequest()
    with open(path, "rb") as f:
        req.ParseFromString(f.read())
    d = req.dictionary
    s = d.string_table
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                if s[p.sample_type.type_strindex] != sample_type:
                    continue
                for x in p.samples:
                    attrs = {}
                    for i in x.attribute_indices:
                        kv = d.attribute_table[i]
                        attrs[s[kv.key_strindex]] = attr_value(kv.value)
                    frames = []
                    for li in reversed(d.stack_table[x.stack_index].location_indices):
                        loc = d.location_table[li]
                        if not loc.lines:
                            name = s[d.mapping_table[loc.mapping_index].filename_strindex]
                            frames.append(
                                "[unknown]" if name == "[unknown]" else "[%s]" % name.rsplit("/", 1)[-1]
                            )
                            continue
                        for line in reversed(loc.lines):
                            name = s[d.function_table[line.function_index].name_strindex]
                            if not name.startswith("("):
                                frames.append(name)
                    if not frames:
                        continue
                    root = [attrs["thread.name"]]
                    if "thread.state" in attrs:
                        open_ = ", open at end" if attrs.get("open_at_end") == "true" else ""
                        root.append("[off-cpu: %s%s]" % (attrs["thread.state"], open_))
                    weight = sum(x.values) if x.values else len(x.timestamps_unix_nano)
                    out[";".join(root + frames)] += weight


def main():
    out = collections.Counter()
    for path in sys.argv[2:]:
        fold(path, sys.argv[1], out)
    for stack in sorted(out):
        print("%s %d" % (stack, out[stack]))


main()
