package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// dnsJoinPrefix marks --join dns:NAME[:PORT]: the cluster's nodes are
// found in DNS (a Kubernetes headless service) rather than named.
const dnsJoinPrefix = "dns:"

// defaultBootstrapExpect is --bootstrap-expect when --join dns: is given
// without it: a new cluster waits for three nodes.
const defaultBootstrapExpect = 3

// dnsJoin is a parsed --join dns:NAME[:PORT].
type dnsJoin struct {
	name string
	port string // "" : the SRV records' ports, or this node's RESP port
}

// isDNSJoin reports whether a --join value asks for DNS discovery.
func isDNSJoin(v string) bool { return strings.HasPrefix(v, dnsJoinPrefix) }

// parseDNSJoin parses dns:NAME or dns:NAME:PORT.
func parseDNSJoin(v string) (dnsJoin, error) {
	rest := strings.TrimPrefix(v, dnsJoinPrefix)
	var j dnsJoin
	j.name = rest
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		j.name, j.port = rest[:i], rest[i+1:]
		if p, err := strconv.Atoi(j.port); err != nil || p < 1 || p > 65535 {
			return j, fmt.Errorf("port must be 1–65535 in dns:NAME:PORT, got %q", v)
		}
	}
	if !validDNSName(j.name) {
		return j, fmt.Errorf("must be dns:NAME or dns:NAME:PORT with NAME a DNS name (letters, digits, '-', '_', '.'), got %q", v)
	}
	return j, nil
}

func validDNSName(s string) bool {
	if s == "" || len(s) > 253 || strings.HasPrefix(s, ".") || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// srv reports whether the name is an SRV name (_service._proto.domain).
func (j dnsJoin) srv() bool { return strings.HasPrefix(j.name, "_") }

// resolver is what discovery asks of DNS; *net.Resolver is one.
type resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// discover returns the RESP addresses of the nodes behind the name: the
// targets and ports of its SRV records, or its A and AAAA records with
// the port given or ownPort. Sorted, without duplicates.
func (j dnsJoin) discover(ctx context.Context, r resolver, ownPort string) ([]string, error) {
	var out []string
	if j.srv() {
		_, recs, err := r.LookupSRV(ctx, "", "", j.name)
		if err != nil {
			return nil, err
		}
		for _, s := range recs {
			port := strconv.Itoa(int(s.Port))
			if j.port != "" {
				port = j.port
			}
			out = append(out, net.JoinHostPort(strings.TrimSuffix(s.Target, "."), port))
		}
	} else {
		ips, err := r.LookupIPAddr(ctx, j.name)
		if err != nil {
			return nil, err
		}
		port := j.port
		if port == "" {
			port = ownPort
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip.String(), port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// goResolver is Go's own resolver, which reads /etc/resolv.conf (and
// /etc/hosts) itself, the same in a static binary as in any other.
var goResolver = &net.Resolver{PreferGo: true}

// dnsDiscovery is raftfsm's Options.Discover for --join dns:, resolving
// with Go's resolver; the port defaults to the advertised RESP port.
func dnsDiscovery(cfg Config, advertise string) func(context.Context) ([]string, error) {
	j, _ := parseDNSJoin(cfg.Join) // Validate has checked it
	_, port, _ := net.SplitHostPort(advertise)
	return func(ctx context.Context) ([]string, error) { return j.discover(ctx, goResolver, port) }
}
