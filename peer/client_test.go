package peer

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// frozen accepts connections and never answers: a peer whose process is
// stopped (SIGSTOP) still has its listening socket accept in the kernel.
func frozen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// A handshake to a frozen peer ends when the caller's context is
// cancelled, long before the client's own timeouts.
func TestHandshakeEndsWithTheCallersContext(t *testing.T) {
	addr := frozen(t)
	cl := &Client{Name: "sluice-forward:n1", Password: "pw", Timeout: time.Hour, DialTimeout: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cl.DoContext(ctx, addr, [][]byte{[]byte("PING")})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("DoContext still waits on a frozen peer's handshake after its context was cancelled")
	}
}

// The handshake also ends at the context's deadline and at DialTimeout.
func TestHandshakeIsBounded(t *testing.T) {
	addr := frozen(t)
	for _, tc := range []struct {
		name       string
		dial, ctxd time.Duration
	}{{"deadline", time.Hour, 50 * time.Millisecond}, {"dial timeout", 50 * time.Millisecond, time.Hour}} {
		cl := &Client{Name: "sluice-forward:n1", Timeout: time.Hour, DialTimeout: tc.dial}
		ctx, cancel := context.WithTimeout(context.Background(), tc.ctxd)
		done := make(chan error, 1)
		go func() {
			_, err := cl.DoContext(ctx, addr, [][]byte{[]byte("PING")})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s: a frozen peer answered", tc.name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the handshake was not bounded", tc.name)
		}
		cancel()
	}
}

// echoPONG answers every command with +PONG, counting connections.
func echoPONG(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := ReadRaw(r, nil); err != nil {
						return
					}
					if _, err := c.Write([]byte("+PONG\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// Concurrent calls keep up to MaxIdle connections for later ones instead
// of dialling again each time.
func TestIdleConnectionsAreReused(t *testing.T) {
	addr, dials := echoPONG(t)
	cl := &Client{Name: "x"}
	defer cl.Close()
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		for i := 0; i < MaxIdle; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				raw, err := cl.DoContext(context.Background(), addr, [][]byte{[]byte("PING")})
				if err != nil || string(raw) != "+PONG\r\n" {
					t.Errorf("reply %q, %v", raw, err)
				}
			}()
		}
		wg.Wait()
	}
	if n := dials(); n > 5*MaxIdle || n < 1 {
		t.Fatalf("%d dials", n)
	}
	// Sequential calls after that dial nothing new.
	before := dials()
	for i := 0; i < 20; i++ {
		if _, err := cl.Do(addr, [][]byte{[]byte("PING")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials(); n != before {
		t.Fatalf("sequential calls dialled %d new connections", n-before)
	}
}
