// Command sluice is the sluice rate-limit server. It reads its settings
// (flags over SLUICE_* variables over --config file over defaults),
// validates them, runs the node and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-rl/sluice/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "hash-password" {
		return hashPassword(stdin, stdout, stderr)
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
