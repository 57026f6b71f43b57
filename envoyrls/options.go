package envoyrls

import (
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/engine"
)

// Options say how the server answers where sluice's own semantics and
// envoyproxy/ratelimit's differ. Sluice's flags run with SluiceOptions;
// `sluice ratelimit` (the drop-in) with PeerOptions and the peer's
// settings, where sluice's choices can be opted back in one by one.
type Options struct {
	// PerDescriptor charges each descriptor on its own, as
	// envoyproxy/ratelimit does: one over its limit does not keep the
	// others from being charged, and a refused descriptor's hits are
	// counted (its window stays refused, even to hits_addend 0). Unset: the
	// descriptors of a request are admitted together or not at all, and a
	// refusal charges nothing.
	PerDescriptor bool
	// StopIncrementWhenOverLimit (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT),
	// with PerDescriptor: when a descriptor would go over its limit, the
	// others of the request are not charged.
	StopIncrementWhenOverLimit bool
	// WholeSecondReset answers duration_until_reset in whole seconds,
	// unit − now % unit, as the peer does; unset, the exact time left.
	WholeSecondReset bool
	// IETFHeaders adds sluice's headers (RateLimit-Policy, RateLimit,
	// X-RateLimit-*, Retry-After: SPEC §10) to every limited answer.
	IETFHeaders bool
	// LimitHeaders, when set, adds the peer's three headers under these
	// names (LIMIT_RESPONSE_HEADERS_ENABLED).
	LimitHeaders *HeaderNames
	// GlobalShadowMode (SHADOW_MODE) answers OK overall where the request
	// is over a limit; the descriptors' statuses still say OVER_LIMIT.
	GlobalShadowMode bool
	// GlobalQuotaMode (QUOTA_MODE), with PerDescriptor, makes every
	// descriptor a quota one, as quota_mode: true makes a rule's: a quota
	// descriptor over its limit fails the request only when every quota
	// descriptor of it is over.
	GlobalQuotaMode bool
	// DynamicMetadata (RESPONSE_DYNAMIC_METADATA) returns the request in
	// the response's dynamic_metadata, with the metadata of the rules that
	// passed, as the peer does.
	DynamicMetadata bool
	// RulesOnly limits only by loaded rules, as the peer: a domain without
	// rules is not limited (no budget tree), a descriptor with no entries
	// is not limited, request errors are the peer's (gRPC code Unknown),
	// and while no rules are loaded every request is answered with the
	// error "no rate limit configuration loaded".
	RulesOnly bool
}

// HeaderNames are the names of the peer's three response headers.
type HeaderNames struct{ Limit, Remaining, Reset string }

// PeerHeaderNames are envoyproxy/ratelimit's default header names.
var PeerHeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// SluiceOptions are sluice's own semantics: all or nothing, refused calls
// charge nothing, exact reset times, IETF headers.
func SluiceOptions() Options { return Options{IETFHeaders: true} }

// PeerOptions are envoyproxy/ratelimit's answers with its default settings.
func PeerOptions() Options {
	return Options{PerDescriptor: true, WholeSecondReset: true, RulesOnly: true}
}

// SetOptions sets how the server answers; call it before serving.
func (s *Server) SetOptions(o Options) { s.opts = o }

// errNoConfig is the peer's answer while no rules are loaded.
var errNoConfig = status.Error(codes.Unknown, "no rate limit configuration loaded")

// requestError is a refusal of the request's shape: InvalidArgument, or
// the peer's plain error (gRPC Unknown) under RulesOnly.
func (s *Server) requestError(msg string) error {
	if s.opts.RulesOnly {
		return status.Error(codes.Unknown, msg)
	}
	return status.Error(codes.InvalidArgument, msg)
}

// overFlags are the limits of the flags that remember, for PerDescriptor,
// that a descriptor's window has counted a refused hit: one per window.
var overFlags = func() map[time.Duration]*engine.Limit {
	m := map[time.Duration]*engine.Limit{}
	for _, w := range unitWindows {
		l, err := engine.NewLimit(engine.FixedWindow, 1, w.window, 1)
		if err != nil {
			panic(err)
		}
		m[w.window] = &l
	}
	return m
}()

// wholeSeconds is the peer's duration_until_reset of a window at now (ns):
// whole seconds, window − now % window, counted in seconds.
func wholeSeconds(window time.Duration, now int64) int64 {
	sec := int64(window / time.Second)
	if sec <= 0 {
		return 0
	}
	n := now / int64(time.Second)
	return (sec - n%sec) * int64(time.Second)
}

const (
	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)
