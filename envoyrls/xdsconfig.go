package envoyrls

// Rules pushed over xDS (CONFIG_TYPE=GRPC_XDS_SOTW): each resource is a
// ratelimit.config.ratelimit.v3.RateLimitConfig, one domain and its
// descriptors, the protobuf form of a rule file. A pushed set of resources
// is loaded as a set of files is: through the same parser, so that it is
// validated the same way (duplicate keys, units, replaces, domains written
// twice without MERGE_DOMAIN_CONFIG) and names its rules and metrics the
// same way.

import (
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// ConfigFromXDS loads the rules of pushed RateLimitConfig resources, in
// the order given, with the choices of o (MergeDomains, QuotaMode). An
// empty list is a configuration without domains. Errors name the
// resource and the descriptor.
func ConfigFromXDS(resources []*rlsconfv3.RateLimitConfig, o LoadOptions) (*Config, error) {
	c := &Config{domains: map[string]*domainRules{}, opts: o}
	for i, r := range resources {
		name := r.GetName()
		if name == "" {
			name = "#" + strconv.Itoa(i)
		}
		file := fmt.Sprintf("RateLimitConfig %q", name)
		if err := c.addDomain(file, xdsDomainNode(r)); err != nil {
			return nil, err
		}
		c.files = append(c.files, file)
	}
	return c, nil
}

// The nodes built below carry no line (0): configError then names the
// resource and, for a descriptor, its composite key instead.

func xdsDomainNode(r *rlsconfv3.RateLimitConfig) *yaml.Node {
	m := mapping()
	addScalar(m, "domain", r.GetDomain(), "!!str")
	addSeq(m, "descriptors", xdsDescriptorNodes(r.GetDescriptors()))
	return m
}

func xdsDescriptorNodes(ds []*rlsconfv3.RateLimitDescriptor) []*yaml.Node {
	out := make([]*yaml.Node, 0, len(ds))
	for _, d := range ds {
		m := mapping()
		addScalar(m, "key", d.GetKey(), "!!str")
		if d.GetValue() != "" {
			addScalar(m, "value", d.GetValue(), "!!str")
		}
		if rl := d.GetRateLimit(); rl != nil {
			m.Content = append(m.Content, scalar("rate_limit", "!!str"), xdsLimitNode(rl))
		}
		for _, f := range []struct {
			name string
			on   bool
		}{{"shadow_mode", d.GetShadowMode()}, {"detailed_metric", d.GetDetailedMetric()}, {"quota_mode", d.GetQuotaMode()}} {
			if f.on {
				addScalar(m, f.name, "true", "!!bool")
			}
		}
		if md := d.GetMetadata(); md != nil {
			var n yaml.Node
			if err := n.Encode(md.AsMap()); err == nil {
				m.Content = append(m.Content, scalar("metadata", "!!str"), &n)
			}
		}
		if len(d.GetDescriptors()) > 0 {
			addSeq(m, "descriptors", xdsDescriptorNodes(d.GetDescriptors()))
		}
		out = append(out, m)
	}
	return out
}

func xdsLimitNode(rl *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping()
	// UNKNOWN stands for no unit: valid with unlimited, refused without
	// it, as the peer's loader treats the enum's name.
	if u := rl.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		addScalar(m, "unit", strings.ToLower(u.String()), "!!str")
	} else if !rl.GetUnlimited() {
		addScalar(m, "unit", "unknown", "!!str")
	}
	addScalar(m, "requests_per_unit", strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10), "!!int")
	if rl.GetUnlimited() {
		addScalar(m, "unlimited", "true", "!!bool")
	}
	if rl.GetName() != "" {
		addScalar(m, "name", rl.GetName(), "!!str")
	}
	if reps := rl.GetReplaces(); len(reps) > 0 {
		var list []*yaml.Node
		for _, r := range reps {
			e := mapping()
			addScalar(e, "name", r.GetName(), "!!str")
			list = append(list, e)
		}
		addSeq(m, "replaces", list)
	}
	return m
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func scalar(v, tag string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

func addScalar(m *yaml.Node, key, v, tag string) {
	m.Content = append(m.Content, scalar(key, "!!str"), scalar(v, tag))
}

func addSeq(m *yaml.Node, key string, items []*yaml.Node) {
	m.Content = append(m.Content, scalar(key, "!!str"), &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items})
}
