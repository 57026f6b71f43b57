package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Policy is what the budget tree says about a path, read with RL.BUDGET GET
// from the node configured at the path or, for an implicit child, from its
// deepest configured ancestor.
type Policy struct {
	// Path is the path asked about.
	Path string
	// Node is the configured node the policy was read from: Path itself,
	// or its deepest configured ancestor when Path is an implicit child.
	Node string
	// Implicit reports that Path is not configured itself (Node != Path).
	Implicit bool

	// HasLimit reports whether calls to Path have an effective limit of
	// their own: the node's "effective" object is not null and, for an
	// implicit child, the node's sharing is inherit or enforce (a private
	// node's limit is not its children's). Ancestors' aggregate buckets
	// may limit Path even when HasLimit is false.
	HasLimit bool
	// Rate, Window and Burst are the node's effective limit
	// (effective.rate per effective.window, effective.burst) when
	// HasLimit; zero otherwise.
	Rate   int64
	Window time.Duration
	Burst  int64

	// Mode is the node's budget.mode (unlimited, allocated, shared) and
	// Total its budget.total, counted per TotalWindow (the node's
	// sustained.window).
	Mode        string
	Total       int64
	TotalWindow time.Duration

	// Algorithm, Sharing, Scope and Strategy are the node's config fields
	// of the same names; Cost is its default cost per call.
	Algorithm string
	Sharing   string
	Scope     string
	Strategy  string
	Cost      int64
	// ResponseHeaders is the node's response_headers: whether gateways
	// should send rate-limit headers for calls it governs.
	ResponseHeaders bool
	// Version is the Raft index of the change that last set the node.
	Version uint64
}

// nodeJSON is the reply of RL.BUDGET GET.
type nodeJSON struct {
	Path   string `json:"path"`
	Config struct {
		Sharing   string `json:"sharing"`
		Algorithm string `json:"algorithm"`
		Sustained struct {
			Window string `json:"window"`
		} `json:"sustained"`
		Budget struct {
			Mode  string `json:"mode"`
			Total int64  `json:"total"`
		} `json:"budget"`
		Scope           string `json:"scope"`
		Strategy        string `json:"strategy"`
		Cost            int64  `json:"cost"`
		ResponseHeaders *bool  `json:"response_headers"`
	} `json:"config"`
	Effective *struct {
		Rate   int64  `json:"rate"`
		Window string `json:"window"`
		Burst  int64  `json:"burst"`
	} `json:"effective"`
	Version uint64 `json:"version"`
}

// node is a parsed RL.BUDGET GET reply.
type node struct {
	path                       string
	hasLimit                   bool
	rate, burst, total, cost   int64
	window, totalWindow        time.Duration
	mode, algo, sharing, scope string
	strategy                   string
	headers                    bool
	version                    uint64
}

type cachedNode struct {
	n   *node // nil: not configured
	exp time.Time
}

func parseNode(path string, b []byte) (*node, error) {
	var js nodeJSON
	if err := json.Unmarshal(b, &js); err != nil {
		return nil, fmt.Errorf("client: RL.BUDGET GET %s reply is not the node JSON: %v", path, err)
	}
	c := &js.Config
	n := &node{path: js.Path, total: c.Budget.Total, cost: c.Cost, mode: c.Budget.Mode, algo: c.Algorithm,
		sharing: c.Sharing, scope: c.Scope, strategy: c.Strategy, headers: true, version: js.Version}
	if n.path == "" {
		n.path = path
	}
	if c.ResponseHeaders != nil {
		n.headers = *c.ResponseHeaders
	}
	if c.Sustained.Window != "" {
		w, err := ParseWindow(c.Sustained.Window)
		if err != nil {
			return nil, fmt.Errorf("client: RL.BUDGET GET %s: config.sustained.window: %v", path, err)
		}
		n.totalWindow = w
	}
	if e := js.Effective; e != nil {
		w, err := ParseWindow(e.Window)
		if err != nil {
			return nil, fmt.Errorf("client: RL.BUDGET GET %s: effective.window: %v", path, err)
		}
		n.hasLimit, n.rate, n.window, n.burst = true, e.Rate, w, e.Burst
	}
	return n, nil
}

// policy describes a call to path governed by n.
func (n *node) policy(path string) Policy {
	p := Policy{Path: path, Node: n.path, Implicit: n.path != path,
		Mode: n.mode, Total: n.total, TotalWindow: n.totalWindow,
		Algorithm: n.algo, Sharing: n.sharing, Scope: n.scope, Strategy: n.strategy, Cost: n.cost,
		ResponseHeaders: n.headers, Version: n.version}
	if n.hasLimit && (!p.Implicit || n.sharing != "private") {
		p.HasLimit, p.Rate, p.Window, p.Burst = true, n.rate, n.window, n.burst
	}
	return p
}

// Policy returns the budget policy for path: RL.BUDGET GET path or, when
// path is not configured, the same for its deepest configured ancestor
// (walking up the '/' segments), as the server resolves calls
// (docs/budgets.md, "Which node governs a call"). Each reply is cached per
// path for the PolicyTTL. If no node on the path is
// configured, the error wraps the server's NOBUDGET reply (IsNoBudget).
func (c *Client) Policy(ctx context.Context, path string) (Policy, error) {
	if path == "" {
		return Policy{}, errors.New("client: Policy needs a budget path, got \"\"")
	}
	for attempt := 0; attempt < 2; attempt++ {
		fresh := attempt > 0
		for p := path; ; {
			n, err := c.node(ctx, p, fresh)
			if err != nil {
				return Policy{}, fmt.Errorf("client: policy for '%s': %w", path, err)
			}
			if n != nil {
				return n.policy(path), nil
			}
			i := strings.LastIndexByte(p, '/')
			if i <= 0 {
				break
			}
			p = p[:i]
		}
		// Nothing configured on the path: let the server say so in its own
		// words. A dry run consumes nothing.
		_, err := c.call(ctx, "RL.ACQUIRE", path, "DRYRUN")
		if err != nil {
			return Policy{}, fmt.Errorf("client: policy for '%s': %w", path, err)
		}
		// The server resolves the path after all: the tree changed since
		// the cached replies. Read it again, bypassing the cache.
	}
	return Policy{}, fmt.Errorf("client: policy for '%s': the server resolves the path but RL.BUDGET GET finds no node on it", path)
}

// node returns the configured node at exactly path, or nil; from the cache
// unless fresh.
func (c *Client) node(ctx context.Context, path string, fresh bool) (*node, error) {
	now := c.now()
	if c.ttl > 0 && !fresh {
		c.mu.Lock()
		e, ok := c.nodes[path]
		c.mu.Unlock()
		if ok && now.Before(e.exp) {
			return e.n, nil
		}
	}
	v, err := c.call(ctx, "RL.BUDGET", "GET", path)
	var n *node
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return nil, fmt.Errorf("RL.BUDGET GET '%s': %w", path, err)
	default:
		b, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("client: RL.BUDGET GET %s reply is not a string: %v", path, v)
		}
		if n, err = parseNode(path, []byte(b)); err != nil {
			return nil, err
		}
	}
	if c.ttl > 0 {
		c.store(path, cachedNode{n: n, exp: now.Add(c.ttl)}, now)
	}
	return n, nil
}

func (c *Client) store(path string, e cachedNode, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.nodes[path]; !ok && len(c.nodes) >= c.maxEntries {
		for p, old := range c.nodes {
			if !now.Before(old.exp) {
				delete(c.nodes, p)
			}
		}
		for p := range c.nodes {
			if len(c.nodes) < c.maxEntries {
				break
			}
			delete(c.nodes, p)
		}
	}
	c.nodes[path] = e
}
