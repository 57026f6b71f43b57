package server

import "log/slog"

// Node is a running sluice process: the RESP/HTTP server and, later, its
// Raft member.
type Node struct {
	Server *Server
	failed chan error
}

// Open starts a node from a validated config.
func Open(cfg Config, log *slog.Logger) (*Node, error) {
	s, err := New(cfg, log)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return &Node{Server: s, failed: make(chan error, 1)}, nil
}

// Failed delivers an error if the node stops on its own.
func (n *Node) Failed() <-chan error { return n.failed }

// Close stops the node gracefully.
func (n *Node) Close() { n.Server.Shutdown() }
