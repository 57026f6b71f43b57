package server

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
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

// RESET on an authenticated connection with a password set drops its
// role, and with it the connection is back to the limits before AUTH: 10
// arguments at most, and closed at --auth-timeout unless it
// authenticates again.
func TestResetReturnsToTheLimitsBeforeAuth(t *testing.T) {
	n := startNode(t, func(c *Config) { c.RequirePass = "a-long-enough-password"; c.AuthTimeout = time.Second })
	for _, tc := range []struct {
		name string
		then func(c *resptest.Client)
	}{
		{"a command of 20 arguments", func(c *resptest.Client) {
			c.Conn.Write([]byte("*20\r\n"))
			if got := c.Read(); got != "-ERR Protocol error: unauthenticated multibulk length (at most 10 arguments before AUTH)" {
				t.Errorf("20 arguments after RESET: %s", got)
			}
		}},
		{"silence", func(c *resptest.Client) { closedByServer(t, c.Conn) }},
	} {
		c := resptest.Dial(t, n.Server.RespAddr())
		if got := c.Do("AUTH", "a-long-enough-password"); got != "+OK" {
			t.Fatal(got)
		}
		if got := c.Do("RESET"); got != "+RESET" {
			t.Fatal(got)
		}
		if got := c.Do("PING"); !strings.HasPrefix(got, "-NOAUTH") {
			t.Fatalf("%s: PING after RESET: %s", tc.name, got)
		}
		tc.then(c)
	}
}
