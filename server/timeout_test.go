package server

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// closedByServer waits (at most 15 s) until the server closes c.
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err := c.Read(make([]byte, 64))
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the server kept the connection open")
		}
		t.Fatalf("reading: %v", err)
	}
}

func TestIdleTimeoutClosesIdleConnections(t *testing.T) {
	n := startNode(t, func(c *Config) { c.Timeout = time.Second })
	idle, err := net.Dial("tcp", n.Server.RespAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy := resptest.Dial(t, n.Server.RespAddr())
	start := time.Now()
	// A client that keeps talking is not idle.
	for time.Since(start) < 2500*time.Millisecond {
		if got := busy.Do("PING"); got != "+PONG" {
			t.Fatalf("PING on a busy connection: %s", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	closedByServer(t, idle)
	if got := busy.Do("CONFIG", "GET", "timeout"); got != `["timeout" "1"]` {
		t.Fatalf("CONFIG GET timeout: %s", got)
	}
	if got := scrape(t, n.Server.HTTPAddr())[`sluice_connections_closed_total{reason="idle"}`]; got < 1 {
		t.Fatalf("sluice_connections_closed_total{reason=\"idle\"} = %v", got)
	}
}

func TestAuthTimeoutClosesUnauthenticatedConnections(t *testing.T) {
	n := startNode(t, func(c *Config) { c.RequirePass = "a-long-enough-password"; c.AuthTimeout = time.Second })
	silent, err := net.Dial("tcp", n.Server.RespAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	authed := resptest.Dial(t, n.Server.RespAddr())
	if got := authed.Do("AUTH", "a-long-enough-password"); got != "+OK" {
		t.Fatal(got)
	}
	closedByServer(t, silent)
	time.Sleep(1500 * time.Millisecond) // past the deadline: an authenticated client stays
	if got := authed.Do("PING"); got != "+PONG" {
		t.Fatalf("an authenticated connection after the auth deadline: %s", got)
	}
	if got := scrape(t, n.Server.HTTPAddr())[`sluice_connections_closed_total{reason="auth_timeout"}`]; got < 1 {
		t.Fatalf("sluice_connections_closed_total{reason=\"auth_timeout\"} = %v", got)
	}
}
