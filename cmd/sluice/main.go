// Command sluice is the sluice rate-limit server. It reads its settings
// (flags over SLUICE_* variables over --config file over defaults),
// validates them, runs the node, re-reads its files on SIGHUP and stops
// cleanly on SIGTERM or SIGINT.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	// Quota time zones resolve on machines without a zone database
	// (scratch images have none) from the copy built into the binary.
	_ "time/tzdata"

	"github.com/sluice-rl/sluice/server"
)

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == "ratelimit" {
		// The image's /bin/ratelimit, a link to sluice: the drop-in.
		args = append([]string{"ratelimit"}, args...)
	}
	os.Exit(run(args, os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// usageHead is the top of `sluice --help`: the subcommands, then the
// flags of a node.
const usageHead = `sluice — a rate-limit server that speaks the Redis protocol.

Usage:
  sluice [flags]             run a node (settings: flags over SLUICE_* variables over --config file)
  sluice version             print the version
  sluice hash-password       read a password line from stdin, print its SHA-256 (for --acl-file)
  sluice ratelimit [flags]   run a node as envoyproxy/ratelimit: its environment variables, files and answers
                             (also when the binary is named ratelimit; see docs/envoy.md)
  sluice healthcheck [--ready] [--http-addr host:port]
                             exit 0 if the node's /healthz (/readyz with --ready) answers 200
  sluice help                print this help

Run 'sluice <subcommand> --help' for a subcommand's options.

Flags of a node:
`

func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "hash-password":
			return hashPassword(args[1:], stdin, stdout, stderr)
		case "healthcheck":
			return healthcheck(args[1:], getenv, stdout, stderr)
		case "version", "--version":
			fmt.Fprintln(stdout, "sluice", server.Version)
			return 0
		case "ratelimit":
			return ratelimit(args[1:], getenv, stdout, stderr)
		case "help":
			args = []string{"--help"}
		}
	}
	return runNode(args, getenv, stdout, stderr, nil)
}

// runNode runs a node with args and the environment; mode, if not nil,
// makes it envoyproxy/ratelimit's drop-in.
func runNode(args []string, getenv func(string) string, stdout, stderr io.Writer, mode *ratelimitMode) int {
	var usage bytes.Buffer
	cfg, err := server.Load(args, getenv, &usage)
	if errors.Is(err, server.ErrHelp) {
		// The flag package's text starts "Usage of sluice:"; the head above
		// replaces that line.
		_, flags, _ := strings.Cut(usage.String(), "\n")
		fmt.Fprint(stdout, usageHead+flags)
		return 0
	}
	if err != nil {
		// One line naming the flag, never the whole usage.
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	if mode != nil {
		cfg.Ratelimit = &mode.RatelimitMode
	}
	if err := cfg.Validate(); err != nil {
		return invalid(stderr, err)
	}
	if err := cfg.CheckSecrets(); err != nil {
		return invalid(stderr, err)
	}
	if err := checkRequireAuth(cfg, getenv); err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	clock, note, err := testClock(getenv)
	if err != nil {
		return invalid(stderr, err)
	}
	cfg = cfg.WithDefaults()
	log := newLogger(cfg, stderr)
	if note != "" && clock != nil {
		log.Info(note)
	} else if note != "" {
		log.Warn(note)
	}
	if mode != nil {
		mode.logNotes(log)
	}
	// Signals are caught before the node opens its ports: a SIGTERM sent as
	// soon as a port answers (a supervisor, a test) is a drain, never the
	// runtime's default exit. One that comes while the node opens waits in
	// the channel and is handled as soon as it is up.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	node, err := server.OpenWith(cfg, log, server.NodeHooks{Now: clock})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	// Client buffers count once in resident memory, not twice (memlimit.go).
	governed := make(chan struct{})
	defer close(governed)
	go server.GovernMemory(int64(cfg.MaxClientBuffers), node.Server.ClientBuffers, getenv, governed)
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				// Re-read the files the node was given; never stop.
				log.Info("reloading", "signal", s.String())
				node.Server.Reload()
				continue
			}
			log.Info("stopping", "signal", s.String())
			break wait
		case err := <-node.Failed():
			log.Error("node failed", "err", err)
			node.Close()
			return 1
		}
	}
	signal.Ignore(syscall.SIGHUP) // a reload during the stop is moot
	go func() {
		<-sig
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	node.Close()
	log.Info("stopped")
	return 0
}

// requireAuthEnv, when set, makes a node without a password (no
// --requirepass, no --acl-file) refuse to start instead of starting in
// protected mode, where it answers loopback clients only: inside a
// container that is no client at all. Its value, unless "1" or "true", is
// the fix to print, naming where the password should come from:
// docker-compose.yml sets it to "set SLUICE_PASSWORD …", so that compose
// itself needs the password only to start nodes, never for ps or config.
const requireAuthEnv = "SLUICE_REQUIRE_AUTH"

// checkRequireAuth refuses a node without a password when requireAuthEnv
// is set, in one line.
func checkRequireAuth(cfg server.Config, getenv func(string) string) error {
	hint := getenv(requireAuthEnv)
	if hint == "" || cfg.RequirePass != "" || cfg.ACLFile != "" {
		return nil
	}
	msg := "no password (--requirepass, SLUICE_REQUIREPASS, or --acl-file), and " + requireAuthEnv + " says this node needs one"
	if h := strings.ToLower(hint); h != "1" && h != "true" {
		msg += ": " + hint
	}
	return errors.New(msg)
}

func newLogger(cfg server.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(cfg.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// invalid reports settings that Validate or CheckSecrets refused, one
// line each, and returns the exit status for them.
func invalid(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "sluice: invalid settings:")
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "  "+line)
	}
	return 2
}

const hashPasswordUsage = `Usage: sluice hash-password < password-file
       echo "$PASSWORD" | sluice hash-password

Reads one password line from standard input and prints its SHA-256 in hex,
the form an --acl-file line takes: user <name> <limiter|admin> <hash>.
`

// hashPassword prints the SHA-256 of the password read from stdin, in the
// form the ACL file takes.
func hashPassword(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprint(stdout, hashPasswordUsage)
			return 0
		}
		fmt.Fprintf(stderr, "sluice hash-password: unexpected argument %q: the password is read from standard input\n\n%s", args[0], hashPasswordUsage)
		return 2
	}
	if f, ok := stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(stderr, "sluice hash-password: type the password and press Enter (it is shown as you type; pipe it in to avoid that)")
		}
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		fmt.Fprintln(stderr, "sluice hash-password:", err)
		return 1
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		fmt.Fprintln(stderr, "sluice hash-password: read an empty password from stdin")
		return 2
	}
	sum := sha256.Sum256([]byte(pw))
	fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
	return 0
}

// healthcheck asks a running node's /healthz (or /readyz with --ready) and
// exits 0 if it answers 200: for container HEALTHCHECKs, where the image
// has no curl. The address comes from --http-addr, SLUICE_HTTP_ADDR or the
// default; without --http-addr, when nothing listens there, it asks
// /healthcheck on envoyproxy/ratelimit's port (PORT, 8080), where the
// image's node listens when run as /bin/ratelimit.
func healthcheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http-addr", "", "HTTP address of the node (default $SLUICE_HTTP_ADDR or 127.0.0.1:9380)")
	ready := fs.Bool("ready", false, "check /readyz (leader known, log applied) instead of /healthz")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	a := *addr
	if a == "" {
		a = getenv("SLUICE_HTTP_ADDR")
	}
	if a == "" {
		a = "127.0.0.1:9380"
	}
	if host, port, err := net.SplitHostPort(a); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		a = net.JoinHostPort("127.0.0.1", port)
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + a + path)
	if err != nil && *addr == "" {
		// Nothing there: the image's node may run as /bin/ratelimit, on
		// envoyproxy/ratelimit's HTTP port (PORT, 8080) instead.
		port := getenv("PORT")
		if port == "" {
			port = "8080"
		}
		var err2 error
		if resp, err2 = c.Get("http://" + net.JoinHostPort("127.0.0.1", port) + "/healthcheck"); err2 == nil {
			err, path = nil, "/healthcheck"
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice healthcheck:", err)
		return 1
	}
	defer resp.Body.Close()
	fmt.Fprintln(stdout, path, resp.Status)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
