// Command sluice is the sluice rate-limit server. It reads its settings
// (flags over SLUICE_* variables over --config file over defaults),
// validates them, runs the node and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"bufio"
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
	"strings"
	"syscall"
	"time"
	// Quota time zones resolve on machines without a zone database
	// (scratch images have none) from the copy built into the binary.
	_ "time/tzdata"

	"github.com/sluice-rl/sluice/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "hash-password" {
		return hashPassword(stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version") {
		fmt.Fprintln(stdout, "sluice", server.Version)
		return 0
	}
	cfg, err := server.Load(args, getenv, stderr)
	if errors.Is(err, server.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "sluice: invalid settings:")
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "  "+line)
		}
		return 2
	}
	log := newLogger(cfg, stderr)
	node, err := server.Open(cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		log.Info("stopping", "signal", s.String())
	case err := <-node.Failed():
		log.Error("node failed", "err", err)
		node.Close()
		return 1
	}
	go func() {
		<-sig
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	node.Close()
	log.Info("stopped")
	return 0
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

// hashPassword prints the SHA-256 of the password read from stdin, in the
// form the ACL file takes.
func hashPassword(stdin io.Reader, stdout, stderr io.Writer) int {
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
// default.
func healthcheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http-addr", "", "HTTP address of the node (default $SLUICE_HTTP_ADDR or 127.0.0.1:9380)")
	ready := fs.Bool("ready", false, "check /readyz (leader known, log applied) instead of /healthz")
	if err := fs.Parse(args); err != nil {
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
