package envoyrls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is envoyproxy/ratelimit's dynamic_metadata of a
// response (RESPONSE_DYNAMIC_METADATA): the domain, each descriptor's
// entries ("key=value"), limit override and hits_addend, the request's
// hits_addend, and the metadata of the rules whose descriptors passed,
// merged (the first value of a name wins; mappings merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, w *work) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.Domain)}
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue())))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range w.parts {
		p := &w.parts[i]
		if p.rule != nil && p.rule.Metadata != nil && p.kind != unlimited && p.code != codeOver {
			mergeMetadata(passed, p.rule.Metadata)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's names to dst: a name dst has keeps its value,
// unless both are mappings, which merge.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			// A copy: merging into it later must not change the rule's.
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
}
