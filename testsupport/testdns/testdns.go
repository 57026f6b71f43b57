// Package testdns is a DNS server for tests: A, AAAA and SRV records held
// in memory and changeable while it runs, answered over UDP. Tests point
// a resolver at it (net.Resolver's Dial, or a namespace's resolv.conf).
package testdns

import (
	"net"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// SRV is one SRV record's target and port.
type SRV struct {
	Target string
	Port   uint16
}

// Server answers queries for the names it was given; any other name is
// NXDOMAIN.
type Server struct {
	conn net.PacketConn
	mu   sync.Mutex
	ips  map[string][]net.IP
	srvs map[string][]SRV
	done chan struct{}
}

// Start listens on addr (UDP, e.g. "127.0.0.1:0") and serves until Close.
func Start(addr string) (*Server, error) {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{conn: c, ips: map[string][]net.IP{}, srvs: map[string][]SRV{}, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Close stops the server.
func (s *Server) Close() {
	s.conn.Close()
	<-s.done
}

func fqdn(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

// SetIPs makes name answer with these addresses (A for IPv4, AAAA for
// IPv6); none makes it unknown again.
func (s *Server) SetIPs(name string, ips ...string) {
	var out []net.IP
	for _, ip := range ips {
		out = append(out, net.ParseIP(ip))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(out) == 0 {
		delete(s.ips, fqdn(name))
		return
	}
	s.ips[fqdn(name)] = out
}

// SetSRV makes name answer with these SRV records.
func (s *Server) SetSRV(name string, recs ...SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srvs[fqdn(name)] = recs
}

func (s *Server) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n]); ok {
			s.conn.WriteTo(out, from)
		}
	}
}

// answer builds the reply to one query.
func (s *Server) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(q.Name.String())
	s.mu.Lock()
	ips, srvs := s.ips[name], s.srvs[name]
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if ips == nil && srvs == nil {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	for _, ip := range ips {
		switch v4 := ip.To4(); {
		case q.Type == dnsmessage.TypeA && v4 != nil:
			b.AResource(hdr, dnsmessage.AResource{A: [4]byte(v4)})
		case q.Type == dnsmessage.TypeAAAA && v4 == nil:
			b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: [16]byte(ip.To16())})
		}
	}
	for _, r := range srvs {
		if q.Type == dnsmessage.TypeSRV {
			b.SRVResource(hdr, dnsmessage.SRVResource{Priority: 10, Weight: 10, Port: r.Port,
				Target: dnsmessage.MustNewName(fqdn(r.Target))})
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
