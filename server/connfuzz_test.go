package server

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// FuzzConnectionLoop sends arbitrary bytes over a real connection to a
// running node (the connection loop, parser, authentication, commands and
// replies as a whole), then ends its side of the connection. Whatever was
// sent: the node does not crash; every reply it writes is well-formed
// RESP; it closes the connection once the client has finished (a held
// call, a pipeline, a half-sent command, none outlives its client); the
// connection is forgotten; and another client is still served. The node
// requires a password, so that inputs run both before AUTH and, through
// the seeds, as a limiter (which cannot stop the node).
func FuzzConnectionLoop(f *testing.F) {
	dir := f.TempDir()
	acl := filepath.Join(dir, "users.acl")
	sum := sha256.Sum256([]byte("gw-secret"))
	if err := os.WriteFile(acl, []byte("user gw limiter "+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	n := startTestNode(f, testNode{Config: func(c *Config) {
		c.ACLFile = acl
		c.MaxBulkLen = 1 << 20
		c.MaxClientBuffers = 8 << 20
		c.MaxArgs = 64
	}})
	addr := n.Server.RespAddr()
	// The bystander is a raw connection: the fuzz function cannot use
	// helpers bound to f.
	bc, err := net.Dial("tcp", addr)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { bc.Close() })
	br := bufio.NewReader(bc)
	do := func(args ...string) string {
		bc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := bc.Write(resptest.Encode(args...)); err != nil {
			return err.Error()
		}
		r, err := resptest.Parse(br)
		if err != nil {
			return err.Error()
		}
		return r
	}
	if got := do("AUTH", "gw", "gw-secret"); got != "+OK" {
		f.Fatal(got)
	}
	auth := string(resptest.Encode("AUTH", "gw", "gw-secret"))
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"PING\r\nECHO hi\r\n",
		auth + "*5\r\n$10\r\nRL.ACQUIRE\r\n$1\r\nk\r\n$4\r\nRATE\r\n$1\r\n5\r\n$4\r\nWAIT\r\n",
		auth + "RL.ACQUIRE w RATE 1 PER minute\r\nRL.ACQUIRE w RATE 1 PER minute WAIT 60000\r\nPING\r\n",
		auth + "MULTI\r\nRL.ACQUIRE m RATE 3\r\nEXEC\r\n",
		auth + "HELLO 3\r\nCLIENT TRACKING on OPTIN\r\nRL.PEEK k RATE 5\r\n",
		auth + "CL.THROTTLE t 5 10 60 1\r\nRL.QUOTA q QUOTA 5 PER day\r\n",
		auth + "RL.QUOTASYNC n1 {\"seq\":18446744073709551615,\"now\":1,\"quotas\":[{}]}\r\n",
		"*3\r\n$4\r\nAUTH\r\n$2\r\ngw\r\n$9\r\ngw-secret\r\n*2\r\n$4\r\nECHO\r\n$1048576\r\nabc",
		"*2\r\n$33554432\r\n", "*100000\r\n", "*1\r\n*1\r\n*1\r\n", "\"unbalanced\r\n", "*-1\r\n*0\r\n\r\n",
		auth + "SUBSCRIBE x\r\nDEBUG SLEEP 10\r\nSHUTDOWN\r\nCLIENT KILL ID 1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Read the replies while writing: a client that does not read
		// could block the node's writes to it, and then its own.
		replies := make(chan error, 1)
		go func() {
			r := bufio.NewReader(c)
			for {
				if _, err := resptest.Parse(r); err != nil {
					replies <- err
					return
				}
			}
		}()
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
		// 30 s is a bound for a busy machine, not a timing: the node
		// closes at once.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := <-replies; !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("after %q: %v (a malformed reply, or the node kept the connection)", in, err)
		}
		if got := do("PING"); got != "+PONG" {
			t.Fatalf("after %q, another client's PING: %s", in, got)
		}
		// The connection is forgotten: only the bystander is left.
		deadline := time.Now().Add(30 * time.Second)
		for n.Server.env.Clients.Len() > 1 {
			if time.Now().After(deadline) {
				t.Fatalf("after %q: %d connections still known", in, n.Server.env.Clients.Len())
			}
			time.Sleep(time.Millisecond)
		}
	})
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
